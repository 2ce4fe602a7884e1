//! The exported C entry points (`diopi*`), grouped like the kernels.

use crate::rt;

mod ext;
mod linalg;
mod misc;
mod nn;
mod pointwise;

dipu_diopi_kernelkit::export_library_info!("host", "dipu-rs host DIOPI");

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

pub(crate) use dipu_diopi_kernelkit::check::norm_dim;

/// Error unless `t` has exactly `shape`.
pub(crate) fn check_shape(t: &TView, shape: &[i64], name: &str) -> R<()> {
    dipu_diopi_kernelkit::check::shape(t.shape(), shape, name)
}

/// Error unless `t` has an integer dtype (index tensors).
pub(crate) fn check_index(t: &TView, name: &str) -> R<()> {
    dipu_diopi_kernelkit::check::index_dtype(t.dtype, name)
}
