//! The callback store through the C functions, with callbacks that forward
//! to a `HashStore` (as the torch adapter's forward to a c10d::Store), and
//! callbacks that fail or time out.

use super::*;
use crate::status::dipu_last_error_message;
use crate::status::dipu_status::*;
use crate::store::{
    dipu_store_add, dipu_store_check, dipu_store_compare_set, dipu_store_delete_key,
    dipu_store_destroy, dipu_store_get, dipu_store_num_keys, dipu_store_set, dipu_store_wait,
};
use dipu_comm::store::HashStore;
use std::ffi::CStr;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The context: the store the callbacks forward to, and switches.
struct Backing {
    store: HashStore,
    /// Every call fails with this status (0: no failure).
    fail_with: std::sync::atomic::AtomicI32,
    /// A get that succeeds without giving a value.
    forget_value: AtomicBool,
    /// Counts the calls of `destroy` (a static of the test).
    destroyed: &'static AtomicUsize,
}

fn last() -> String {
    // SAFETY: the function returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(dipu_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// Runs `f` on the backing store of `ctx`, reporting its error through
/// `reply`.
///
/// # Safety
/// `ctx` is a `Backing`, `reply` the running callback's reply.
unsafe fn forward(
    ctx: *mut c_void,
    reply: *mut dipu_store_reply,
    f: impl FnOnce(&Backing) -> Result<()>,
) -> i32 {
    // SAFETY: the tests pass a live Backing as ctx.
    let b = unsafe { &*ctx.cast::<Backing>() };
    let code = b.fail_with.load(Ordering::Relaxed);
    let result = match code {
        0 => f(b),
        code => Err(Error::new(
            kind_of(code),
            "the backing store is unreachable",
        )),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            let msg = CString::new(e.to_string()).unwrap();
            // SAFETY: the running callback's reply and a C string.
            unsafe { dipu_store_reply_error(reply, msg.as_ptr()) };
            dipu_status::from(e.kind()) as i32
        }
    }
}

/// # Safety
/// `p` is a NUL-terminated UTF-8 string.
unsafe fn s<'a>(p: *const c_char) -> &'a str {
    // SAFETY: caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap()
}

/// # Safety
/// `keys` holds `n` C strings.
unsafe fn ks<'a>(keys: *const *const c_char, n: usize) -> Vec<&'a str> {
    // SAFETY: caller's contract.
    unsafe { std::slice::from_raw_parts(keys, n) }
        .iter()
        // SAFETY: caller's contract.
        .map(|&k| unsafe { s(k) })
        .collect()
}

fn timeout(ms: i64) -> Duration {
    if ms < 0 {
        Duration::MAX
    } else {
        Duration::from_millis(ms as u64)
    }
}

unsafe extern "C" fn set(
    ctx: *mut c_void,
    key: *const c_char,
    v: *const c_void,
    len: usize,
    r: *mut dipu_store_reply,
) -> i32 {
    // SAFETY: the store passes valid strings and bytes.
    unsafe {
        forward(ctx, r, |b| {
            b.store
                .set(s(key), std::slice::from_raw_parts(v.cast(), len))
        })
    }
}

unsafe extern "C" fn get(
    ctx: *mut c_void,
    key: *const c_char,
    ms: i64,
    r: *mut dipu_store_reply,
) -> i32 {
    // SAFETY: as in set.
    unsafe {
        forward(ctx, r, |b| {
            b.store.wait(&[s(key)], timeout(ms))?;
            if !b.forget_value.load(Ordering::Relaxed) {
                let v = b.store.get(s(key))?;
                dipu_store_reply_value(r, v.as_ptr().cast(), v.len());
            }
            Ok(())
        })
    }
}

unsafe extern "C" fn add(
    ctx: *mut c_void,
    key: *const c_char,
    d: i64,
    out: *mut i64,
    r: *mut dipu_store_reply,
) -> i32 {
    // SAFETY: as in set; `out` is valid.
    unsafe {
        forward(ctx, r, |b| {
            *out = b.store.add(s(key), d)?;
            Ok(())
        })
    }
}

