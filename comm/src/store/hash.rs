//! [`HashStore`]: an in-memory store for the threads of one process.

use std::collections::HashMap;
use std::time::Duration;

use dipu_deviceapi::Result;
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::errors;
use super::kv::{self, AddError};
use super::timeout::{deadline, TimeoutCell};
use super::Store;

const NAME: &str = "HashStore";

/// An in-memory [`Store`] shared by the threads of one process (wrap it in
/// an `Arc`). Blocking calls sleep on a `Condvar` until a key is set.
#[derive(Debug)]
pub struct HashStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    timeout: TimeoutCell,
}

impl Default for HashStore {
    fn default() -> Self {
        HashStore::new()
    }
}

impl HashStore {
    /// An empty store with the default timeout ([`super::DEFAULT_TIMEOUT`]).
    pub fn new() -> Self {
        HashStore::with_timeout(super::DEFAULT_TIMEOUT)
    }

    /// An empty store whose blocking calls wait up to `timeout`.
    pub fn with_timeout(timeout: Duration) -> Self {
        HashStore {
            map: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            timeout: TimeoutCell::new(timeout),
        }
    }

    /// Waits on the locked map until every one of `keys` is in it.
    fn wait_locked(
        &self,
        map: &mut MutexGuard<'_, HashMap<String, Vec<u8>>>,
        keys: &[&str],
        timeout: Duration,
    ) -> Result<()> {
        let at = deadline(timeout);
        let mut timed_out = false;
        loop {
            let missing: Vec<&str> = keys
                .iter()
                .copied()
                .filter(|k| !map.contains_key(*k))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if timed_out {
                return Err(errors::wait_timeout(NAME, &missing, timeout));
            }
            match at {
                Some(at) => timed_out = self.changed.wait_until(map, at).timed_out(),
                None => self.changed.wait(map),
            }
        }
    }

    /// Stores `value` at `key` in the locked map and wakes the waiters.
    fn store(&self, map: &mut HashMap<String, Vec<u8>>, key: &str, value: Vec<u8>) {
        map.insert(key.to_owned(), value);
        self.changed.notify_all();
    }
}

impl Store for HashStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut map = self.map.lock();
        self.store(&mut map, key, value.to_vec());
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let timeout = self.timeout();
        let mut map = self.map.lock();
        self.wait_locked(&mut map, &[key], timeout)?;
        Ok(map[key].clone())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.map.lock();
        let n = kv::add(map.get(key).map(Vec::as_slice), delta).map_err(|e| match e {
            AddError::NotAnInteger => errors::not_an_integer(NAME, key, &map[key]),
            AddError::Overflow(old) => errors::add_overflow(NAME, key, old, delta),
        })?;
        self.store(&mut map, key, kv::counter_bytes(n));
        Ok(n)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let mut map = self.map.lock();
        let (store, answer) = kv::compare_set(map.get(key).map(Vec::as_slice), expected, desired);
        let answer = answer.to_vec();
        if store {
            self.store(&mut map, key, desired.to_vec());
        }
        Ok(answer)
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        Ok(self.map.lock().remove(key).is_some())
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let map = self.map.lock();
        Ok(keys.iter().all(|k| map.contains_key(*k)))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let mut map = self.map.lock();
        self.wait_locked(&mut map, keys, timeout)
    }

    fn num_keys(&self) -> Result<i64> {
        Ok(self.map.lock().len() as i64)
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut map = self.map.lock();
        let mut new = map.get(key).cloned().unwrap_or_default();
        new.extend_from_slice(value);
        self.store(&mut map, key, new);
        Ok(())
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        errors::check_multi_set(keys, values)?;
        let mut map = self.map.lock();
        for (key, value) in keys.iter().zip(values) {
            map.insert((*key).to_owned(), value.to_vec());
        }
        self.changed.notify_all();
        Ok(())
    }
}
