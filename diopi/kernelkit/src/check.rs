//! Argument checks every kernel library makes, on shapes, dtypes and
//! dimension indices read out of its own descriptors.

use crate::rt::{err, Error, R};
use crate::types::{dtype, error};

/// Error unless `actual` (the shape of `name`) is exactly `expected`.
pub fn shape(actual: &[i64], expected: &[i64], name: &str) -> R<()> {
    if actual != expected {
        return Err(err(format!(
            "{name} has shape {actual:?}, expected {expected:?}"
        )));
    }
    Ok(())
}

/// Error unless `d` (the dtype of `name`) is an integer dtype an index
/// tensor may have.
pub fn index_dtype(d: i32, name: &str) -> R<()> {
    if !matches!(
        d,
        dtype::I64 | dtype::I32 | dtype::I16 | dtype::I8 | dtype::U8
    ) {
        return Err(Error {
            code: error::DTYPE_NOT_SUPPORTED,
            msg: format!(
                "{name} has dtype {}; an integer dtype is required",
                dtype::name(d)
            ),
        });
    }
    Ok(())
}

/// A dimension index normalised into `0..ndim` (ndim 0 accepts -1 and 0).
pub fn norm_dim(d: i64, ndim: usize, name: &str) -> R<usize> {
    let n = ndim.max(1) as i64;
    let r = if d < 0 { d + n } else { d };
    if r < 0 || r >= n {
        return Err(err(format!(
            "{name} {d} is out of range for a tensor of {ndim} dimensions"
        )));
    }
    Ok(r as usize)
}

/// Exports the library's `diopiGetVendorName`, `diopiGetImplVersion`
/// (`$version` followed by the crate's version) and
/// `diopiGetLastErrorString` (the message [`crate::rt::guard`] stored).
#[macro_export]
macro_rules! export_library_info {
    ($vendor:literal, $version:literal) => {
        /// The vendor this library serves.
        #[no_mangle]
        extern "C" fn diopiGetVendorName() -> *const ::std::ffi::c_char {
            concat!($vendor, "\0").as_ptr() as *const ::std::ffi::c_char
        }

        /// The library's version.
        #[no_mangle]
        extern "C" fn diopiGetImplVersion() -> *const ::std::ffi::c_char {
            concat!($version, " ", env!("CARGO_PKG_VERSION"), "\0").as_ptr()
                as *const ::std::ffi::c_char
        }

        /// The message of the calling thread's last failed call.
        #[no_mangle]
        extern "C" fn diopiGetLastErrorString() -> *const ::std::ffi::c_char {
            $crate::rt::last_error_ptr()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert!(shape(&[2, 3], &[2, 3], "out").is_ok());
        let e = shape(&[3, 2], &[2, 3], "out").unwrap_err();
        assert_eq!(e.msg, "out has shape [3, 2], expected [2, 3]");
    }

    #[test]
    fn index_dtypes() {
        for d in [dtype::I64, dtype::I32, dtype::I16, dtype::I8, dtype::U8] {
            assert!(index_dtype(d, "index").is_ok());
        }
        let e = index_dtype(dtype::F32, "index").unwrap_err();
        assert_eq!(e.code, error::DTYPE_NOT_SUPPORTED);
        assert!(e.msg.contains("integer dtype is required"), "{}", e.msg);
    }

    #[test]
    fn dims() {
        assert_eq!(norm_dim(-1, 3, "dim").unwrap(), 2);
        assert_eq!(norm_dim(0, 0, "dim").unwrap(), 0);
        assert_eq!(norm_dim(-1, 0, "dim").unwrap(), 0);
        assert!(norm_dim(3, 3, "dim")
            .unwrap_err()
            .msg
            .contains("out of range"));
        assert!(norm_dim(-4, 3, "dim").is_err());
    }
}
