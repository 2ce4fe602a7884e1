//! `dipu_status`, the thread-local last error message and the panic
//! boundary every exported function runs its body in.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use dipu_runtime::{Error, ErrorKind, Result};

/// What a `dipu_*` function returns: `DIPU_OK` (0) on success, else the
/// kind of failure, with a message in `dipu_last_error_message()`.
///
/// The codes equal `DipuErrorKind`'s in `dipu_vendor.h`; a retired code is
/// never reused, and new codes may be added (treat unknown codes as errors).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum dipu_status {
    /// Success.
    DIPU_OK = 0,
    /// The device (or pinned host memory) has no room for the request.
    DIPU_STATUS_OUT_OF_MEMORY = 1,
    /// A device index outside `0..device_count`.
    DIPU_STATUS_INVALID_DEVICE = 2,
    /// A bad argument: a NULL out-pointer, an unknown or already freed
    /// pointer, an invalid stream or event handle, a too small buffer.
    DIPU_STATUS_INVALID_ARGUMENT = 3,
    /// Work is still pending.
    DIPU_STATUS_NOT_READY = 4,
    /// The vendor does not implement this optional capability.
    DIPU_STATUS_UNSUPPORTED = 5,
    /// The vendor loaded but the machine has no usable device.
    DIPU_STATUS_NO_DEVICE = 6,
    /// The vendor library (or plugin file) could not be found.
    DIPU_STATUS_VENDOR_LIBRARY_NOT_FOUND = 7,
    /// The file is a shared library but not a dipu-rs vendor.
    DIPU_STATUS_NOT_A_VENDOR = 8,
    /// The vendor plugin was built for another plugin ABI major version.
    DIPU_STATUS_ABI_MISMATCH = 9,
    /// The vendor's own initialisation failed.
    DIPU_STATUS_VENDOR_INIT_FAILED = 10,
    /// The vendor's runtime returned an error not covered above.
    DIPU_STATUS_VENDOR_ERROR = 11,
    /// An operation did not finish within its time limit.
    DIPU_STATUS_TIMEOUT = 12,
    /// A bug inside the runtime or the vendor (a caught panic, for one).
    DIPU_STATUS_INTERNAL = 13,
    /// A configuration value (option or environment variable) is invalid.
    DIPU_STATUS_INVALID_CONFIG = 14,
}

impl From<ErrorKind> for dipu_status {
    fn from(kind: ErrorKind) -> Self {
        use dipu_status::*;
        match kind {
            ErrorKind::OutOfMemory => DIPU_STATUS_OUT_OF_MEMORY,
            ErrorKind::InvalidDevice => DIPU_STATUS_INVALID_DEVICE,
            ErrorKind::InvalidArgument => DIPU_STATUS_INVALID_ARGUMENT,
            ErrorKind::NotReady => DIPU_STATUS_NOT_READY,
            ErrorKind::Unsupported => DIPU_STATUS_UNSUPPORTED,
            ErrorKind::NoDevice => DIPU_STATUS_NO_DEVICE,
            ErrorKind::VendorLibraryNotFound => DIPU_STATUS_VENDOR_LIBRARY_NOT_FOUND,
            ErrorKind::NotAVendor => DIPU_STATUS_NOT_A_VENDOR,
            ErrorKind::AbiMismatch => DIPU_STATUS_ABI_MISMATCH,
            ErrorKind::VendorInitFailed => DIPU_STATUS_VENDOR_INIT_FAILED,
            ErrorKind::VendorError => DIPU_STATUS_VENDOR_ERROR,
            ErrorKind::Timeout => DIPU_STATUS_TIMEOUT,
            ErrorKind::Internal => DIPU_STATUS_INTERNAL,
            ErrorKind::InvalidConfig => DIPU_STATUS_INVALID_CONFIG,
            _ => DIPU_STATUS_INTERNAL,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Stores `message` as this thread's last error (NUL bytes become spaces).
pub(crate) fn set_last_error(message: String) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // Fails only while the thread's locals are being destroyed: then
    // there is nobody left to read the message.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = message);
}

/// The message of a panic payload.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

/// Runs the body of the exported function `name`: `Ok` is `DIPU_OK`; an
/// error sets the last error message (prefixed with `name`) and returns its
/// status; a panic is caught and becomes `DIPU_STATUS_INTERNAL`.
pub(crate) fn boundary(name: &str, body: impl FnOnce() -> Result<()>) -> dipu_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => dipu_status::DIPU_OK,
        Ok(Err(e)) => {
            set_last_error(format!("{name}: {e}"));
            e.kind().into()
        }
        Err(payload) => {
            set_last_error(format!(
                "{name}: internal error (a panic inside dipu-rs): {}",
                panic_message(payload.as_ref())
            ));
            dipu_status::DIPU_STATUS_INTERNAL
        }
    }
}

