//! Error reporting across the C boundary: the calling thread's last
//! message, an optional sink (the C library's `dipu_last_error_message`),
//! and panic boundaries for the exported functions.

use std::any::Any;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use dipu_runtime::{Error, ErrorKind, Result};

use crate::types::DiopiError;

thread_local! {
    static LAST: RefCell<String> = const { RefCell::new(String::new()) };
}

static SINK: OnceLock<fn(String)> = OnceLock::new();

/// Also sends every error message of this crate's C functions to `sink`
/// (called on the failing thread). The C library sets its
/// `dipu_last_error_message` here; only the first call counts.
pub fn set_error_sink(sink: fn(String)) {
    let _ = SINK.set(sink);
}

/// The message of the last failure on this thread of a diopirt function
/// or `dipu_launch_host_func_raw` ("" if none failed yet).
pub fn last_runtime_error() -> String {
    LAST.try_with(|l| l.borrow().clone()).unwrap_or_default()
}

/// Records `message` as this thread's last error (and sends it to the sink).
pub(crate) fn report(message: &str) {
    tracing::debug!("{message}");
    let _ = LAST.try_with(|l| message.clone_into(&mut l.borrow_mut()));
    if let Some(sink) = SINK.get() {
        sink(message.to_owned());
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

/// Reports the error `e` of `what` where nobody can return it (a drop).
pub(crate) fn report_error(what: &str, e: &Error) {
    report(&format!("{what}: {e}"));
}

/// Runs a diopirt body: `Ok` is `diopiSuccess`; an error or a caught panic
/// is reported (prefixed with `name`) and becomes `diopiErrorOccurred`.
pub(crate) fn diopi_status(name: &str, body: impl FnOnce() -> Result<()>) -> DiopiError {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => DiopiError::SUCCESS,
        Ok(Err(e)) => {
            report(&format!("{name}: {e}"));
            DiopiError::ERROR_OCCURRED
        }
        Err(p) => {
            report(&format!(
                "{name}: internal error (a panic inside dipu-rs): {}",
                panic_message(p.as_ref())
            ));
            DiopiError::ERROR_OCCURRED
        }
    }
}

/// Runs the body of a `dipu_*` C function of this crate: 0 on success,
/// else the `dipu_status` code of the error (a panic is `Internal`).
pub(crate) fn status_of(name: &str, body: impl FnOnce() -> Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            report(&format!("{name}: {e}"));
            e.kind().code()
        }
        Err(p) => {
            report(&format!(
                "{name}: internal error (a panic inside dipu-rs): {}",
                panic_message(p.as_ref())
            ));
            ErrorKind::Internal.code()
        }
    }
}

/// `InvalidArgument` naming `what` when `ptr` is NULL.
pub(crate) fn non_null<T>(ptr: *const T, what: &str) -> Result<()> {
    if ptr.is_null() {
        Err(Error::invalid_argument(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// Writes `value` to the out-pointer `out` (checked not NULL).
///
/// # Safety
/// `out` must be NULL or valid for writing a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, what: &str, value: T) -> Result<()> {
    non_null(out, what)?;
    // SAFETY: not NULL; writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}
