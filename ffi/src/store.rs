//! `dipu_store`: the key-value stores ranks meet through (dipu-comm's
//! `TcpStore`, `FileStore`, `HashStore`, `PrefixStore`), as opaque handles
//! looked up in a registry of live stores on every use.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use dipu_comm::store::{
    EnvRendezvous, FileStore, HashStore, PrefixStore, Store, TcpStore, DEFAULT_TIMEOUT,
};
use dipu_runtime::{Error, Result};

use crate::handles::{bytes, c_str, c_strs, duration_ms, Registry};
use crate::status::{dipu_status, ffi_boundary, non_null, write_buffer, write_out};

/// A key-value store shared by the ranks of a job (opaque; made by a
/// dipu_store_*_create function or dipu_store_from_env, freed by
/// dipu_store_destroy). Keys are NUL-terminated UTF-8 strings, values are
/// bytes.
pub struct dipu_store {
    pub(crate) store: Arc<dyn Store>,
    /// The server's port, for TCP stores.
    tcp_port: Option<u16>,
    /// Values taken off a queue by dipu_store_queue_pop that did not fit
    /// the caller's buffer, by queue: the next pop of that queue through
    /// this handle returns them first, so none is lost.
    pub(crate) undelivered: parking_lot::Mutex<std::collections::HashMap<String, Vec<u8>>>,
}

/// Live stores, by the address handed to C.
static STORES: Registry<dipu_store> = Registry::new("store");

/// The store `handle` names, or `InvalidArgument`.
pub(crate) fn lookup(handle: *const dipu_store) -> Result<Arc<dipu_store>> {
    STORES.get(handle, "store")
}

/// Registers `store` and writes its handle to `out` (checked first).
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
pub(crate) unsafe fn create_out(
    out: *mut *mut dipu_store,
    make: impl FnOnce() -> Result<(Arc<dyn Store>, Option<u16>)>,
) -> Result<()> {
    non_null(out, "out")?;
    let (store, tcp_port) = make()?;
    let handle = STORES.insert(dipu_store {
        store,
        tcp_port,
        undelivered: Default::default(),
    });
    // SAFETY: forwarded caller's contract.
    unsafe { write_out(out, "out", handle) }
}

/// Runs `op` on the store, key and value of a C call that writes one value
/// (set, append, queue push), checking each argument first.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `value` NULL or valid for
/// reading `len` bytes.
pub(crate) unsafe fn with_key_value(
    store: *const dipu_store,
    key: *const c_char,
    value: *const c_void,
    len: usize,
    op: impl FnOnce(&dyn Store, &str, &[u8]) -> Result<()>,
) -> Result<()> {
    let s = lookup(store)?;
    // SAFETY: forwarded caller's contract.
    let key = unsafe { c_str(key, "key") }?;
    // SAFETY: forwarded caller's contract.
    let value = unsafe { bytes(value, len, "value") }?;
    op(&*s.store, key, value)
}

/// A world size given as a count, 0 meaning unknown.
fn world(n: usize) -> Option<usize> {
    (n != 0).then_some(n)
}

