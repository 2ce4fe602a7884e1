//! The rest of c10d's `Store` for C: append, list_keys, queues and
//! barrier (what a c10 adapter needs for `hasExtendedApi`, `queuePush`,
//! `queuePop`, `queueLen`, `listKeys` and `barrier`).

use std::ffi::{c_char, c_void};

use crate::handles::{c_str, duration_ms};
use crate::status::{dipu_status, ffi_boundary, non_null, write_buffer, write_out};
use crate::store::{dipu_store, lookup, with_key_value};

/// Appends `len` bytes at `value` to the value of `key` (a missing key
/// starts empty), in one step on every store.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL or
/// non-UTF-8 key, or a NULL `value` with a non-zero `len`. Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `value` NULL or valid for
/// reading `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_append(
    store: *mut dipu_store,
    key: *const c_char,
    value: *const c_void,
    len: usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_append", {
        // SAFETY: forwarded caller's contract.
        unsafe { with_key_value(store, key, value, len, |s, k, v| s.append(k, v)) }
    })
}

/// Copies every key that holds a value (queues are not listed; for a
/// prefix store, its own keys without the prefix) into `buf` of `len`
/// bytes, each followed by a NUL, and stores the bytes needed in `*needed`
/// and the number of keys in `*count` (each when not NULL). `buf` NULL with
/// `len` 0 only asks for the sizes; keys set in between may make the second
/// call need more.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store or a `buf`
/// too small (`*needed` and `*count` still receive the sizes, `buf` is
/// untouched). Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t, `count` NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_list_keys(
    store: *mut dipu_store,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
    count: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_list_keys", {
        let keys = lookup(store)?.store.list_keys()?;
        if !count.is_null() {
            // SAFETY: not NULL; valid for writing by the caller's contract.
            unsafe { count.write(keys.len()) };
        }
        let mut packed = Vec::with_capacity(keys.iter().map(|k| k.len() + 1).sum());
        for key in &keys {
            packed.extend_from_slice(key.as_bytes());
            packed.push(0);
        }
        // SAFETY: forwarded caller's contract.
        unsafe { write_buffer(&packed, buf.cast(), len, needed) }
    })
}

/// Appends `len` bytes at `value` to the back of the queue `key`. While a
/// queue is not empty its key counts as set for dipu_store_check and
/// dipu_store_wait.
/// Errors: DIPU_STATUS_UNSUPPORTED for a file store (it has no queues, as
/// torch's has none), DIPU_STATUS_VENDOR_ERROR from a TCP server without
/// queues (torch's legacy one), DIPU_STATUS_INVALID_ARGUMENT for an unknown
/// store, a NULL or non-UTF-8 key, or a NULL `value` with a non-zero `len`.
/// Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `value` NULL or valid for
/// reading `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_queue_push(
    store: *mut dipu_store,
    key: *const c_char,
    value: *const c_void,
    len: usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_queue_push", {
        // SAFETY: forwarded caller's contract.
        unsafe { with_key_value(store, key, value, len, |s, k, v| s.queue_push(k, v)) }
    })
}

/// Takes the value at the front of the queue `key` and copies it into
/// `buf` of `len` bytes, its size into `*needed` (when not NULL). With
/// `block` non-zero, waits up to the store's timeout for a value; with 0,
/// an empty queue is DIPU_STATUS_NOT_READY.
///
/// A value taken that does not fit, or taken by a size query (`buf` NULL
/// with `len` 0), is kept by this handle, never lost: the next pop of the
/// same queue through this handle returns it, without waiting. (An empty
/// value is received with any non-NULL `buf`.)
/// Errors: DIPU_STATUS_NOT_READY (empty, not blocking),
/// DIPU_STATUS_TIMEOUT (empty for the whole timeout),
/// DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL or non-UTF-8
/// key, or a `buf` shorter than the value (`*needed` receives the size),
/// and the errors of dipu_store_queue_push. Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `buf` NULL or valid for
/// writing `len` bytes, `needed` NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_queue_pop(
    store: *mut dipu_store,
    key: *const c_char,
    block: i32,
    buf: *mut c_void,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_queue_pop", {
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let key = unsafe { c_str(key, "key") }?;
        let kept = s.undelivered.lock().remove(key);
        let value = match kept {
            Some(value) => value,
            None => s.store.queue_pop(key, block != 0)?,
        };
        let size_query = buf.is_null() && len == 0;
        // SAFETY: forwarded caller's contract.
        let written = unsafe { write_buffer(&value, buf.cast(), len, needed) };
        if size_query || written.is_err() {
            s.undelivered.lock().insert(key.to_owned(), value);
        }
        written
    })
}

