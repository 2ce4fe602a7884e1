//! [`PrefixStore`]: a namespace inside another store.

use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::Result;

use super::Store;

/// A [`Store`] that puts `prefix/` in front of every key and forwards to an
/// inner store, like torch's `PrefixStore` (so a key `k` of
/// `PrefixStore::new("pg0", tcp)` is the key `pg0/k` for a torch rank that
/// uses the same prefix).
///
/// [`Store::num_keys`] and the timeout are the inner store's: they are not
/// limited to the prefix, as in torch.
#[derive(Debug, Clone)]
pub struct PrefixStore {
    prefix: String,
    inner: Arc<dyn Store>,
}

impl PrefixStore {
    /// Keys `prefix/<key>` in `inner`.
    pub fn new(prefix: impl Into<String>, inner: Arc<dyn Store>) -> Self {
        PrefixStore {
            prefix: prefix.into(),
            inner,
        }
    }

    /// The prefix, without the `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The store this one forwards to.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }

    fn keys(&self, keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| self.key(k)).collect()
    }
}

/// `&str` views of owned keys.
fn views(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

impl Store for PrefixStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&self.key(key), value)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.inner.get(&self.key(key))
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(&self.key(key), delta)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.inner.compare_set(&self.key(key), expected, desired)
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        self.inner.delete_key(&self.key(key))
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.inner.check(&views(&self.keys(keys)))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.inner.wait(&views(&self.keys(keys)), timeout)
    }

    fn num_keys(&self) -> Result<i64> {
        self.inner.num_keys()
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.inner.set_timeout(timeout);
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.append(&self.key(key), value)
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.inner.multi_get(&views(&self.keys(keys)))
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        self.inner.multi_set(&views(&self.keys(keys)), values)
    }

    /// The inner store's keys under `prefix/`, without it.
    fn list_keys(&self) -> Result<Vec<String>> {
        let head = self.key("");
        Ok(self
            .inner
            .list_keys()?
            .into_iter()
            .filter_map(|k| k.strip_prefix(&head).map(str::to_owned))
            .collect())
    }

    fn queue_push(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.queue_push(&self.key(key), value)
    }

    fn queue_pop(&self, key: &str, block: bool) -> Result<Vec<u8>> {
        self.inner.queue_pop(&self.key(key), block)
    }

    fn queue_len(&self, key: &str) -> Result<i64> {
        self.inner.queue_len(&self.key(key))
    }

    fn barrier(&self, key: &str, world_size: usize, timeout: Duration) -> Result<()> {
        self.inner.barrier(&self.key(key), world_size, timeout)
    }
}