/// Creates a TCP store, torch.distributed's TCPStore(host, port,
/// world_size, is_master, timeout): when `is_master` is non-zero, starts a
/// server on `port` of every local address (port 0: a free one, see
/// dipu_store_tcp_port); then connects to `host`:`port`, retrying until
/// `timeout_ms` (positive: milliseconds; 0: 300 s; negative: no limit),
/// which is also the timeout of blocking calls. With a `world_size` (0 =
/// unknown) every store counts itself in, and the master's call returns
/// only once `world_size` stores have. The server lives as long as the
/// master's store. Speaks PyTorch's wire protocol: torch ranks can share it.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL or non-UTF-8 `host` or
/// a NULL `out`, DIPU_STATUS_TIMEOUT when no server answers (or the
/// workers do not all join) in time, DIPU_STATUS_VENDOR_ERROR for a socket
/// error (a port in use, with the OS error in the message). Thread-safe.
///
/// # Safety
/// `host` must be NULL or a NUL-terminated string, `out` NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_tcp_create(
    host: *const c_char,
    port: u16,
    is_master: i32,
    world_size: usize,
    timeout_ms: i64,
    out: *mut *mut dipu_store,
) -> dipu_status {
    ffi_boundary!("dipu_store_tcp_create", {
        // SAFETY: forwarded caller's contract.
        let host = unsafe { c_str(host, "host") }?;
        let timeout = duration_ms(timeout_ms, DEFAULT_TIMEOUT);
        // SAFETY: forwarded caller's contract.
        unsafe {
            create_out(out, || {
                let store =
                    TcpStore::new(host, port, world(world_size), is_master != 0, timeout, true)?;
                let port = store.port();
                Ok((Arc::new(store), Some(port)))
            })
        }
    })
}

/// Joins a torchrun-style rendezvous described by the environment
/// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; torch's env://): rank 0
/// starts the server (unless TORCHELASTIC_USE_AGENT_STORE=True), every rank
/// connects, and each waits up to `timeout_ms` (positive: milliseconds; 0:
/// 300 s; negative: no limit) for the others to join.
/// Errors: DIPU_STATUS_INVALID_CONFIG for a missing or bad variable (named
/// in the message), DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`, and the
/// errors of dipu_store_tcp_create. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_from_env(
    timeout_ms: i64,
    out: *mut *mut dipu_store,
) -> dipu_status {
    ffi_boundary!("dipu_store_from_env", {
        let timeout = duration_ms(timeout_ms, DEFAULT_TIMEOUT);
        // SAFETY: forwarded caller's contract.
        unsafe {
            create_out(out, || {
                let store = EnvRendezvous::from_env()?.store(timeout)?;
                let port = store.port();
                Ok((Arc::new(store), Some(port)))
            })
        }
    })
}

/// Stores the port of a TCP store's server in `*out` (the port picked
/// when the master asked for port 0).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a store that
/// is not a TCP store, or a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a uint16_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_tcp_port(store: *mut dipu_store, out: *mut u16) -> dipu_status {
    ffi_boundary!("dipu_store_tcp_port", {
        non_null(out, "out")?;
        let s = lookup(store)?;
        let port = s.tcp_port.ok_or_else(|| {
            Error::invalid_argument(format!("{store:p} is not a TCP store ({:?})", s.store))
        })?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", port) }
    })
}

/// Opens (creating it if needed) a file store in the file `path`, shared by
/// the processes of one host (or of a file system with working flock); with
/// `num_workers` (0 = unknown), the last of that many stores to be
/// destroyed removes the file. Blocking calls poll the file and wait up to
/// 300 s (see dipu_store_set_timeout).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL or non-UTF-8 `path` or a
/// NULL `out`, DIPU_STATUS_VENDOR_ERROR when the file cannot be opened or
/// locked. Thread-safe.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string, `out` NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_file_create(
    path: *const c_char,
    num_workers: usize,
    out: *mut *mut dipu_store,
) -> dipu_status {
    ffi_boundary!("dipu_store_file_create", {
        // SAFETY: forwarded caller's contract.
        let path = unsafe { c_str(path, "path") }?;
        // SAFETY: forwarded caller's contract.
        unsafe {
            create_out(out, || {
                Ok((Arc::new(FileStore::new(path, world(num_workers))?), None))
            })
        }
    })
}

/// Creates an in-memory store for the threads of this process (ranks as
/// threads); blocking calls wait up to 300 s (see dipu_store_set_timeout).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_hash_create(out: *mut *mut dipu_store) -> dipu_status {
    ffi_boundary!("dipu_store_hash_create", {
        // SAFETY: forwarded caller's contract.
        unsafe { create_out(out, || Ok((Arc::new(HashStore::new()), None))) }
    })
}