/// The hit path of the exported function `name`, before its full body:
/// `body` returns true when it did the whole call (then `DIPU_OK`), false
/// when it changed nothing and the full body must run (then `None`). A
/// panic is caught as in [`boundary`] (`DIPU_STATUS_INTERNAL`). Errors are
/// never reported here: the full body finds and explains them.
#[inline(always)]
pub(crate) fn fast_path(name: &str, body: impl FnOnce() -> bool) -> Option<dipu_status> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(true) => Some(dipu_status::DIPU_OK),
        Ok(false) => None,
        Err(payload) => Some(caught_panic(name, payload)),
    }
}

/// Records a panic caught at the boundary of `name` as its last error.
#[cold]
fn caught_panic(name: &str, payload: Box<dyn Any + Send>) -> dipu_status {
    set_last_error(format!(
        "{name}: internal error (a panic inside dipu-rs): {}",
        panic_message(payload.as_ref())
    ));
    dipu_status::DIPU_STATUS_INTERNAL
}

/// Runs the body of an exported function returning a value instead of a
/// status: a caught panic returns `fallback`.
pub(crate) fn boundary_value<T>(name: &str, fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        set_last_error(format!(
            "{name}: internal error (a panic inside dipu-rs): {}",
            panic_message(payload.as_ref())
        ));
        fallback
    })
}

/// The panic boundary around the body of every exported function:
/// `ffi_boundary!("dipu_x", { ...; Ok(()) })` returns a `dipu_status`;
/// `ffi_boundary!("dipu_x", fallback => { value })` returns the value (or
/// `fallback` after a panic).
macro_rules! ffi_boundary {
    ($name:literal, $fallback:expr => $body:block) => {
        $crate::status::boundary_value($name, $fallback, move || $body)
    };
    ($name:literal, $body:block) => {
        $crate::status::boundary($name, move || -> ::dipu_runtime::Result<()> { $body })
    };
}
pub(crate) use ffi_boundary;

