//! CNRT, CNCL and CNDrv status codes to [`Error`]s that keep the code and
//! the library's own name and message for it.

#![expect(
    non_upper_case_globals,
    reason = "matches on the C constants' own names"
)]

use std::ffi::{c_char, CStr};

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::cncl::*;
use crate::cndrv::*;
use crate::cnrt::*;

/// The `ErrorKind` of a `cnrtRet_t`.
pub(crate) fn cnrt_kind(code: cnrtRet_t) -> ErrorKind {
    match code {
        cnrtErrorNoMem => ErrorKind::OutOfMemory,
        cnrtErrorArgsInvalid => ErrorKind::InvalidArgument,
        cnrtErrorNotReady | cnrtErrorBusy => ErrorKind::NotReady,
        cnrtErrorUnknown => ErrorKind::VendorError,
        _ => ErrorKind::VendorError,
    }
}

/// The `ErrorKind` of a `cnclResult_t`.
pub(crate) fn cncl_kind(code: cnclResult_t) -> ErrorKind {
    match code {
        CNCL_RET_ERR_ARGUMENTS => ErrorKind::InvalidArgument,
        CNCL_RET_ASYNC_IN_PROGRESS => ErrorKind::NotReady,
        CNCL_RET_ERR_INTERNAL | CNCL_RET_ASYNC_ERROR => ErrorKind::VendorError,
        _ => ErrorKind::VendorError,
    }
}

/// A C string from a library, or `None` for null.
///
/// # Safety
/// `s` is null or a NUL-terminated string that stays valid for the call.
unsafe fn text(s: *const c_char) -> Option<String> {
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

impl Cnrt {
    /// `Ok` for `cnrtSuccess`, else the error of `call` (built only then).
    pub(crate) fn check(&self, code: cnrtRet_t, call: impl FnOnce() -> String) -> Result<()> {
        if code == cnrtSuccess {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// Clears the calling thread's sticky error (`cnrtGetLastError`), so
    /// that a failure the vendor handled does not surface in a later call.
    pub(crate) fn clear_last_error(&self) {
        if let Ok(clear) = self.cnrtGetLastError() {
            // SAFETY: takes no arguments and only resets thread-local state.
            unsafe { clear() };
        }
    }

    /// The error `code` of `call`, as `call: cnrtErrorName (code): message`.
    /// Also clears the thread's sticky error.
    pub(crate) fn error(&self, code: cnrtRet_t, call: &str) -> Error {
        self.clear_last_error();
        let describe = |f: Result<unsafe extern "C" fn(cnrtRet_t) -> *const c_char>| {
            // SAFETY: both functions take any code and return a static string.
            f.ok().and_then(|f| unsafe { text(f(code)) })
        };
        let name = describe(self.cnrtGetErrorName()).unwrap_or_else(|| "cnrtRet_t".into());
        let message = describe(self.cnrtGetErrorStr()).unwrap_or_else(|| "no message".into());
        Error::vendor(
            cnrt_kind(code),
            i64::from(code),
            format!("{call}: {name} ({code}): {message}"),
        )
    }
}

impl Cncl {
    /// `Ok` for `CNCL_RET_SUCCESS`, else the error of `call`.
    pub(crate) fn check(&self, code: cnclResult_t, call: impl FnOnce() -> String) -> Result<()> {
        if code == CNCL_RET_SUCCESS {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, with `cnclGetErrorStr`'s message.
    pub(crate) fn error(&self, code: cnclResult_t, call: &str) -> Error {
        // SAFETY: cnclGetErrorStr takes any code and returns a static string.
        let message = self
            .cnclGetErrorStr()
            .ok()
            .and_then(|f| unsafe { text(f(code)) })
            .unwrap_or_else(|| "unknown CNCL error".into());
        Error::vendor(
            cncl_kind(code),
            i64::from(code),
            format!("{call}: {message} (cnclResult_t {code})"),
        )
    }
}

impl Cndrv {
    /// `Ok` for `CN_SUCCESS`, else the error of `call`.
    pub(crate) fn check(&self, code: CNresult, call: impl FnOnce() -> String) -> Result<()> {
        if code == CN_SUCCESS {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, as `call: CN_ERROR_NAME (code): string`.
    pub(crate) fn error(&self, code: CNresult, call: &str) -> Error {
        let describe =
            |f: Result<unsafe extern "C" fn(CNresult, *mut *const c_char) -> CNresult>| {
                let f = f.ok()?;
                let mut s = std::ptr::null();
                // SAFETY: `s` is a valid out-pointer; on success the driver
                // points it at a static string.
                let ok = unsafe { f(code, &mut s) } == CN_SUCCESS;
                // SAFETY: null or a static NUL-terminated string.
                ok.then(|| unsafe { text(s) }).flatten()
            };
        let name = describe(self.cnGetErrorName()).unwrap_or_else(|| "CNresult".into());
        let message = describe(self.cnGetErrorString()).unwrap_or_else(|| "no message".into());
        // No published table gives CNDrv's out-of-memory code a value we
        // could pin, so the kind comes from the error's name.
        let kind = if name.contains("OUT_OF_MEMORY") {
            ErrorKind::OutOfMemory
        } else {
            ErrorKind::VendorError
        };
        Error::vendor(
            kind,
            i64::from(code),
            format!("{call}: {name} ({code}): {message}"),
        )
    }
}
