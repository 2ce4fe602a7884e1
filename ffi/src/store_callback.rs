//! `dipu_store_callback_create`: a store whose operations are the caller's
//! callbacks, so a process group can meet through any key-value store the
//! caller has (torch's `c10d::Store`: TCP, file, hash, prefix stores).

use std::ffi::{c_char, c_void, CString};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dipu_comm::store::{Store, DEFAULT_TIMEOUT};
use dipu_runtime::{Error, ErrorKind, Result};

use crate::handles::{bytes, c_str, duration_ms};
use crate::status::{dipu_status, ffi_boundary, non_null};
use crate::store::{create_out, dipu_store};

/// Where a callback leaves its answer: a value (dipu_store_reply_value) or
/// an error message (dipu_store_reply_error). Opaque; valid only during the
/// callback it is passed to.
#[derive(Default)]
pub struct dipu_store_reply {
    value: Option<Vec<u8>>,
    error: Option<String>,
}

/// `set(ctx, key, value, len, reply)`: sets `key` to `len` bytes.
pub type dipu_store_set_fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        *const c_void,
        usize,
        *mut dipu_store_reply,
    ) -> i32,
>;
/// `get(ctx, key, timeout_ms, reply)`: waits up to `timeout_ms` (-1: no
/// limit) for `key`, then hands its value to dipu_store_reply_value.
pub type dipu_store_get_fn =
    Option<unsafe extern "C" fn(*mut c_void, *const c_char, i64, *mut dipu_store_reply) -> i32>;
/// `add(ctx, key, delta, out, reply)`: adds `delta` to the integer at `key`
/// and writes the new value to `*out`.
pub type dipu_store_add_fn = Option<
    unsafe extern "C" fn(*mut c_void, *const c_char, i64, *mut i64, *mut dipu_store_reply) -> i32,
>;
/// `compare_set(ctx, key, expected, expected_len, desired, desired_len,
/// reply)`: hands the value after the call to dipu_store_reply_value.
pub type dipu_store_compare_set_fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        *const c_void,
        usize,
        *const c_void,
        usize,
        *mut dipu_store_reply,
    ) -> i32,
>;
/// `check(ctx, keys, nkeys, out, reply)`: writes 1 to `*out` if every key is
/// set, else 0, without waiting.
pub type dipu_store_check_fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *const *const c_char,
        usize,
        *mut i32,
        *mut dipu_store_reply,
    ) -> i32,
>;
/// `wait(ctx, keys, nkeys, timeout_ms, reply)`: waits up to `timeout_ms`
/// (-1: no limit) until every key is set.
pub type dipu_store_wait_fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *const *const c_char,
        usize,
        i64,
        *mut dipu_store_reply,
    ) -> i32,
>;
/// `delete_key(ctx, key, out, reply)`: writes 1 to `*out` if the key existed.
pub type dipu_store_delete_key_fn = Option<
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut i32, *mut dipu_store_reply) -> i32,
>;
/// `num_keys(ctx, out, reply)`: writes the number of keys to `*out`.
pub type dipu_store_num_keys_fn =
    Option<unsafe extern "C" fn(*mut c_void, *mut i64, *mut dipu_store_reply) -> i32>;
/// `destroy(ctx)`: the store is gone; release `ctx`.
pub type dipu_store_destroy_fn = Option<unsafe extern "C" fn(*mut c_void)>;