/// Stores the number of values in the queue `key` in `*out` (0 for a queue
/// never pushed to), counting a value this handle kept for its next
/// dipu_store_queue_pop.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a NULL or
/// non-UTF-8 key or a NULL `out`, and the errors of dipu_store_queue_push.
/// Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string, `out` NULL or valid for
/// writing an int64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_queue_len(
    store: *mut dipu_store,
    key: *const c_char,
    out: *mut i64,
) -> dipu_status {
    ffi_boundary!("dipu_store_queue_len", {
        non_null(out, "out")?;
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let key = unsafe { c_str(key, "key") }?;
        let kept = i64::from(s.undelivered.lock().contains_key(key));
        let n = s.store.queue_len(key)? + kept;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", n) }
    })
}

/// Counts the caller in at the barrier `key` and waits up to `timeout_ms`
/// (positive: milliseconds; 0: the store's timeout; negative: no limit)
/// until `world_size` callers have arrived. A barrier key serves one
/// barrier: use a fresh key for the next (torch's Store::barrier).
/// Errors: DIPU_STATUS_TIMEOUT when not all arrive in time (the message
/// names the key), DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a
/// NULL or non-UTF-8 key, or a `world_size` below 1. Thread-safe.
///
/// # Safety
/// `key` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_barrier(
    store: *mut dipu_store,
    key: *const c_char,
    world_size: i64,
    timeout_ms: i64,
) -> dipu_status {
    ffi_boundary!("dipu_store_barrier", {
        let s = lookup(store)?;
        // SAFETY: forwarded caller's contract.
        let key = unsafe { c_str(key, "key") }?;
        let world = usize::try_from(world_size).unwrap_or(0);
        let timeout = duration_ms(timeout_ms, s.store.timeout());
        s.store.barrier(key, world, timeout)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::dipu_status::*;
    use crate::store::{dipu_store_destroy, dipu_store_file_create, dipu_store_hash_create};
    use std::ptr::{null, null_mut};

    /// A fresh hash store handle.
    fn hash_store() -> *mut dipu_store {
        let mut store = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { dipu_store_hash_create(&mut store) }, DIPU_OK);
        store
    }

    #[test]
    fn append_and_list_keys() {
        let store = hash_store();
        // SAFETY: valid handles, strings, buffers and out-pointers.
        unsafe {
            assert_eq!(
                dipu_store_append(store, c"a".as_ptr(), b"xy".as_ptr().cast(), 2),
                DIPU_OK
            );
            assert_eq!(
                dipu_store_append(store, c"a".as_ptr(), b"z".as_ptr().cast(), 1),
                DIPU_OK
            );
            assert_eq!(dipu_store_append(store, c"bb".as_ptr(), null(), 0), DIPU_OK);
            let (mut needed, mut count) = (0, 0);
            let status = dipu_store_list_keys(store, null_mut(), 0, &mut needed, &mut count);
            assert_eq!((status, needed, count), (DIPU_OK, 5, 2));
            let mut small = [1 as c_char; 4];
            let status =
                dipu_store_list_keys(store, small.as_mut_ptr(), 4, &mut needed, null_mut());
            assert_eq!(status, DIPU_STATUS_INVALID_ARGUMENT);
            assert_eq!(small, [1; 4], "a short buffer is untouched");
            let mut buf = [0 as c_char; 8];
            let status = dipu_store_list_keys(store, buf.as_mut_ptr(), 8, &mut needed, &mut count);
            assert_eq!(status, DIPU_OK);
            let bytes: Vec<u8> = buf[..needed].iter().map(|&c| c as u8).collect();
            let mut keys: Vec<&[u8]> = bytes.split(|&b| b == 0).filter(|k| !k.is_empty()).collect();
            keys.sort();
            assert_eq!(keys, [&b"a"[..], b"bb"]);
            let mut value = [0u8; 8];
            let status = crate::store::dipu_store_get(
                store,
                c"a".as_ptr(),
                value.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!((status, &value[..needed]), (DIPU_OK, &b"xyz"[..]));
            assert_eq!(dipu_store_destroy(store), DIPU_OK);
        }
    }

    #[test]
    fn a_popped_value_that_does_not_fit_is_kept_for_the_next_pop() {
        let store = hash_store();
        // SAFETY: valid handles, strings, buffers and out-pointers.
        unsafe {
            for v in [&b"first"[..], b"second", b""] {
                assert_eq!(
                    dipu_store_queue_push(store, c"q".as_ptr(), v.as_ptr().cast(), v.len()),
                    DIPU_OK
                );
            }
            let mut n = 0;
            assert_eq!(dipu_store_queue_len(store, c"q".as_ptr(), &mut n), DIPU_OK);
            assert_eq!(n, 3);
            // A size query takes the value and keeps it.
            let mut needed = 0;
            let status = dipu_store_queue_pop(store, c"q".as_ptr(), 0, null_mut(), 0, &mut needed);
            assert_eq!((status, needed), (DIPU_OK, 5));
            assert_eq!(dipu_store_queue_len(store, c"q".as_ptr(), &mut n), DIPU_OK);
            assert_eq!(n, 3, "the kept value still counts");
            // Too small: an error, and still kept.
            let mut small = [0u8; 2];
            let status = dipu_store_queue_pop(
                store,
                c"q".as_ptr(),
                0,
                small.as_mut_ptr().cast(),
                2,
                &mut needed,
            );
            assert_eq!(
                (status, needed, small),
                (DIPU_STATUS_INVALID_ARGUMENT, 5, [0, 0])
            );
            let mut buf = [0u8; 8];
            let status = dipu_store_queue_pop(
                store,
                c"q".as_ptr(),
                1,
                buf.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!((status, &buf[..needed]), (DIPU_OK, &b"first"[..]));
            let status = dipu_store_queue_pop(
                store,
                c"q".as_ptr(),
                0,
                buf.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!((status, &buf[..needed]), (DIPU_OK, &b"second"[..]));
            let status = dipu_store_queue_pop(
                store,
                c"q".as_ptr(),
                0,
                buf.as_mut_ptr().cast(),
                0,
                &mut needed,
            );
            assert_eq!((status, needed), (DIPU_OK, 0), "an empty value");
            let status = dipu_store_queue_pop(
                store,
                c"q".as_ptr(),
                0,
                buf.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!(status, DIPU_STATUS_NOT_READY);
            crate::store::dipu_store_set_timeout(store, 50);
            let status = dipu_store_queue_pop(
                store,
                c"q".as_ptr(),
                1,
                buf.as_mut_ptr().cast(),
                8,
                &mut needed,
            );
            assert_eq!(status, DIPU_STATUS_TIMEOUT);
            assert_eq!(
                dipu_store_queue_len(store, c"q".as_ptr(), null_mut()),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_store_destroy(store), DIPU_OK);
        }
    }

    #[test]
    fn barrier_and_bad_arguments() {
        let store = hash_store();
        let dir = tempfile::tempdir().unwrap();
        let path = std::ffi::CString::new(dir.path().join("s").to_str().unwrap()).unwrap();
        let mut file = null_mut();
        // SAFETY: valid handles, strings, buffers and out-pointers, and
        // invalid ones where the test says so.
        unsafe {
            assert_eq!(dipu_store_barrier(store, c"b".as_ptr(), 1, 0), DIPU_OK);
            assert_eq!(
                dipu_store_barrier(store, c"b2".as_ptr(), 2, 20),
                DIPU_STATUS_TIMEOUT
            );
            assert_eq!(
                dipu_store_barrier(store, c"b3".as_ptr(), 0, 20),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_barrier(store, null(), 1, 20),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_queue_push(store, c"q".as_ptr(), null(), 3),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(
                dipu_store_append(null_mut(), c"a".as_ptr(), null(), 0),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_store_file_create(path.as_ptr(), 0, &mut file), DIPU_OK);
            assert_eq!(
                dipu_store_queue_push(file, c"q".as_ptr(), null(), 0),
                DIPU_STATUS_UNSUPPORTED
            );
            assert_eq!(dipu_store_destroy(file), DIPU_OK);
            assert_eq!(dipu_store_destroy(store), DIPU_OK);
            assert_eq!(
                dipu_store_list_keys(store, null_mut(), 0, null_mut(), null_mut()),
                DIPU_STATUS_INVALID_ARGUMENT
            );
        }
    }
}
