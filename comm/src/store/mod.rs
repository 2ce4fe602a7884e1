//! Key-value stores for rendezvous: the [`Store`] trait and its
//! implementations.
//!
//! | store | scope | blocking `get`/`wait` |
//! |---|---|---|
//! | [`TcpStore`] | any number of hosts; speaks torch.distributed's TCPStore wire protocol, so dipu-rs ranks and PyTorch ranks can share one store, in either role | the server answers `WAIT` when the keys appear |
//! | [`FileStore`] | the processes of one host (or of a shared file system with working `flock`) | polls the file |
//! | [`HashStore`] | the threads of one process | `Condvar` |
//! | [`PrefixStore`] | wraps any store, puts `prefix/` in front of every key (torch's `PrefixStore`) | as the inner store |
//!
//! [`TcpStore::from_env`] joins a torchrun-style rendezvous (`MASTER_ADDR`,
//! `MASTER_PORT`, `RANK`, `WORLD_SIZE`; [`EnvRendezvous`]): rank 0 hosts the
//! server, unless torchrun's agent does (`TORCHELASTIC_USE_AGENT_STORE`).
//! `scripts/torch-env.sh` installs the PyTorch the interop tests run against.
//!
//! # Semantics shared by every store
//!
//! - `add` keeps the counter as a decimal ASCII string (`"42"`), as torch
//!   does, so `get` on a counter returns its digits; `add` on a value that is
//!   not an integer is an `InvalidArgument` error naming the key (over TCP
//!   the server can only drop the connection, as torch's does: the call
//!   fails with `VendorError`, and the next call reconnects).
//! - `compare_set(key, expected, desired)` sets `desired` when the value is
//!   `expected`, or when the key is missing and `expected` is empty, and
//!   returns the value after the call. (A missing key with a non-empty
//!   `expected` returns `expected` unchanged: torch's behaviour.)
//! - A timeout fails with `ErrorKind::Timeout` naming the missing keys.
//!   `Duration::ZERO` checks once; `Duration::MAX` waits forever.
//! - Queues live beside the values (`list_keys` and `num_keys` count values
//!   only), but a non-empty queue counts as set for `check` and `wait`, as
//!   on torch's server. `queue_pop` without blocking fails with `NotReady`
//!   on an empty queue (torch's `DistQueueEmptyError`). `FileStore` has no
//!   queues: `Unsupported`, as torch's has none.
//!
//! # The TCPStore wire protocol (checked against PyTorch 2.15.0 from PyPI)
//!
//! Facts read from PyTorch's `TCPStore.cpp`, `store/TCPStoreBackend.{hpp,cpp}`
//! and `store/TCPStoreLibUvBackend.cpp`, and tested against the real thing
//! (`comm/tests/store_torch_interop.rs`, both server back ends):
//!
//! - Integers travel raw in the host's byte order: little-endian on every
//!   platform PyTorch ships for. Strings and byte values are a `u64` length
//!   then the bytes; key counts are `u64` (`size_t`).
//! - A request is one query-type byte and its fields. Query types:
//!   `VALIDATE 0, SET 1, COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6,
//!   GETNUMKEYS 7, DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11,
//!   CANCEL_WAIT 12, PING 13, QUEUE_PUSH 14, QUEUE_POP 15, QUEUE_LEN 16,
//!   LIST_KEYS 17, BARRIER 18`.
//! - A connection starts with `VALIDATE` + `u32` magic `0x3C85F7CE` (no
//!   reply; any other first message makes the server drop the connection),
//!   then the client sends `PING` + `u32` nonce (its pid) and expects the
//!   nonce back. The client retries connect + validate + ping with backoff
//!   until its timeout, so workers may start before the server.
//! - `SET`, `APPEND`, `MULTI_SET` (`u64` count, then key/value pairs) and
//!   `QUEUE_PUSH` have no reply. `COMPARE_SET` answers the value after the
//!   call; `ADD` (`i64` delta) the new `i64`; `DELETE_KEY` and `GETNUMKEYS`
//!   an `i64`; `CHECK` a byte, `READY 0` / `NOT_READY 1`. `QUEUE_POP`
//!   answers the queue's `i64` length and, if it was not empty, the popped
//!   value; `QUEUE_LEN` an `i64`; `LIST_KEYS` an `i64` count and the keys.
//!   `BARRIER` (key, `i64` world size) counts arrivals at the key and answers
//!   `STOP_WAITING` to everyone once `world_size` have arrived.
//! - `GET` on the server never waits (the libuv server answers an empty value
//!   for a missing key); the client first sends `WAIT` for the key, then
//!   `GET`. `MULTI_GET` likewise follows a `WAIT` for all its keys.
//! - `WAIT` answers `STOP_WAITING 0` once every key exists, which may be much
//!   later: the client waits with its own timeout, and on expiry sends
//!   `CANCEL_WAIT`, to which the server answers `WAIT_CANCELED 1` (after a
//!   `STOP_WAITING` if the keys appeared in between: our client then
//!   reports success).
//! - Our client follows `SET`, `APPEND` and `MULTI_SET` with a `PING` and
//!   returns once it comes back, so a write is visible to every client when
//!   the call returns (torch's client does not wait for them).
//! - The client puts `/` in front of every user key. With
//!   `wait_for_workers`, every client `ADD`s 1 to the raw key `init/` and the
//!   master polls it (`WAIT` + `GET`) until `world_size` have joined.
//! - The libuv server (torch's default since 2.4) caps a key at 8 KiB, a
//!   value at 8 MiB and a key count at 131072, and closes a connection that
//!   sends anything malformed; ours does the same.

