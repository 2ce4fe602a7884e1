//! [`HashStore`]: an in-memory store for the threads of one process.

use std::collections::{HashMap, VecDeque};
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
    map: Mutex<Entries>,
    changed: Condvar,
    timeout: TimeoutCell,
}

/// What a [`HashStore`] holds: values and queues, apart, as in torch.
#[derive(Debug, Default)]
struct Entries {
    values: HashMap<String, Vec<u8>>,
    queues: HashMap<String, VecDeque<Vec<u8>>>,
}

impl Entries {
    /// Whether `key` counts as set: a value, or a non-empty queue.
    fn present(&self, key: &str) -> bool {
        self.values.contains_key(key) || self.queues.get(key).is_some_and(|q| !q.is_empty())
    }
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
            map: Mutex::new(Entries::default()),
            changed: Condvar::new(),
            timeout: TimeoutCell::new(timeout),
        }
    }

    /// Waits on the locked map until `present` holds for every one of
    /// `keys`.
    fn wait_locked(
        &self,
        map: &mut MutexGuard<'_, Entries>,
        keys: &[&str],
        timeout: Duration,
        present: impl Fn(&Entries, &str) -> bool,
    ) -> Result<()> {
        let at = deadline(timeout);
        let mut timed_out = false;
        loop {
            let missing: Vec<&str> = keys.iter().copied().filter(|k| !present(map, k)).collect();
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
    fn store(&self, map: &mut Entries, key: &str, value: Vec<u8>) {
        map.values.insert(key.to_owned(), value);
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
        // A non-empty queue of that name has no value to get: wait for one.
        self.wait_locked(&mut map, &[key], timeout, |map, k| {
            map.values.contains_key(k)
        })?;
        Ok(map.values[key].clone())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.map.lock();
        let n = kv::add(map.values.get(key).map(Vec::as_slice), delta).map_err(|e| match e {
            AddError::NotAnInteger => errors::not_an_integer(NAME, key, &map.values[key]),
            AddError::Overflow(old) => errors::add_overflow(NAME, key, old, delta),
        })?;
        self.store(&mut map, key, kv::counter_bytes(n));
        Ok(n)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let mut map = self.map.lock();
        let (store, answer) =
            kv::compare_set(map.values.get(key).map(Vec::as_slice), expected, desired);
        let answer = answer.to_vec();
        if store {
            self.store(&mut map, key, desired.to_vec());
        }
        Ok(answer)
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        Ok(self.map.lock().values.remove(key).is_some())
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let map = self.map.lock();
        Ok(keys.iter().all(|k| map.present(k)))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let mut map = self.map.lock();
        self.wait_locked(&mut map, keys, timeout, Entries::present)
    }

    fn num_keys(&self) -> Result<i64> {
        Ok(self.map.lock().values.len() as i64)
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut map = self.map.lock();
        let mut new = map.values.get(key).cloned().unwrap_or_default();
        new.extend_from_slice(value);
        self.store(&mut map, key, new);
        Ok(())
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        errors::check_multi_set(keys, values)?;
        let mut map = self.map.lock();
        for (key, value) in keys.iter().zip(values) {
            map.values.insert((*key).to_owned(), value.to_vec());
        }
        self.changed.notify_all();
        Ok(())
    }

    fn list_keys(&self) -> Result<Vec<String>> {
        Ok(self.map.lock().values.keys().cloned().collect())
    }

    fn queue_push(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut map = self.map.lock();
        map.queues
            .entry(key.to_owned())
            .or_default()
            .push_back(value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn queue_pop(&self, key: &str, block: bool) -> Result<Vec<u8>> {
        let timeout = self.timeout();
        let at = deadline(timeout);
        let mut map = self.map.lock();
        loop {
            if let Some(value) = map.queues.get_mut(key).and_then(VecDeque::pop_front) {
                return Ok(value);
            }
            if !block {
                return Err(errors::queue_empty(NAME, key));
            }
            let timed_out = match at {
                Some(at) => self.changed.wait_until(&mut map, at).timed_out(),
                None => {
                    self.changed.wait(&mut map);
                    false
                }
            };
            if timed_out && map.queues.get(key).is_none_or(VecDeque::is_empty) {
                return Err(errors::wait_timeout(NAME, &[key], timeout));
            }
        }
    }

    fn queue_len(&self, key: &str) -> Result<i64> {
        Ok(self.map.lock().queues.get(key).map_or(0, VecDeque::len) as i64)
    }
}
