//! ACL and HCCL status codes to [`Error`]s that keep the code and the
//! library's message. ACL has no code-to-string call: the message is
//! `aclGetRecentErrMsg`, which is per thread, so it is read at once.

use std::ffi::{c_char, CStr};

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::acl::*;
use crate::hccl::*;

/// The `ErrorKind` of an `aclError`.
pub(crate) fn acl_kind(code: aclError) -> ErrorKind {
    match code {
        ACL_ERROR_RT_MEMORY_ALLOCATION | ACL_ERROR_RT_DEVICE_OOM => ErrorKind::OutOfMemory,
        ACL_ERROR_RT_INVALID_DEVICEID => ErrorKind::InvalidDevice,
        ACL_ERROR_RT_NO_DEVICE | ACL_ERROR_RT_CONTEXT_NULL => ErrorKind::NoDevice,
        ACL_ERROR_RT_STREAM_NOT_COMPLETE | ACL_ERROR_RT_EVENT_NOT_COMPLETE => ErrorKind::NotReady,
        ACL_ERROR_RT_STREAM_SYNC_TIMEOUT | ACL_ERROR_RT_EVENT_SYNC_TIMEOUT => ErrorKind::Timeout,
        ACL_ERROR_INVALID_PARAM | ACL_ERROR_RT_PARAM_INVALID | ACL_ERROR_RT_INVALID_HANDLE => {
            ErrorKind::InvalidArgument
        }
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT => ErrorKind::Unsupported,
        _ => ErrorKind::VendorError,
    }
}

/// The `ErrorKind` of an `HcclResult`.
pub(crate) fn hccl_kind(code: HcclResult) -> ErrorKind {
    match code {
        HCCL_E_PARA | HCCL_E_PTR => ErrorKind::InvalidArgument,
        HCCL_E_MEMORY => ErrorKind::OutOfMemory,
        HCCL_E_NOT_SUPPORT => ErrorKind::Unsupported,
        HCCL_E_TIMEOUT => ErrorKind::Timeout,
        HCCL_E_AGAIN => ErrorKind::NotReady,
        _ => ErrorKind::VendorError,
    }
}

/// A C string from a library, or `None` for null or empty.
///
/// # Safety
/// `s` is null or a NUL-terminated string that stays valid for the call.
pub(crate) unsafe fn text(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let t = unsafe { CStr::from_ptr(s) }
        .to_string_lossy()
        .trim()
        .to_owned();
    (!t.is_empty()).then_some(t)
}

impl Acl {
    /// `Ok` for `ACL_SUCCESS`, else the error of `call` (built only then).
    pub(crate) fn check(&self, code: aclError, call: impl FnOnce() -> String) -> Result<()> {
        if code == ACL_SUCCESS {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, as `call: aclError code: message`, the
    /// message being this thread's `aclGetRecentErrMsg`.
    pub(crate) fn error(&self, code: aclError, call: &str) -> Error {
        // SAFETY: no arguments; returns a thread-local string (or null),
        // copied at once.
        let message = self
            .aclGetRecentErrMsg()
            .ok()
            .and_then(|f| unsafe { text(f()) })
            .unwrap_or_else(|| "no message".into());
        let kind = acl_kind(code);
        let mut text = format!("{call}: aclError {code}: {message}");
        if code == ACL_ERROR_RT_NO_EVENT_RESOURCE {
            text.push_str(" (every event of the device is in use: destroy unused events)");
        } else if code == ACL_ERROR_RT_NO_STREAM_RESOURCE {
            text.push_str(" (every stream of the device is in use: destroy unused streams)");
        }
        Error::vendor(kind, i64::from(code), text)
    }
}

impl Hccl {
    /// `Ok` for `HCCL_SUCCESS`, else the error of `call` (built only then).
    pub(crate) fn check(&self, code: HcclResult, call: impl FnOnce() -> String) -> Result<()> {
        if code == HCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, with `HcclGetErrorString` where it exists.
    pub(crate) fn error(&self, code: HcclResult, call: &str) -> Error {
        // SAFETY: takes any code and returns a static string.
        let message = self
            .HcclGetErrorString()
            .ok()
            .and_then(|f| unsafe { text(f(code)) })
            .unwrap_or_else(|| "no message (HcclGetErrorString is missing)".into());
        Error::vendor(
            hccl_kind(code),
            i64::from(code),
            format!("{call}: HcclResult {code}: {message}"),
        )
    }
}
