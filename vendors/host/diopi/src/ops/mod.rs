//! The exported C entry points (`diopi*`), grouped like the kernels.

use crate::rt;
use std::ffi::c_char;

mod linalg;
mod misc;
mod nn;
mod pointwise;

/// "host": the vendor this library serves.
#[no_mangle]
extern "C" fn diopiGetVendorName() -> *const c_char {
    c"host".as_ptr()
}

/// The library's version.
#[no_mangle]
extern "C" fn diopiGetImplVersion() -> *const c_char {
    concat!("dipu-rs host DIOPI ", env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// The message of the calling thread's last failed call.
#[no_mangle]
extern "C" fn diopiGetLastErrorString() -> *const c_char {
    rt::last_error_ptr()
}

use crate::rt::{err, Error, R};
use crate::types::{dtype, ConstTensorHandle, ContextHandle};
use crate::view::TView;

/// Queues `f` on the context's stream for the device of `dev_of`.
///
/// # Safety
/// `ctx` and `dev_of` are framework handles.
pub(crate) unsafe fn go(
    ctx: ContextHandle,
    dev_of: ConstTensorHandle,
    f: impl FnOnce() + Send + 'static,
) -> R<()> {
    // SAFETY: forwarded from the caller.
    let t = unsafe { rt::target(ctx, dev_of) }?;
    rt::launch(t, f)
}

/// Error unless `x` broadcasts to `out`'s shape.
pub(crate) fn check_bcast(out: &TView, x: &TView, name: &str) -> R<()> {
    if x.broadcast_strides(out.shape()).is_none() {
        return Err(err(format!(
            "{name} of shape {:?} does not broadcast to the output's shape {:?}",
            x.shape(),
            out.shape()
        )));
    }
    Ok(())
}

/// Error unless `t` has a floating dtype (f16, bf16, f32, f64).
pub(crate) fn check_float(t: &TView, name: &str) -> R<()> {
    if !dtype::is_float(t.dtype) {
        return Err(Error {
            code: crate::types::error::DTYPE_NOT_SUPPORTED,
            msg: format!(
                "{name} has dtype {}; a floating dtype is required",
                dtype::name(t.dtype)
            ),
        });
    }
    Ok(())
}

/// Error unless `t` is f32 or f64 (or, with `half`, f16/bf16).
pub(crate) fn check_f32_f64(t: &TView, name: &str, half: bool) -> R<()> {
    let ok = matches!(t.dtype, dtype::F32 | dtype::F64)
        || (half && matches!(t.dtype, dtype::F16 | dtype::BF16));
    if !ok {
        return Err(Error {
            code: crate::types::error::DTYPE_NOT_SUPPORTED,
            msg: format!(
                "{name} has dtype {}, not supported by this op",
                dtype::name(t.dtype)
            ),
        });
    }
    Ok(())
}

/// Error unless `t` has exactly `shape`.
pub(crate) fn check_shape(t: &TView, shape: &[i64], name: &str) -> R<()> {
    if t.shape() != shape {
        return Err(err(format!(
            "{name} has shape {:?}, expected {:?}",
            t.shape(),
            shape
        )));
    }
    Ok(())
}

/// Error unless `t` has an integer dtype (index tensors).
pub(crate) fn check_index(t: &TView, name: &str) -> R<()> {
    if !matches!(
        t.dtype,
        dtype::I64 | dtype::I32 | dtype::I16 | dtype::I8 | dtype::U8
    ) {
        return Err(Error {
            code: crate::types::error::DTYPE_NOT_SUPPORTED,
            msg: format!(
                "{name} has dtype {}; an integer dtype is required",
                dtype::name(t.dtype)
            ),
        });
    }
    Ok(())
}

/// A dimension index normalised into `0..ndim` (ndim 0 accepts -1 and 0).
pub(crate) fn norm_dim(d: i64, ndim: usize, name: &str) -> R<usize> {
    let n = ndim.max(1) as i64;
    let r = if d < 0 { d + n } else { d };
    if r < 0 || r >= n {
        return Err(err(format!(
            "{name} {d} is out of range for a tensor of {ndim} dimensions"
        )));
    }
    Ok(r as usize)
}