unsafe extern "C" fn check(
    ctx: *mut c_void,
    keys: *const *const c_char,
    n: usize,
    out: *mut i32,
    r: *mut dipu_store_reply,
) -> i32 {
    // SAFETY: as in set; `out` is valid.
    unsafe {
        forward(ctx, r, |b| {
            *out = i32::from(b.store.check(&ks(keys, n))?);
            Ok(())
        })
    }
}

unsafe extern "C" fn wait(
    ctx: *mut c_void,
    keys: *const *const c_char,
    n: usize,
    ms: i64,
    r: *mut dipu_store_reply,
) -> i32 {
    // SAFETY: as in set.
    unsafe { forward(ctx, r, |b| b.store.wait(&ks(keys, n), timeout(ms))) }
}

unsafe extern "C" fn delete_key(
    ctx: *mut c_void,
    key: *const c_char,
    out: *mut i32,
    r: *mut dipu_store_reply,
) -> i32 {
    // SAFETY: as in set; `out` is valid.
    unsafe {
        forward(ctx, r, |b| {
            *out = i32::from(b.store.delete_key(s(key))?);
            Ok(())
        })
    }
}

unsafe extern "C" fn num_keys(ctx: *mut c_void, out: *mut i64, r: *mut dipu_store_reply) -> i32 {
    // SAFETY: as in set; `out` is valid.
    unsafe {
        forward(ctx, r, |b| {
            *out = b.store.num_keys()?;
            Ok(())
        })
    }
}

unsafe extern "C" fn destroy(ctx: *mut c_void) {
    // SAFETY: the Box leaked in `callbacks`, released once.
    let backing = unsafe { Box::from_raw(ctx.cast::<Backing>()) };
    backing.destroyed.fetch_add(1, Ordering::SeqCst);
}

fn callbacks(destroyed: &'static AtomicUsize) -> (dipu_store_callbacks, &'static Backing) {
    let backing = Box::leak(Box::new(Backing {
        store: HashStore::new(),
        fail_with: 0.into(),
        forget_value: false.into(),
        destroyed,
    }));
    let c = dipu_store_callbacks {
        ctx: std::ptr::from_mut(backing).cast(),
        set: Some(set),
        get: Some(get),
        add: Some(add),
        compare_set: None,
        check: Some(check),
        wait: Some(wait),
        delete_key: Some(delete_key),
        num_keys: Some(num_keys),
        destroy: Some(destroy),
    };
    (c, backing)
}

