//! CUDA, driver and NCCL status codes to [`Error`]s that keep the code and
//! the library's own name and message for it.

#![expect(
    non_upper_case_globals,
    reason = "matches on the C constants' own names"
)]

use std::ffi::{c_char, CStr};

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::cudart::*;
use crate::driver::*;
use crate::nccl::*;

/// The `ErrorKind` of a `cudaError_t`.
pub(crate) fn cuda_kind(code: cudaError_t) -> ErrorKind {
    match code {
        cudaErrorMemoryAllocation => ErrorKind::OutOfMemory,
        cudaErrorInvalidValue
        | cudaErrorInvalidHostPointer
        | cudaErrorInvalidDevicePointer
        | cudaErrorInvalidResourceHandle => ErrorKind::InvalidArgument,
        cudaErrorInvalidDevice => ErrorKind::InvalidDevice,
        cudaErrorNoDevice
        | cudaErrorInsufficientDriver
        | cudaErrorStubLibrary
        | cudaErrorDevicesUnavailable
        | cudaErrorSystemDriverMismatch
        | cudaErrorInitializationError => ErrorKind::NoDevice,
        cudaErrorNotReady => ErrorKind::NotReady,
        cudaErrorNotSupported => ErrorKind::Unsupported,
        _ => ErrorKind::VendorError,
    }
}

/// The `ErrorKind` of a `CUresult`.
pub(crate) fn driver_kind(code: CUresult) -> ErrorKind {
    match code {
        CUDA_ERROR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
        CUDA_ERROR_INVALID_VALUE | CUDA_ERROR_INVALID_HANDLE => ErrorKind::InvalidArgument,
        CUDA_ERROR_INVALID_DEVICE => ErrorKind::InvalidDevice,
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_STUB_LIBRARY | CUDA_ERROR_NOT_INITIALIZED => {
            ErrorKind::NoDevice
        }
        CUDA_ERROR_NOT_READY => ErrorKind::NotReady,
        CUDA_ERROR_NOT_SUPPORTED => ErrorKind::Unsupported,
        _ => ErrorKind::VendorError,
    }
}

/// The `ErrorKind` of an `ncclResult_t`.
pub(crate) fn nccl_kind(code: ncclResult_t) -> ErrorKind {
    match code {
        ncclInvalidArgument | ncclInvalidUsage => ErrorKind::InvalidArgument,
        ncclInProgress => ErrorKind::NotReady,
        ncclTimeout => ErrorKind::Timeout,
        ncclUnhandledCudaError | ncclSystemError | ncclInternalError | ncclRemoteError => {
            ErrorKind::VendorError
        }
        _ => ErrorKind::VendorError,
    }
}

/// The text of `ncclGetLastError` at the last error reported.
static LAST_SEEN: parking_lot::Mutex<String> = parking_lot::Mutex::new(String::new());

/// A C string from a library, or `None` for null.
///
/// # Safety
/// `s` is null or a NUL-terminated string that stays valid for the call.
unsafe fn text(s: *const c_char) -> Option<String> {
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

impl Cudart {
    /// `Ok` for `cudaSuccess`, else the error of `call` (built only then).
    pub(crate) fn check(&self, code: cudaError_t, call: impl FnOnce() -> String) -> Result<()> {
        if code == cudaSuccess {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, as `call: cudaErrorName (code): string`.
    /// Also clears the thread's last error so it does not surface later.
    pub(crate) fn error(&self, code: cudaError_t, call: &str) -> Error {
        if let Ok(clear) = self.cudaGetLastError() {
            // SAFETY: takes no arguments and only resets thread-local state.
            unsafe { clear() };
        }
        let describe = |f: Result<unsafe extern "C" fn(cudaError_t) -> *const c_char>| {
            // SAFETY: cudaGetErrorName/String take any code and return a
            // static string (or "unrecognized error code").
            f.ok().and_then(|f| unsafe { text(f(code)) })
        };
        let name = describe(self.cudaGetErrorName()).unwrap_or_else(|| "cudaError".into());
        let message = describe(self.cudaGetErrorString()).unwrap_or_else(|| "no message".into());
        Error::vendor(
            cuda_kind(code),
            i64::from(code),
            format!("{call}: {name} ({code}): {message}"),
        )
    }
}

impl Driver {
    /// `Ok` for `CUDA_SUCCESS`, else the error of `call` (built only then).
    pub(crate) fn check(&self, code: CUresult, call: impl FnOnce() -> String) -> Result<()> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, as `call: CUDA_ERROR_NAME (code): string`.
    pub(crate) fn error(&self, code: CUresult, call: &str) -> Error {
        let describe =
            |f: Result<unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult>| {
                let f = f.ok()?;
                let mut s = std::ptr::null();
                // SAFETY: `s` is a valid out-pointer; on success the driver
                // points it at a static string.
                let ok = unsafe { f(code, &mut s) } == CUDA_SUCCESS;
                // SAFETY: null or a static NUL-terminated string.
                ok.then(|| unsafe { text(s) }).flatten()
            };
        let name = describe(self.cuGetErrorName()).unwrap_or_else(|| "CUresult".into());
        let message = describe(self.cuGetErrorString()).unwrap_or_else(|| "no message".into());
        Error::vendor(
            driver_kind(code),
            i64::from(code),
            format!("{call}: {name} ({code}): {message}"),
        )
    }
}

impl Nccl {
    /// `Ok` for `ncclSuccess`, else the error of `call` (built only then).
    pub(crate) fn check(&self, code: ncclResult_t, call: impl FnOnce() -> String) -> Result<()> {
        if code == ncclSuccess {
            Ok(())
        } else {
            Err(self.error(code, &call()))
        }
    }

    /// The error `code` of `call`, as `call: NCCL's string (ncclResult_t
    /// code); last NCCL error: ...`.
    pub(crate) fn error(&self, code: ncclResult_t, call: &str) -> Error {
        // SAFETY: ncclGetErrorString takes any code and returns a static string.
        let message = self
            .ncclGetErrorString()
            .ok()
            .and_then(|f| unsafe { text(f(code)) });
        // SAFETY: ncclGetLastError ignores its communicator (null is
        // documented as allowed) and returns a string we copy.
        let last = self
            .ncclGetLastError()
            .ok()
            .and_then(|f| unsafe { text(f(std::ptr::null_mut())) })
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty());
        // NCCL's last error is process-wide and never cleared: only a text
        // not seen at an earlier error can be about this one.
        let last = last.filter(|l| {
            let mut seen = LAST_SEEN.lock();
            let new = *seen != *l;
            seen.clone_from(l);
            new
        });
        let mut text = format!(
            "{call}: {} (ncclResult_t {code})",
            message.unwrap_or_else(|| "unknown NCCL error".into())
        );
        if let Some(last) = last {
            text.push_str("; NCCL's last error (process-wide, possibly an earlier call's): ");
            text.push_str(&last);
        }
        Error::vendor(nccl_kind(code), i64::from(code), text)
    }
}