/// The operations of a store made by dipu_store_callback_create. Each
/// callback gets `ctx` first and returns 0 (DIPU_OK) on success, or a
/// dipu_status code (any other non-zero value counts as
/// DIPU_STATUS_VENDOR_ERROR), after calling dipu_store_reply_error with a
/// message. Callbacks are called from any thread, concurrently; they must
/// return (honouring their timeouts: a failure or timeout becomes the error
/// of the store call, and of the process group's operation that made it)
/// and must not unwind (a C++ callback catches its exceptions).
#[repr(C)]
pub struct dipu_store_callbacks {
    /// Passed to every callback.
    pub ctx: *mut c_void,
    /// Required.
    pub set: dipu_store_set_fn,
    /// Required; blocking up to its timeout.
    pub get: dipu_store_get_fn,
    /// Required.
    pub add: dipu_store_add_fn,
    /// Optional (NULL: compare_set, and append, fail DIPU_STATUS_UNSUPPORTED).
    pub compare_set: dipu_store_compare_set_fn,
    /// Required.
    pub check: dipu_store_check_fn,
    /// Required; blocking up to its timeout.
    pub wait: dipu_store_wait_fn,
    /// Required.
    pub delete_key: dipu_store_delete_key_fn,
    /// Required.
    pub num_keys: dipu_store_num_keys_fn,
    /// Optional: called once, when the store and everything using it are gone.
    pub destroy: dipu_store_destroy_fn,
}

/// The callbacks, checked, with their timeout.
struct CallbackStore {
    ctx: Ctx,
    set: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        *const c_void,
        usize,
        *mut dipu_store_reply,
    ) -> i32,
    get: unsafe extern "C" fn(*mut c_void, *const c_char, i64, *mut dipu_store_reply) -> i32,
    add: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        i64,
        *mut i64,
        *mut dipu_store_reply,
    ) -> i32,
    compare_set: dipu_store_compare_set_fn,
    check: unsafe extern "C" fn(
        *mut c_void,
        *const *const c_char,
        usize,
        *mut i32,
        *mut dipu_store_reply,
    ) -> i32,
    wait: unsafe extern "C" fn(
        *mut c_void,
        *const *const c_char,
        usize,
        i64,
        *mut dipu_store_reply,
    ) -> i32,
    delete_key:
        unsafe extern "C" fn(*mut c_void, *const c_char, *mut i32, *mut dipu_store_reply) -> i32,
    num_keys: unsafe extern "C" fn(*mut c_void, *mut i64, *mut dipu_store_reply) -> i32,
    destroy: dipu_store_destroy_fn,
    timeout: parking_lot::Mutex<Duration>,
}

/// The caller's context pointer.
struct Ctx(*mut c_void);

// SAFETY: dipu_store_callback_create's contract: the callbacks may be
// called with `ctx` from any thread, concurrently.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

impl fmt::Debug for CallbackStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallbackStore({:p})", self.ctx.0)
    }
}

impl Drop for CallbackStore {
    fn drop(&mut self) {
        if let Some(destroy) = self.destroy {
            // SAFETY: the caller's callback, called once with its context.
            unsafe { destroy(self.ctx.0) }
        }
    }
}

/// A key as a C string (a NUL inside is an error).
fn c_key(key: &str) -> Result<CString> {
    CString::new(key)
        .map_err(|_| Error::invalid_argument(format!("key {key:?} contains a NUL byte")))
}

/// A timeout for a callback: milliseconds, -1 for none.
fn ms(timeout: Duration) -> i64 {
    match timeout {
        Duration::MAX => -1,
        t => i64::try_from(t.as_millis()).unwrap_or(-1),
    }
}

/// The status code a callback returned, as a kind.
fn kind_of(code: i32) -> ErrorKind {
    use dipu_status::*;
    let kinds = [
        (DIPU_STATUS_OUT_OF_MEMORY, ErrorKind::OutOfMemory),
        (DIPU_STATUS_INVALID_ARGUMENT, ErrorKind::InvalidArgument),
        (DIPU_STATUS_NOT_READY, ErrorKind::NotReady),
        (DIPU_STATUS_UNSUPPORTED, ErrorKind::Unsupported),
        (DIPU_STATUS_TIMEOUT, ErrorKind::Timeout),
        (DIPU_STATUS_INVALID_CONFIG, ErrorKind::InvalidConfig),
    ];
    kinds
        .iter()
        .find(|(status, _)| *status as i32 == code)
        .map_or(ErrorKind::VendorError, |(_, kind)| *kind)
}

