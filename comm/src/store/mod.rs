//! Key-value stores for rendezvous: the [`Store`] trait and its
//! implementations.

use std::fmt::Debug;
use std::time::Duration;

use dipu_deviceapi::Result;

/// The default time a blocking store call waits (torch's default too).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A key-value store shared by the ranks of a job, with torch.distributed's
/// `c10d::Store` semantics. Keys are strings, values are bytes.
///
/// Blocking calls ([`Store::get`], [`Store::wait`]) wait for missing keys up
/// to the store's timeout and then fail with `ErrorKind::Timeout`, naming
/// the keys.
pub trait Store: Send + Sync + Debug {
    /// Sets `key` to `value`, replacing any old value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// The value of `key`, waiting up to the store's timeout for it to be set.
    fn get(&self, key: &str) -> Result<Vec<u8>>;

    /// Adds `delta` to the integer stored at `key` (a missing key counts as
    /// 0; values are decimal ASCII, as torch stores them) and returns the new
    /// value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;

    /// Sets `key` to `desired` if its value is `expected` (or if it is
    /// missing and `expected` is empty); returns the value after the call.
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>>;

    /// Deletes `key`; returns whether it existed.
    fn delete_key(&self, key: &str) -> Result<bool>;

    /// Whether every one of `keys` is set, without waiting.
    fn check(&self, keys: &[&str]) -> Result<bool>;

    /// Waits until every one of `keys` is set, up to `timeout`.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()>;

    /// The number of keys in the store.
    fn num_keys(&self) -> Result<i64>;

    /// The timeout of blocking calls.
    fn timeout(&self) -> Duration;

    /// Changes the timeout of blocking calls.
    fn set_timeout(&self, timeout: Duration);
}