/// `InvalidArgument` when the pointer argument `what` is NULL.
pub(crate) fn non_null<T>(ptr: *const T, what: &str) -> Result<()> {
    if ptr.is_null() {
        Err(Error::invalid_argument(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// Writes `value` to the out-parameter `out` (checked not NULL first).
///
/// # Safety
/// `out` must be NULL or valid for writing a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, what: &str, value: T) -> Result<()> {
    non_null(out, what)?;
    // SAFETY: not NULL (checked), and valid for writing by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `bytes` into the caller's buffer `buf` of `len` bytes and stores
/// the size needed in `needed` (when not NULL). `buf` NULL with `len` 0 is a
/// size query; a buffer shorter than needed is an `InvalidArgument` error
/// that writes nothing into it.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes; `needed` NULL or
/// valid for writing a `size_t`.
pub(crate) unsafe fn write_buffer(
    bytes: &[u8],
    buf: *mut u8,
    len: usize,
    needed: *mut usize,
) -> Result<()> {
    if !needed.is_null() {
        // SAFETY: not NULL, and valid for writing by the caller's contract.
        unsafe { needed.write(bytes.len()) };
    }
    if buf.is_null() && len == 0 {
        return Ok(());
    }
    non_null(buf, "buf")?;
    if len < bytes.len() {
        return Err(Error::invalid_argument(format!(
            "the buffer of {len} bytes is too small: {} bytes are needed",
            bytes.len()
        )));
    }
    // SAFETY: `buf` holds at least `bytes.len()` writable bytes (checked
    // length, caller's contract) and cannot overlap a Rust-owned `bytes`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    Ok(())
}

/// Copies `s` and a terminating NUL into `buf` as [`write_buffer`] does.
///
/// # Safety
/// As for [`write_buffer`].
pub(crate) unsafe fn write_c_string(
    s: &str,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> Result<()> {
    let mut bytes = Vec::with_capacity(s.len() + 1);
    bytes.extend_from_slice(s.as_bytes());
    bytes.push(0);
    // SAFETY: forwarded caller's contract.
    unsafe { write_buffer(&bytes, buf.cast(), len, needed) }
}

/// The message of the last failed `dipu_*` call on the calling thread, or
/// "" if none failed yet. Never NULL.
///
/// The string stays valid until the next failing call on this thread;
/// successful calls leave it unchanged. Thread-safe: each thread has its own.
#[no_mangle]
pub extern "C" fn dipu_last_error_message() -> *const c_char {
    ffi_boundary!("dipu_last_error_message", c"".as_ptr() => {
        LAST_ERROR
            .try_with(|last| last.borrow().as_ptr())
            .unwrap_or(c"".as_ptr())
    })
}

/// A short static name of a status code, e.g. "invalid argument"
/// ("ok" for DIPU_OK, "unknown status" for codes this library does not
/// know). Never NULL; thread-safe.
#[no_mangle]
pub extern "C" fn dipu_status_str(status: i32) -> *const c_char {
    ffi_boundary!("dipu_status_str", c"unknown status".as_ptr() => {
        match status {
            0 => c"ok".as_ptr(),
            1 => c"out of memory".as_ptr(),
            2 => c"invalid device".as_ptr(),
            3 => c"invalid argument".as_ptr(),
            4 => c"not ready".as_ptr(),
            5 => c"unsupported".as_ptr(),
            6 => c"no device".as_ptr(),
            7 => c"vendor library not found".as_ptr(),
            8 => c"not a dipu vendor".as_ptr(),
            9 => c"plugin ABI mismatch".as_ptr(),
            10 => c"vendor initialisation failed".as_ptr(),
            11 => c"vendor error".as_ptr(),
            12 => c"timeout".as_ptr(),
            13 => c"internal error".as_ptr(),
            14 => c"invalid configuration".as_ptr(),
            _ => c"unknown status".as_ptr(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: the function returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(dipu_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn codes_equal_error_kinds() {
        for kind in ErrorKind::ALL {
            let status = dipu_status::from(kind);
            assert_eq!(status as i32, kind.code(), "{kind:?}");
            // SAFETY: a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(dipu_status_str(kind.code())) };
            assert_eq!(name.to_str().unwrap(), kind.as_str());
        }
    }

    #[test]
    fn errors_and_panics_stop_at_the_boundary() {
        assert_eq!(last(), "");
        let status = ffi_boundary!("dipu_test", { Err(Error::invalid_argument("bad thing")) });
        assert_eq!(status, dipu_status::DIPU_STATUS_INVALID_ARGUMENT);
        assert_eq!(last(), "dipu_test: invalid argument: bad thing");
        assert_eq!(ffi_boundary!("dipu_ok", { Ok(()) }), dipu_status::DIPU_OK);
        assert_eq!(
            last(),
            "dipu_test: invalid argument: bad thing",
            "success keeps the message"
        );
        let status = ffi_boundary!("dipu_panics", {
            panic!("boom {}", 42);
        });
        assert_eq!(status, dipu_status::DIPU_STATUS_INTERNAL);
        assert!(last().contains("boom 42"), "{}", last());
        assert_eq!(ffi_boundary!("dipu_v", 7 => { panic!("x") }), 7);
    }

    #[test]
    fn buffers_are_size_checked() {
        let mut needed = 0usize;
        let mut buf = [0u8; 4];
        // SAFETY: valid local buffers.
        unsafe {
            assert!(write_c_string("abc", std::ptr::null_mut(), 0, &mut needed).is_ok());
            assert_eq!(needed, 4);
            assert!(write_c_string("abcd", buf.as_mut_ptr().cast(), 4, &mut needed).is_err());
            assert_eq!(needed, 5);
            assert!(write_c_string("abc", buf.as_mut_ptr().cast(), 4, &mut needed).is_ok());
        }
        assert_eq!(&buf, b"abc\0");
    }
}