impl CallbackStore {
    /// Runs one callback with a fresh reply; a non-zero status becomes an
    /// error naming `what`.
    fn call(
        &self,
        what: &str,
        f: impl FnOnce(*mut c_void, *mut dipu_store_reply) -> i32,
    ) -> Result<dipu_store_reply> {
        let mut reply = dipu_store_reply::default();
        let code = f(self.ctx.0, &mut reply);
        if code == 0 {
            return Ok(reply);
        }
        let message = reply
            .error
            .unwrap_or_else(|| format!("the callback returned status {code} without a message"));
        Err(Error::new(
            kind_of(code),
            format!("callback store: {what}: {message}"),
        ))
    }

    fn value(reply: dipu_store_reply, what: &str) -> Result<Vec<u8>> {
        reply.value.ok_or_else(|| {
            Error::new(
                ErrorKind::VendorError,
                format!(
                    "callback store: {what}: the callback succeeded without dipu_store_reply_value"
                ),
            )
        })
    }

    fn keys(keys: &[&str]) -> Result<Vec<CString>> {
        keys.iter().map(|k| c_key(k)).collect()
    }
}

impl Store for CallbackStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let k = c_key(key)?;
        // SAFETY: the caller's callback, given a valid key, value and reply.
        self.call(&format!("set {key:?}"), |ctx, r| unsafe {
            (self.set)(ctx, k.as_ptr(), value.as_ptr().cast(), value.len(), r)
        })
        .map(drop)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let (k, what) = (c_key(key)?, format!("get {key:?}"));
        let t = ms(self.timeout());
        // SAFETY: as in set.
        let reply = self.call(&what, |ctx, r| unsafe { (self.get)(ctx, k.as_ptr(), t, r) })?;
        Self::value(reply, &what)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let k = c_key(key)?;
        let mut out = 0i64;
        // SAFETY: as in set; `out` is a valid i64.
        self.call(&format!("add {key:?}"), |ctx, r| unsafe {
            (self.add)(ctx, k.as_ptr(), delta, &mut out, r)
        })?;
        Ok(out)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let what = format!("compare_set {key:?}");
        let Some(f) = self.compare_set else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("callback store: {what}: no compare_set callback was given"),
            ));
        };
        let k = c_key(key)?;
        // SAFETY: as in set; both byte ranges are valid.
        let reply = self.call(&what, |ctx, r| unsafe {
            f(
                ctx,
                k.as_ptr(),
                expected.as_ptr().cast(),
                expected.len(),
                desired.as_ptr().cast(),
                desired.len(),
                r,
            )
        })?;
        Self::value(reply, &what)
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        let k = c_key(key)?;
        let mut out = 0i32;
        // SAFETY: as in set; `out` is a valid int.
        self.call(&format!("delete_key {key:?}"), |ctx, r| unsafe {
            (self.delete_key)(ctx, k.as_ptr(), &mut out, r)
        })?;
        Ok(out != 0)
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let owned = Self::keys(keys)?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|k| k.as_ptr()).collect();
        let mut out = 0i32;
        // SAFETY: as in set; `ptrs` holds `len` valid strings.
        self.call("check", |ctx, r| unsafe {
            (self.check)(ctx, ptrs.as_ptr(), ptrs.len(), &mut out, r)
        })?;
        Ok(out != 0)
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let owned = Self::keys(keys)?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|k| k.as_ptr()).collect();
        let t = ms(timeout);
        // SAFETY: as in check.
        self.call("wait", |ctx, r| unsafe {
            (self.wait)(ctx, ptrs.as_ptr(), ptrs.len(), t, r)
        })
        .map(drop)
    }

    fn num_keys(&self) -> Result<i64> {
        let mut out = 0i64;
        // SAFETY: as in set; `out` is a valid i64.
        self.call("num_keys", |ctx, r| unsafe {
            (self.num_keys)(ctx, &mut out, r)
        })?;
        Ok(out)
    }

    fn timeout(&self) -> Duration {
        *self.timeout.lock()
    }

    fn set_timeout(&self, timeout: Duration) {
        *self.timeout.lock() = timeout;
    }

    fn list_keys(&self) -> Result<Vec<String>> {
        Err(Error::new(
            ErrorKind::Unsupported,
            "callback store: list_keys has no callback",
        ))
    }
}

