//! The one error type every vendor call returns.

use std::fmt;

/// What went wrong, independent of the vendor.
///
/// The numeric values cross the plugin ABI and never change; a retired value
/// is never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(i32)]
pub enum ErrorKind {
    /// The device (or pinned host memory) has no room for the request.
    OutOfMemory = 1,
    /// A device index outside `0..device_count()`.
    InvalidDevice = 2,
    /// An argument the vendor rejects: null or unknown pointer, bad handle,
    /// size overflow, double free, wrong copy direction.
    InvalidArgument = 3,
    /// Work is still pending (a query that is not an error for the caller).
    NotReady = 4,
    /// The vendor does not implement this optional capability.
    Unsupported = 5,
    /// The vendor library loaded but the machine has no usable device.
    NoDevice = 6,
    /// The vendor library (or plugin file) could not be found.
    VendorLibraryNotFound = 7,
    /// The file is a shared library but not a dipu-rs vendor (no entry symbol).
    NotAVendor = 8,
    /// The plugin was built for another major version of the plugin ABI.
    AbiMismatch = 9,
    /// The vendor's own initialisation failed.
    VendorInitFailed = 10,
    /// The vendor's runtime returned an error code not covered above.
    VendorError = 11,
    /// An operation did not finish within its time limit.
    Timeout = 12,
    /// A bug inside the vendor or the runtime (for example a caught panic).
    Internal = 13,
    /// A configuration value (environment variable or option) is invalid.
    InvalidConfig = 14,
}

impl ErrorKind {
    /// Every kind, in code order.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::OutOfMemory,
        ErrorKind::InvalidDevice,
        ErrorKind::InvalidArgument,
        ErrorKind::NotReady,
        ErrorKind::Unsupported,
        ErrorKind::NoDevice,
        ErrorKind::VendorLibraryNotFound,
        ErrorKind::NotAVendor,
        ErrorKind::AbiMismatch,
        ErrorKind::VendorInitFailed,
        ErrorKind::VendorError,
        ErrorKind::Timeout,
        ErrorKind::Internal,
        ErrorKind::InvalidConfig,
    ];

    /// The stable numeric code (never 0, which means success on the ABI).
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The kind for a numeric code; unknown codes become `Internal`.
    pub fn from_code(code: i32) -> ErrorKind {
        Self::ALL
            .into_iter()
            .find(|k| k.code() == code)
            .unwrap_or(ErrorKind::Internal)
    }

    /// A short lower-case name, e.g. `"out of memory"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::OutOfMemory => "out of memory",
            ErrorKind::InvalidDevice => "invalid device",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::NotReady => "not ready",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NoDevice => "no device",
            ErrorKind::VendorLibraryNotFound => "vendor library not found",
            ErrorKind::NotAVendor => "not a dipu vendor",
            ErrorKind::AbiMismatch => "plugin ABI mismatch",
            ErrorKind::VendorInitFailed => "vendor initialisation failed",
            ErrorKind::VendorError => "vendor error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Internal => "internal error",
            ErrorKind::InvalidConfig => "invalid configuration",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error from a vendor or the loader: a kind, the vendor's raw code when
/// there is one, and a message a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Error {
    kind: ErrorKind,
    vendor_code: Option<i64>,
    message: String,
}

impl Error {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.is_empty() {
            message = kind.as_str().to_owned();
        }
        Error {
            kind,
            vendor_code: None,
            message,
        }
    }

    /// An error carrying the vendor's raw status code (e.g. a `cudaError_t`).
    pub fn vendor(kind: ErrorKind, code: i64, message: impl Into<String>) -> Self {
        Error {
            vendor_code: Some(code),
            ..Error::new(kind, message)
        }
    }

    /// `Unsupported` for an optional capability `what` of `vendor`.
    pub fn unsupported(vendor: &str, what: &str) -> Self {
        Error::new(
            ErrorKind::Unsupported,
            format!("vendor `{vendor}` does not support {what}"),
        )
    }

    /// `InvalidDevice` for `device` when the vendor has `count` devices.
    pub fn invalid_device(device: i32, count: i32) -> Self {
        Error::new(
            ErrorKind::InvalidDevice,
            format!("device index {device} is out of range: valid indices are 0..{count}"),
        )
    }

    /// `InvalidArgument` with a message.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The vendor's raw status code, if the error came from the vendor's library.
    pub fn vendor_code(&self) -> Option<i64> {
        self.vendor_code
    }

    /// The human-readable message (never empty).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` put in front of the message.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(code) = self.vendor_code {
            write!(f, " (vendor code {code})")?;
        }
        Ok(())
    }
}

/// The result of every vendor call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for (i, kind) in ErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(ErrorKind::from_code(kind.code()), kind);
            assert_ne!(kind.code(), 0, "0 is the ABI's success code");
            assert!(ErrorKind::ALL[..i].iter().all(|k| k.code() != kind.code()));
        }
        assert_eq!(ErrorKind::from_code(9999), ErrorKind::Internal);
    }

    #[test]
    fn display_carries_kind_message_and_code() {
        let e = Error::vendor(ErrorKind::OutOfMemory, 2, "cudaMalloc(1 GiB) failed");
        assert_eq!(
            e.to_string(),
            "out of memory: cudaMalloc(1 GiB) failed (vendor code 2)"
        );
        assert_eq!(e.vendor_code(), Some(2));
        let e = Error::new(ErrorKind::NotReady, "");
        assert_eq!(e.message(), "not ready", "an empty message is replaced");
        assert_eq!(
            Error::invalid_device(5, 2).context("set_device").message(),
            "set_device: device index 5 is out of range: valid indices are 0..2"
        );
    }
}
