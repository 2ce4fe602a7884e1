//! OpenCL status codes to [`Error`]s that keep the code and name the call
//! and the status (`clEnqueueSVMMemcpy(...): CL_INVALID_VALUE (-30)`).

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::cl::cl_int;
use crate::status::*;

/// The `ErrorKind` of a status code.
pub(crate) fn kind(code: cl_int) -> ErrorKind {
    match code {
        CL_MEM_OBJECT_ALLOCATION_FAILURE | CL_OUT_OF_RESOURCES | CL_OUT_OF_HOST_MEMORY => {
            ErrorKind::OutOfMemory
        }
        CL_DEVICE_NOT_FOUND | CL_DEVICE_NOT_AVAILABLE | CL_PLATFORM_NOT_FOUND_KHR => {
            ErrorKind::NoDevice
        }
        CL_INVALID_DEVICE => ErrorKind::InvalidDevice,
        CL_INVALID_VALUE
        | CL_INVALID_COMMAND_QUEUE
        | CL_INVALID_CONTEXT
        | CL_INVALID_MEM_OBJECT
        | CL_INVALID_ARG_VALUE
        | CL_INVALID_KERNEL_ARGS
        | CL_INVALID_EVENT_WAIT_LIST
        | CL_INVALID_EVENT
        | CL_INVALID_OPERATION
        | CL_INVALID_BUFFER_SIZE
        | CL_MEM_COPY_OVERLAP => ErrorKind::InvalidArgument,
        CL_PROFILING_INFO_NOT_AVAILABLE => ErrorKind::NotReady,
        _ => ErrorKind::VendorError,
    }
}

/// `CL_INVALID_VALUE (-30)`, or `unknown status -12345`.
pub(crate) fn describe(code: cl_int) -> String {
    match name(code) {
        Some(name) => format!("{name} ({code})"),
        None => format!("unknown status {code}"),
    }
}

/// `Ok` for `CL_SUCCESS`, else the error of `call` (built only then).
pub(crate) fn check(code: cl_int, call: impl FnOnce() -> String) -> Result<()> {
    if code == CL_SUCCESS {
        Ok(())
    } else {
        Err(error(code, &call()))
    }
}

/// The error `code` of `call`: `call: CL_NAME (code)`.
pub(crate) fn error(code: cl_int, call: &str) -> Error {
    Error::vendor(
        kind(code),
        i64::from(code),
        format!("{call}: {}", describe(code)),
    )
}

/// The error of work that failed on the device: an event whose status is
/// the negative `code`. A failed command's own status is its error; the
/// commands that waited for it fail too, and PoCL gives them all status -1
/// (whatever the first failure was), which is no `CL_DEVICE_NOT_FOUND`.
pub(crate) fn failed(code: cl_int, what: &str) -> Error {
    let (kind, status) = if code == -1 {
        (
            ErrorKind::VendorError,
            "status -1 (a command it depended on failed)".to_owned(),
        )
    } else {
        let kind = match kind(code) {
            ErrorKind::OutOfMemory => ErrorKind::OutOfMemory,
            _ => ErrorKind::VendorError,
        };
        (kind, describe(code))
    };
    Error::vendor(
        kind,
        i64::from(code),
        format!("{what}: work queued before it failed on the device with {status}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_and_kinded() {
        let e = error(CL_INVALID_VALUE, "clEnqueueSVMMemcpy(dst, src, 4 bytes)");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.vendor_code(), Some(-30));
        assert!(
            e.message()
                .contains("clEnqueueSVMMemcpy(dst, src, 4 bytes): CL_INVALID_VALUE (-30)"),
            "{e}"
        );
        assert_eq!(kind(CL_OUT_OF_RESOURCES), ErrorKind::OutOfMemory);
        assert_eq!(kind(CL_PLATFORM_NOT_FOUND_KHR), ErrorKind::NoDevice);
        assert_eq!(kind(CL_INVALID_DEVICE), ErrorKind::InvalidDevice);
        assert_eq!(kind(CL_PROFILING_INFO_NOT_AVAILABLE), ErrorKind::NotReady);
        assert_eq!(
            kind(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST),
            ErrorKind::VendorError
        );
        assert_eq!(describe(-12345), "unknown status -12345");
        assert_eq!(
            describe(CL_PLATFORM_NOT_FOUND_KHR),
            "CL_PLATFORM_NOT_FOUND_KHR (-1001)"
        );
        assert!(check(CL_SUCCESS, || unreachable!("built only on failure")).is_ok());
    }

    #[test]
    fn a_failed_command_names_its_status() {
        let e = failed(CL_OUT_OF_RESOURCES, "stream_synchronize");
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        assert!(e
            .message()
            .starts_with("stream_synchronize: work queued before it failed"));
        assert!(e.message().contains("CL_OUT_OF_RESOURCES (-5)"), "{e}");
        let e = failed(-1, "event_synchronize");
        assert_eq!(
            e.kind(),
            ErrorKind::VendorError,
            "not CL_DEVICE_NOT_FOUND's NoDevice"
        );
        assert!(
            e.message()
                .contains("status -1 (a command it depended on failed)"),
            "{e}"
        );
        assert_eq!(failed(CL_INVALID_VALUE, "x").kind(), ErrorKind::VendorError);
    }
}