#[test]
fn every_operation_reaches_the_callbacks() {
    static DESTROYED: AtomicUsize = AtomicUsize::new(0);
    let (c, backing) = callbacks(&DESTROYED);
    let mut store = null_mut();
    // SAFETY: valid callbacks, keys, buffers and out-pointers.
    unsafe {
        assert_eq!(
            dipu_store_callback_create(&c, 2_000, &mut store),
            DIPU_OK,
            "{}",
            last()
        );
        let key = c"k".as_ptr();
        assert_eq!(
            dipu_store_set(store, key, b"hello".as_ptr().cast(), 5),
            DIPU_OK
        );
        assert_eq!(backing.store.get("k").unwrap(), b"hello");
        let (mut buf, mut needed) = ([0u8; 8], 0usize);
        assert_eq!(
            dipu_store_get(store, key, buf.as_mut_ptr().cast(), 8, &mut needed),
            DIPU_OK
        );
        assert_eq!(&buf[..needed], b"hello");
        let mut n = 0i64;
        assert_eq!(dipu_store_add(store, c"n".as_ptr(), 5, &mut n), DIPU_OK);
        assert_eq!(dipu_store_add(store, c"n".as_ptr(), -2, &mut n), DIPU_OK);
        assert_eq!(n, 3);
        let keys = [key, c"n".as_ptr()];
        let mut yes = 0;
        assert_eq!(dipu_store_check(store, keys.as_ptr(), 2, &mut yes), DIPU_OK);
        assert_eq!(yes, 1);
        assert_eq!(dipu_store_wait(store, keys.as_ptr(), 2, 100), DIPU_OK);
        assert_eq!(dipu_store_num_keys(store, &mut n), DIPU_OK);
        assert_eq!(n, 2);
        let mut deleted = 0;
        assert_eq!(dipu_store_delete_key(store, key, &mut deleted), DIPU_OK);
        assert_eq!(deleted, 1);
        assert_eq!(dipu_store_check(store, keys.as_ptr(), 2, &mut yes), DIPU_OK);
        assert_eq!(yes, 0);

        // A missing key: the callback's timeout is the store's, the error
        // is the callback's, and the kind survives.
        let status = dipu_store_get(store, key, null_mut(), 0, null_mut());
        assert_eq!(status, DIPU_STATUS_TIMEOUT, "{}", last());
        assert!(last().contains("callback store: get \"k\""), "{}", last());
        assert!(
            last().contains("2000 ms") || last().contains("2 s"),
            "{}",
            last()
        );

        // No compare_set callback: Unsupported, named.
        let status =
            dipu_store_compare_set(store, key, null(), 0, null(), 0, null_mut(), 0, null_mut());
        assert_eq!(status, DIPU_STATUS_UNSUPPORTED);
        assert!(last().contains("no compare_set callback"), "{}", last());

        // A failing backing store: the status and message reach the caller.
        backing
            .fail_with
            .store(DIPU_STATUS_VENDOR_ERROR as i32, Ordering::Relaxed);
        let status = dipu_store_set(store, key, null(), 0);
        assert_eq!(status, DIPU_STATUS_VENDOR_ERROR);
        assert!(
            last().contains("set \"k\": ") && last().contains("the backing store is unreachable"),
            "{}",
            last()
        );
        backing.fail_with.store(12345, Ordering::Relaxed);
        assert_eq!(dipu_store_num_keys(store, &mut n), DIPU_STATUS_VENDOR_ERROR);
        backing.fail_with.store(0, Ordering::Relaxed);

        // A get callback that succeeds without a value is an error, not an
        // empty value.
        assert_eq!(dipu_store_set(store, key, null(), 0), DIPU_OK);
        backing.forget_value.store(true, Ordering::Relaxed);
        let status = dipu_store_get(store, key, null_mut(), 0, null_mut());
        assert_eq!(status, DIPU_STATUS_VENDOR_ERROR);
        assert!(
            last().contains("without dipu_store_reply_value"),
            "{}",
            last()
        );

        assert_eq!(DESTROYED.load(Ordering::SeqCst), 0);
        assert_eq!(dipu_store_destroy(store), DIPU_OK);
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 1, "destroy runs once");
    }
}

#[test]
fn missing_callbacks_and_bad_replies_are_errors() {
    static DESTROYED: AtomicUsize = AtomicUsize::new(0);
    let (mut c, _) = callbacks(&DESTROYED);
    let mut store = null_mut();
    // SAFETY: valid (or NULL, rejected) arguments.
    unsafe {
        assert_eq!(
            dipu_store_callback_create(null(), 0, &mut store),
            DIPU_STATUS_INVALID_ARGUMENT
        );
        c.wait = None;
        assert_eq!(
            dipu_store_callback_create(&c, 0, &mut store),
            DIPU_STATUS_INVALID_ARGUMENT
        );
        assert!(last().contains("callbacks->wait is NULL"), "{}", last());
        assert_eq!(
            dipu_store_reply_value(null_mut(), null(), 0),
            DIPU_STATUS_INVALID_ARGUMENT
        );
        assert_eq!(
            dipu_store_reply_error(null_mut(), c"x".as_ptr()),
            DIPU_STATUS_INVALID_ARGUMENT
        );
        let mut reply = dipu_store_reply::default();
        assert_eq!(
            dipu_store_reply_value(&mut reply, null(), 3),
            DIPU_STATUS_INVALID_ARGUMENT
        );
        assert_eq!(
            dipu_store_reply_error(&mut reply, null()),
            DIPU_STATUS_INVALID_ARGUMENT
        );
        // The struct was copied: the context is still ours to release.
        destroy(c.ctx);
    }
    assert_eq!(ms(Duration::MAX), -1);
    assert_eq!(ms(Duration::from_millis(1500)), 1500);
    assert_eq!(kind_of(DIPU_STATUS_TIMEOUT as i32), ErrorKind::Timeout);
    assert_eq!(kind_of(-7), ErrorKind::VendorError);
}