use std::fmt::Debug;
use std::time::Duration;

use dipu_deviceapi::Result;

mod errors;
mod file;
mod hash;
mod kv;
mod prefix;
mod tcp;
mod timeout;

pub use file::FileStore;
pub use hash::HashStore;
pub use prefix::PrefixStore;
pub use tcp::{EnvRendezvous, TcpStore, TcpStoreServer, TORCH_VALIDATION_MAGIC};

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

    /// Appends `value` to the value of `key` (a missing key starts empty).
    ///
    /// The provided method retries [`Store::compare_set`] until it wins, so it
    /// is atomic on any store; the stores of this module do it in one step.
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        loop {
            let old = if self.check(&[key])? {
                self.get(key)?
            } else {
                Vec::new()
            };
            let mut new = old.clone();
            new.extend_from_slice(value);
            if self.compare_set(key, &old, &new)? == new {
                return Ok(());
            }
        }
    }

    /// The values of `keys`, waiting up to the store's timeout for all of
    /// them.
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        self.wait(keys, self.timeout())?;
        keys.iter().map(|key| self.get(key)).collect()
    }

    /// Sets each of `keys` to the value at the same index of `values`.
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        errors::check_multi_set(keys, values)?;
        keys.iter()
            .zip(values)
            .try_for_each(|(key, value)| self.set(key, value))
    }

    /// Every key that holds a value (queues are not listed), in no
    /// particular order.
    fn list_keys(&self) -> Result<Vec<String>>;

    /// Appends `value` to the back of the queue `key`. While a queue is not
    /// empty, its key counts as set for [`Store::check`] and
    /// [`Store::wait`]. The provided method answers `Unsupported`.
    fn queue_push(&self, key: &str, value: &[u8]) -> Result<()> {
        let _ = (key, value);
        Err(errors::no_queues("queue_push"))
    }

    /// Takes the value at the front of the queue `key`. With `block`, waits
    /// up to the store's timeout for one (then `Timeout`); without, an empty
    /// queue is `NotReady`. The provided method answers `Unsupported`.
    fn queue_pop(&self, key: &str, block: bool) -> Result<Vec<u8>> {
        let _ = (key, block);
        Err(errors::no_queues("queue_pop"))
    }

    /// The number of values in the queue `key` (0 for a queue never
    /// pushed to). The provided method answers `Unsupported`.
    fn queue_len(&self, key: &str) -> Result<i64> {
        let _ = key;
        Err(errors::no_queues("queue_len"))
    }

    /// Counts this caller in at the barrier `key` and waits up to `timeout`
    /// until `world_size` callers have arrived (then `Timeout`). A barrier
    /// key serves one barrier: use a fresh key for the next.
    ///
    /// The provided method is torch's: `add` on `key/num_members`, the last
    /// arrival sets `key/last_member`, everyone waits for it. `TcpStore`
    /// does it in one request.
    fn barrier(&self, key: &str, world_size: usize, timeout: Duration) -> Result<()> {
        errors::check_world_size(world_size)?;
        let last = format!("{key}/last_member");
        let arrived = self.add(&format!("{key}/num_members"), 1)?;
        if arrived >= world_size as i64 {
            self.set(&last, b"1")?;
        }
        self.wait(&[&last], timeout)
    }
}