/// Creates a store that puts "`prefix`/" in front of every key and forwards
/// to `inner` (torch's PrefixStore): one per process group on a shared
/// store keeps their keys apart. It keeps `inner` alive: destroying `inner`'s
/// handle does not end it. Its timeout and key count are `inner`'s.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL or non-UTF-8 `prefix`,
/// an unknown `inner` or a NULL `out`. Thread-safe.
///
/// # Safety
/// `prefix` must be NULL or a NUL-terminated string, `out` NULL or valid
/// for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_prefix_create(
    prefix: *const c_char,
    inner: *mut dipu_store,
    out: *mut *mut dipu_store,
) -> dipu_status {
    ffi_boundary!("dipu_store_prefix_create", {
        // SAFETY: forwarded caller's contract.
        let prefix = unsafe { c_str(prefix, "prefix") }?;
        let inner = STORES.get(inner, "inner")?;
        // SAFETY: forwarded caller's contract.
        unsafe {
            create_out(out, || {
                let store = PrefixStore::new(prefix, Arc::clone(&inner.store));
                Ok((Arc::new(store), None))
            })
        }
    })
}

/// Destroys `store` (NULL is a no-op). A call using it on another thread
/// finishes first; process groups and prefix stores made from it keep the
/// store itself alive. Destroying the master's TCP store stops its server
/// once nothing uses it.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a handle that is not a live
/// store (a second destroy, for one). Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_store_destroy(store: *mut dipu_store) -> dipu_status {
    ffi_boundary!("dipu_store_destroy", { STORES.remove(store) })
}

/// Sets `key` to the `len` bytes at `value` (NULL only with `len` 0),
/// replacing any old value; every client sees it once the call returns.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL or
/// non-UTF-8 key, a NULL `value` with `len` > 0; DIPU_STATUS_VENDOR_ERROR
/// or DIPU_STATUS_TIMEOUT when the server cannot be reached. Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `value` NULL or valid for
/// reading `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_set(
    store: *mut dipu_store,
    key: *const c_char,
    value: *const c_void,
    len: usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_set", {
        // SAFETY: forwarded caller's contract.
        unsafe { with_key_value(store, key, value, len, |s, k, v| s.set(k, v)) }
    })
}

/// Waits up to the store's timeout for `key` to be set, then copies its
/// value into `buf` of `len` bytes and its size into `*needed` (when
/// `needed` is not NULL; no NUL is added). `buf` NULL with `len` 0 only
/// asks for the size (after waiting for the key).
/// Errors: DIPU_STATUS_TIMEOUT when the key is not set in time (the
/// message names it), DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a
/// NULL or non-UTF-8 key, or a `buf` shorter than the value (`*needed`
/// still receives the size, `buf` is untouched). Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `buf` NULL or valid for
/// writing `len` bytes, `needed` NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_get(
    store: *mut dipu_store,
    key: *const c_char,
    buf: *mut c_void,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_get", {
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let key = unsafe { c_str(key, "key") }?;
        let value = s.store.get(key)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_buffer(&value, buf.cast(), len, needed) }
    })
}

/// Adds `delta` to the integer at `key` (a missing key counts as 0; the
/// value is kept as decimal ASCII, as torch does) and stores the new value
/// in `*out`.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL or
/// non-UTF-8 key, a NULL `out`, a value that is not an integer, or an
/// overflow (over TCP such a value makes the server drop the connection:
/// DIPU_STATUS_VENDOR_ERROR). Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `out` NULL or valid for
/// writing an int64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_add(
    store: *mut dipu_store,
    key: *const c_char,
    delta: i64,
    out: *mut i64,
) -> dipu_status {
    ffi_boundary!("dipu_store_add", {
        non_null(out, "out")?;
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let key = unsafe { c_str(key, "key") }?;
        let value = s.store.add(key, delta)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", value) }
    })
}