/// A required callback, or `InvalidArgument` naming it.
fn required<T>(f: Option<T>, name: &str) -> Result<T> {
    f.ok_or_else(|| Error::invalid_argument(format!("callbacks->{name} is NULL (it is required)")))
}

/// Creates a store whose operations are `callbacks` (copied; the struct
/// need not outlive the call), so a process group can meet through any
/// store the caller has, such as torch's c10d::Store. Blocking calls get
/// `timeout_ms` (positive: milliseconds; 0: 300 s; negative: no limit; see
/// dipu_store_set_timeout) and must honour it. `callbacks->destroy`, if
/// given, is called once when the store is destroyed and no group uses it.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `callbacks` or `out`, or
/// a NULL required callback (named). Thread-safe.
///
/// # Safety
/// `callbacks` must be NULL or point to a valid dipu_store_callbacks whose
/// functions may be called with its `ctx` from any thread, concurrently,
/// until `destroy`; `out` NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_callback_create(
    callbacks: *const dipu_store_callbacks,
    timeout_ms: i64,
    out: *mut *mut dipu_store,
) -> dipu_status {
    ffi_boundary!("dipu_store_callback_create", {
        non_null(callbacks, "callbacks")?;
        // SAFETY: not NULL, valid by the caller's contract.
        let c = unsafe { &*callbacks };
        let store = CallbackStore {
            ctx: Ctx(c.ctx),
            set: required(c.set, "set")?,
            get: required(c.get, "get")?,
            add: required(c.add, "add")?,
            compare_set: c.compare_set,
            check: required(c.check, "check")?,
            wait: required(c.wait, "wait")?,
            delete_key: required(c.delete_key, "delete_key")?,
            num_keys: required(c.num_keys, "num_keys")?,
            destroy: c.destroy,
            timeout: parking_lot::Mutex::new(duration_ms(timeout_ms, DEFAULT_TIMEOUT)),
        };
        // SAFETY: forwarded caller's contract.
        unsafe { create_out(out, || Ok((Arc::new(store) as Arc<dyn Store>, None))) }
    })
}

/// Gives the answer of a get or compare_set callback: `len` bytes at
/// `value` (copied; NULL only with `len` 0). A later call replaces it.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `reply` or a NULL
/// `value` with `len` > 0. Thread-safe (each reply belongs to one call).
///
/// # Safety
/// `reply` must be NULL or the reply passed to the running callback;
/// `value` NULL or valid for reading `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_reply_value(
    reply: *mut dipu_store_reply,
    value: *const c_void,
    len: usize,
) -> dipu_status {
    ffi_boundary!("dipu_store_reply_value", {
        non_null(reply, "reply")?;
        // SAFETY: forwarded caller's contract.
        let value = unsafe { bytes(value, len, "value") }?.to_vec();
        // SAFETY: not NULL; the running callback's reply (caller's contract).
        unsafe { (*reply).value = Some(value) };
        Ok(())
    })
}

/// Gives the message of a failing callback (it then returns non-zero): the
/// store call's error says it.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `reply` or `message` or
/// a message that is not UTF-8. Thread-safe (each reply belongs to one
/// call).
///
/// # Safety
/// `reply` must be NULL or the reply passed to the running callback;
/// `message` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_store_reply_error(
    reply: *mut dipu_store_reply,
    message: *const c_char,
) -> dipu_status {
    ffi_boundary!("dipu_store_reply_error", {
        non_null(reply, "reply")?;
        // SAFETY: forwarded caller's contract.
        let message = unsafe { c_str(message, "message") }?.to_owned();
        // SAFETY: not NULL; the running callback's reply (caller's contract).
        unsafe { (*reply).error = Some(message) };
        Ok(())
    })
}

#[cfg(test)]
#[path = "store_callback_tests.rs"]
mod tests;
