//! An op's front half: its errors, the calling thread's last-error message
//! (`diopiGetLastErrorString`), the guard every entry point runs in, the
//! tensor descriptor reader and the scalar and size argument readers.

use crate::sys::*;
use crate::types::{error, ConstTensorHandle, DiopiScalar, DiopiSize, Scalar};
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};

/// An op's failure: a `diopiError_t` and the message for diopiGetLastErrorString.
#[derive(Debug)]
pub struct Error {
    /// The status returned.
    pub code: i32,
    /// The message.
    pub msg: String,
}

/// Result of an op's front half.
pub type R<T> = Result<T, Error>;

/// A `diopiErrorOccurred` error.
pub fn err(msg: impl Into<String>) -> Error {
    Error {
        code: error::ERROR_OCCURRED,
        msg: msg.into(),
    }
}

/// `Ok` for `diopiSuccess`, else an error naming the diopirt call `what`.
pub fn check(code: i32, what: &str) -> R<()> {
    if code == error::SUCCESS {
        Ok(())
    } else {
        Err(err(format!("{what} failed with status {code}")))
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::new("no error").unwrap_or_default());
}

/// The calling thread's last error message (valid until its next error).
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs an op's front half, turning errors and panics into a status and
/// the message of `diopiGetLastErrorString`.
pub fn guard(op: &str, f: impl FnOnce() -> R<()>) -> i32 {
    let (code, msg) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => return error::SUCCESS,
        Ok(Err(e)) => (e.code, format!("diopi{op}: {}", e.msg)),
        Err(_) => (
            error::ERROR_OCCURRED,
            format!("diopi{op}: internal error (panic)"),
        ),
    };
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
    code
}

/// A tensor descriptor as diopirt gives it: non-NULL, at most the
/// library's dimensions, one stride per dimension, no negative size, and
/// data unless it is empty. Its dtype and device are the library's to check.
#[derive(Debug)]
pub struct Desc<'a> {
    /// First element (const; `diopiGetTensorData` gives the mutable one).
    pub data: *const c_void,
    /// Sizes.
    pub shape: &'a [i64],
    /// Strides, in elements.
    pub strides: &'a [i64],
    /// `diopiDtype_t`.
    pub dtype: i32,
    /// `diopiDevice_t`.
    pub device: i32,
}

/// Reads and checks the descriptor of tensor `name` (see [`Desc`]).
///
/// # Safety
/// `h` must be a tensor handle of the framework (or NULL) that outlives
/// `'a`.
pub unsafe fn describe<'a>(h: ConstTensorHandle, name: &str, max_dims: usize) -> R<Desc<'a>> {
    if h.is_null() {
        return Err(err(format!("{name} is NULL")));
    }
    let mut data: *const c_void = std::ptr::null();
    let mut shape = DiopiSize {
        data: std::ptr::null(),
        len: 0,
    };
    let mut stride = shape;
    let (mut dt, mut dev) = (0i32, 0i32);
    // SAFETY: h is a framework handle; out-pointers are valid locals.
    unsafe {
        check(
            diopiGetTensorDataConst(h, &mut data),
            "diopiGetTensorDataConst",
        )?;
        check(diopiGetTensorShape(h, &mut shape), "diopiGetTensorShape")?;
        check(diopiGetTensorStride(h, &mut stride), "diopiGetTensorStride")?;
        check(diopiGetTensorDtype(h, &mut dt), "diopiGetTensorDtype")?;
        check(diopiGetTensorDevice(h, &mut dev), "diopiGetTensorDevice")?;
    }
    if shape.len < 0 || shape.len as usize > max_dims {
        return Err(err(format!(
            "{name} has {} dimensions; at most {max_dims} are supported",
            shape.len
        )));
    }
    if stride.len != shape.len {
        return Err(err(format!(
            "{name}: {} strides for {} dimensions",
            stride.len, shape.len
        )));
    }
    let nd = shape.len as usize;
    let (shape, strides): (&[i64], &[i64]) = if nd == 0 {
        (&[], &[])
    } else {
        // SAFETY: the runtime returned `nd` entries for each, alive as long
        // as the handle.
        unsafe {
            (
                std::slice::from_raw_parts(shape.data, nd),
                std::slice::from_raw_parts(stride.data, nd),
            )
        }
    };
    if shape.iter().any(|&s| s < 0) {
        return Err(err(format!("{name} has a negative size {shape:?}")));
    }
    if shape.iter().all(|&s| s > 0) && data.is_null() {
        return Err(err(format!("{name} has no data")));
    }
    Ok(Desc {
        data,
        shape,
        strides,
        dtype: dt,
        device: dev,
    })
}

/// Reads a scalar argument.
///
/// # Safety
/// `s` must be NULL or point at a `diopiScalar_t`.
pub unsafe fn scalar(s: *const DiopiScalar, name: &str) -> R<Scalar> {
    if s.is_null() {
        return Err(err(format!("{name} is NULL")));
    }
    // SAFETY: non-NULL scalar pointer from the caller.
    Ok(unsafe { (*s).get() })
}

/// Reads an optional scalar (NULL = None).
///
/// # Safety
/// As [`scalar`].
pub unsafe fn opt_scalar(s: *const DiopiScalar) -> Option<Scalar> {
    // SAFETY: non-NULL scalar pointer from the caller.
    (!s.is_null()).then(|| unsafe { (*s).get() })
}

/// Reads a `diopiSize_t`.
///
/// # Safety
/// As [`DiopiSize::to_vec`].
pub unsafe fn size(s: DiopiSize) -> Vec<i64> {
    // SAFETY: forwarded.
    unsafe { s.to_vec() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: the pointer is this thread's message, alive until its next error.
        unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn guard_reports_errors_and_panics() {
        assert_eq!(guard("Ok", || Ok(())), error::SUCCESS);
        let code = guard("Add", || {
            Err(Error {
                code: error::DTYPE_NOT_SUPPORTED,
                msg: "input has dtype bool".into(),
            })
        });
        assert_eq!(code, error::DTYPE_NOT_SUPPORTED);
        assert_eq!(last(), "diopiAdd: input has dtype bool");
        assert_eq!(guard("Mul", || panic!("boom")), error::ERROR_OCCURRED);
        assert_eq!(last(), "diopiMul: internal error (panic)");
        assert_eq!(guard("Sub", || Err(err("a\0b"))), error::ERROR_OCCURRED);
        assert_eq!(last(), "diopiSub: a b");
    }

    #[test]
    fn check_names_the_call() {
        assert!(check(error::SUCCESS, "diopiGetStream").is_ok());
        let e = check(7, "diopiGetStream").unwrap_err();
        assert_eq!(e.code, error::ERROR_OCCURRED);
        assert_eq!(e.msg, "diopiGetStream failed with status 7");
    }

    #[test]
    fn reads_scalars() {
        let s = DiopiScalar {
            stype: crate::types::dtype::I64,
            value: crate::types::ScalarValue { ival: 3 },
        };
        // SAFETY: pointers to a local scalar, or NULL.
        unsafe {
            assert_eq!(scalar(&s, "alpha").unwrap(), Scalar::Int(3));
            assert!(scalar(std::ptr::null(), "alpha")
                .unwrap_err()
                .msg
                .contains("alpha is NULL"));
            assert_eq!(opt_scalar(std::ptr::null()), None);
        }
    }
}