/// Sets `key` to `desired` (`desired_len` bytes) if its value is
/// `expected` (`expected_len` bytes), or if the key is missing and
/// `expected_len` is 0; copies the value after the call into `buf` of
/// `len` bytes and its size into `*needed` (when not NULL), as
/// dipu_store_get does. (A missing key with a non-empty `expected` gives
/// back `expected` unchanged: torch's behaviour.)
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL or
/// non-UTF-8 key, a NULL pointer with a non-zero length, or a too short
/// `buf` (the swap did happen then; `*needed` receives the size).
/// Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `expected` and `desired`
/// NULL or valid for reading their lengths, `buf` NULL or valid for writing
/// `len` bytes, `needed` NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_compare_set(
    store: *mut dipu_store,
    key: *const c_char,
    expected: *const c_void,
    expected_len: usize,
    desired: *const c_void,
    desired_len: usize,
    buf: *mut c_void,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_compare_set", {
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract (for the next three).
        let key = unsafe { c_str(key, "key") }?;
        // SAFETY: as above.
        let expected = unsafe { bytes(expected, expected_len, "expected") }?;
        // SAFETY: as above.
        let desired = unsafe { bytes(desired, desired_len, "desired") }?;
        let value = s.store.compare_set(key, expected, desired)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_buffer(&value, buf.cast(), len, needed) }
    })
}

/// Stores 1 in `*out` if every one of the `nkeys` keys is set, else 0,
/// without waiting.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL
/// `keys` with `nkeys` > 0, a NULL or non-UTF-8 key, a NULL `out`.
/// Thread-safe.
///
/// # Safety
/// `keys` must be NULL or valid for reading `nkeys` pointers, each NULL or
/// a NUL-terminated string; `out` NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_check(
    store: *mut dipu_store,
    keys: *const *const c_char,
    nkeys: usize,
    out: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_store_check", {
        non_null(out, "out")?;
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let keys = unsafe { c_strs(keys, nkeys, "keys") }?;
        let all = s.store.check(&keys)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", all.into()) }
    })
}

/// Waits until every one of the `nkeys` keys is set, up to `timeout_ms`
/// (positive: milliseconds; 0: the store's timeout; negative: no limit).
/// Errors: DIPU_STATUS_TIMEOUT naming the missing keys,
/// DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL `keys` with
/// `nkeys` > 0, a NULL or non-UTF-8 key. Thread-safe (a TCP store's calls
/// from several threads take turns on its connection).
///
/// # Safety
/// `keys` must be NULL or valid for reading `nkeys` pointers, each NULL or
/// a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_wait(
    store: *mut dipu_store,
    keys: *const *const c_char,
    nkeys: usize,
    timeout_ms: i64,
) -> dipu_status {
    ffi_boundary!("dipu_store_wait", {
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let keys = unsafe { c_strs(keys, nkeys, "keys") }?;
        let timeout = duration_ms(timeout_ms, s.store.timeout());
        s.store.wait(&keys, timeout)
    })
}

/// Deletes `key`; stores 1 in `*deleted` if it existed, else 0 (`deleted`
/// may be NULL).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store or a NULL or
/// non-UTF-8 key. Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `deleted` NULL or valid
/// for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_delete_key(
    store: *mut dipu_store,
    key: *const c_char,
    deleted: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_store_delete_key", {
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let key = unsafe { c_str(key, "key") }?;
        let existed = s.store.delete_key(key)?;
        if !deleted.is_null() {
            // SAFETY: not NULL; valid for writing by the caller's contract.
            unsafe { deleted.write(existed.into()) };
        }
        Ok(())
    })
}

/// Stores the number of keys in the store in `*out` (for a prefix store:
/// of its inner store; a TCP store counts its internal keys too, as
/// torch's does).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store or a NULL
/// `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_num_keys(store: *mut dipu_store, out: *mut i64) -> dipu_status {
    ffi_boundary!("dipu_store_num_keys", {
        non_null(out, "out")?;
        let n = lookup(store)?.store.num_keys()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", n) }
    })
}

/// Changes the timeout of the store's blocking calls (dipu_store_get,
/// dipu_store_wait with 0) to `timeout_ms` (positive: milliseconds; 0: 300
/// s; negative: no limit). A prefix store changes its inner store's.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_store_set_timeout(store: *mut dipu_store, timeout_ms: i64) -> dipu_status {
    ffi_boundary!("dipu_store_set_timeout", {
        let s = lookup(store)?;
        s.store
            .set_timeout(duration_ms(timeout_ms, DEFAULT_TIMEOUT));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::dipu_status::*;
    use std::ptr::{null, null_mut};

    #[test]
    fn hash_and_prefix_stores_through_the_c_functions() {
        let mut inner = null_mut();
        let mut store = null_mut();
        // SAFETY: valid out-pointers, strings and buffers throughout.
        unsafe {
            assert_eq!(dipu_store_hash_create(&mut inner), DIPU_OK);
            assert_eq!(
                dipu_store_prefix_create(c"pg".as_ptr(), inner, &mut store),
                DIPU_OK
            );
            assert_eq!(
                dipu_store_set(store, c"k".as_ptr(), b"hello".as_ptr().cast(), 5),
                DIPU_OK
            );
            let mut needed = 0;
            let mut small = [0u8; 2];
            let status = dipu_store_get(
                store,
                c"k".as_ptr(),
                small.as_mut_ptr().cast(),
                2,
                &mut needed,
            );
            assert_eq!(status, DIPU_STATUS_INVALID_ARGUMENT);
            assert_eq!((needed, small), (5, [0, 0]));
            let mut buf = [0u8; 8];
            let status = dipu_store_get(
                inner,
                c"pg/k".as_ptr(),
                buf.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!(status, DIPU_OK);
            assert_eq!(&buf[..needed], b"hello");
            let mut n = 0;
            assert_eq!(dipu_store_add(store, c"n".as_ptr(), 5, &mut n), DIPU_OK);
            assert_eq!(dipu_store_add(store, c"n".as_ptr(), -2, &mut n), DIPU_OK);
            assert_eq!(n, 3);
            let status = dipu_store_compare_set(
                store,
                c"c".as_ptr(),
                null(),
                0,
                b"v1".as_ptr().cast(),
                2,
                buf.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!(status, DIPU_OK);
            assert_eq!(&buf[..needed], b"v1");
            let keys = [c"k".as_ptr(), c"n".as_ptr()];
            let mut all = 0;
            assert_eq!(dipu_store_check(store, keys.as_ptr(), 2, &mut all), DIPU_OK);
            assert_eq!(all, 1);
            assert_eq!(dipu_store_wait(store, keys.as_ptr(), 2, 10), DIPU_OK);
            let missing = [c"nope".as_ptr()];
            assert_eq!(
                dipu_store_wait(store, missing.as_ptr(), 1, 10),
                DIPU_STATUS_TIMEOUT
            );
            let mut deleted = 0;
            assert_eq!(
                dipu_store_delete_key(store, c"k".as_ptr(), &mut deleted),
                DIPU_OK
            );
            assert_eq!(deleted, 1);
            assert_eq!(
                dipu_store_delete_key(store, c"k".as_ptr(), &mut deleted),
                DIPU_OK
            );
            assert_eq!(deleted, 0);
            let mut keys = 0;
            assert_eq!(dipu_store_num_keys(inner, &mut keys), DIPU_OK);
            assert_eq!(keys, 2);
            let mut port = 0;
            assert_eq!(
                dipu_store_tcp_port(store, &mut port),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_store_set_timeout(store, 1), DIPU_OK);
            assert_eq!(
                dipu_store_get(store, c"nope".as_ptr(), null_mut(), 0, null_mut()),
                DIPU_STATUS_TIMEOUT
            );
            // The prefix store keeps the inner one alive.
            assert_eq!(dipu_store_destroy(inner), DIPU_OK);
            assert_eq!(dipu_store_num_keys(store, &mut keys), DIPU_OK);
            assert_eq!(dipu_store_destroy(store), DIPU_OK);
            assert_eq!(dipu_store_destroy(store), DIPU_STATUS_INVALID_ARGUMENT);
            assert_eq!(
                dipu_store_num_keys(store, &mut keys),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_store_destroy(null_mut()), DIPU_OK);
        }
    }

    #[test]
    fn tcp_master_on_a_free_port_and_a_second_client() {
        let mut master = null_mut();
        let mut client = null_mut();
        let mut port = 0u16;
        // SAFETY: valid out-pointers, strings and buffers throughout.
        unsafe {
            let status = dipu_store_tcp_create(c"127.0.0.1".as_ptr(), 0, 1, 0, 10_000, &mut master);
            assert_eq!(status, DIPU_OK);
            assert_eq!(dipu_store_tcp_port(master, &mut port), DIPU_OK);
            assert_ne!(port, 0);
            let status =
                dipu_store_tcp_create(c"127.0.0.1".as_ptr(), port, 0, 0, 10_000, &mut client);
            assert_eq!(status, DIPU_OK);
            assert_eq!(
                dipu_store_set(master, c"a".as_ptr(), b"xyz".as_ptr().cast(), 3),
                DIPU_OK
            );
            let mut buf = [0u8; 3];
            let mut needed = 0;
            let status = dipu_store_get(
                client,
                c"a".as_ptr(),
                buf.as_mut_ptr().cast(),
                3,
                &mut needed,
            );
            assert_eq!(status, DIPU_OK);
            assert_eq!(&buf, b"xyz");
            assert_eq!(dipu_store_destroy(client), DIPU_OK);
            assert_eq!(dipu_store_destroy(master), DIPU_OK);
        }
    }

    #[test]
    fn file_store_through_the_c_functions() {
        let dir = tempfile::tempdir().unwrap();
        let path = std::ffi::CString::new(dir.path().join("store").to_str().unwrap()).unwrap();
        let (mut a, mut b) = (null_mut(), null_mut());
        let mut buf = [0u8; 4];
        let mut needed = 0;
        // SAFETY: valid out-pointers, strings and buffers throughout.
        unsafe {
            assert_eq!(dipu_store_file_create(path.as_ptr(), 2, &mut a), DIPU_OK);
            assert_eq!(dipu_store_file_create(path.as_ptr(), 2, &mut b), DIPU_OK);
            assert_eq!(
                dipu_store_set(a, c"k".as_ptr(), b"v".as_ptr().cast(), 1),
                DIPU_OK
            );
            let status = dipu_store_get(b, c"k".as_ptr(), buf.as_mut_ptr().cast(), 4, &mut needed);
            assert_eq!(status, DIPU_OK);
            assert_eq!(&buf[..needed], b"v");
            assert_eq!(dipu_store_destroy(a), DIPU_OK);
            assert_eq!(dipu_store_destroy(b), DIPU_OK);
        }
        assert!(
            !dir.path().join("store").exists(),
            "the last of 2 workers removes the file"
        );
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut s = null_mut();
        // SAFETY: NULLs and a made-up handle, which the functions check.
        unsafe {
            assert_eq!(
                dipu_store_tcp_create(null(), 0, 1, 0, 0, &mut s),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_hash_create(null_mut()),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            let forged = 0x1000 as *mut dipu_store;
            assert_eq!(
                dipu_store_set(forged, c"k".as_ptr(), null(), 0),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_store_hash_create(&mut s), DIPU_OK);
            assert_eq!(
                dipu_store_set(s, c"k".as_ptr(), null(), 1),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_set(s, null(), null(), 0),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_check(s, null(), 1, &mut 0),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_set(s, c"k".as_ptr(), b"x".as_ptr().cast(), 1),
                DIPU_OK
            );
            assert_eq!(
                dipu_store_add(s, c"k".as_ptr(), 1, &mut 0),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_store_destroy(s), DIPU_OK);
        }
    }
}
