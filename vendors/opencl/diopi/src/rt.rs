//! The framework's side: tensor descriptors read (with the diopirt
//! functions of `dipu-diopi-kernelkit`, resolved when the runtime loads the
//! library) and checked on the calling thread, the context's command queue
//! and temporaries. Errors, the last-error message and the op guard are the
//! kit's, re-exported.

use crate::types::*;
use dipu_diopi_kernelkit::sys::*;
use std::ffi::c_void;

pub use dipu_diopi_kernelkit::rt::{check, describe, err, guard, last_error_ptr, scalar, Error, R};

/// The most dimensions a tensor may have (the kernels' descriptor holds 8).
pub const MAX_DIMS: usize = 8;

/// A `diopiDtypeNotSupported` error naming the argument and its dtype.
pub fn dtype_err(what: &str, d: i32) -> Error {
    Error {
        code: error::DTYPE_NOT_SUPPORTED,
        msg: format!(
            "{what} has dtype {}, which this op does not support",
            dtype::name(d)
        ),
    }
}

/// A tensor as the kernels see it: its data pointer (device memory), dtype,
/// shape and strides in elements.
#[derive(Clone, Debug)]
pub struct T {
    /// First element.
    pub ptr: *mut c_void,
    /// `diopiDtype_t`.
    pub dtype: i32,
    /// Sizes.
    pub shape: Vec<i64>,
    /// Strides, in elements.
    pub strides: Vec<i64>,
}

impl T {
    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.shape.iter().product()
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Whether it has a floating dtype (f16, bf16, f32, f64).
    pub fn is_float(&self) -> bool {
        dtype::is_float(self.dtype)
    }
}

/// Reads and checks a (non-NULL) tensor: at most [`MAX_DIMS`] dimensions,
/// non-negative sizes, a dtype the kernels read and write, device memory.
///
/// # Safety
/// `h` must be a tensor handle of the framework (or NULL).
pub unsafe fn tensor(h: ConstTensorHandle, name: &str) -> R<T> {
    // SAFETY: forwarded from the caller; the descriptor is copied out here.
    let d = unsafe { describe(h, name, MAX_DIMS) }?;
    if !crate::kernels::dtype_supported(d.dtype) {
        return Err(dtype_err(name, d.dtype));
    }
    let t = T {
        ptr: d.data as *mut c_void,
        dtype: d.dtype,
        shape: d.shape.to_vec(),
        strides: d.strides.to_vec(),
    };
    if t.numel() > 0 && d.device != DEVICE_DEVICE {
        return Err(err(format!(
            "{name} is in host memory; this library's kernels take device tensors"
        )));
    }
    Ok(t)
}

/// Reads a tensor the op writes (its mutable data pointer).
///
/// # Safety
/// As [`tensor`].
pub unsafe fn tensor_mut(h: TensorHandle, name: &str) -> R<T> {
    // SAFETY: forwarded.
    let mut t = unsafe { tensor(h, name) }?;
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: h is a framework handle; out-pointer is a local.
    let rc = unsafe { diopiGetTensorData(h, &mut p) };
    check(rc, "diopiGetTensorData")?;
    t.ptr = p;
    Ok(t)
}

/// Reads an optional tensor (NULL = None).
///
/// # Safety
/// As [`tensor`].
pub unsafe fn opt_tensor(h: ConstTensorHandle, name: &str) -> R<Option<T>> {
    if h.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded.
        unsafe { tensor(h, name) }.map(Some)
    }
}

/// The context's command queue (`diopiGetStream`: the vendor names the
/// default stream's queue too).
///
/// # Safety
/// `ctx` must be a framework context.
pub unsafe fn queue(ctx: ContextHandle) -> R<*mut c_void> {
    if ctx.is_null() {
        return Err(err("the context is NULL"));
    }
    let mut stream: StreamHandle = std::ptr::null_mut();
    // SAFETY: ctx is a framework context; out-pointer is a local.
    let rc = unsafe { diopiGetStream(ctx, &mut stream) };
    check(rc, "diopiGetStream")?;
    if stream.is_null() {
        return Err(err(
            "diopiGetStream gave NULL: the runtime's vendor is not OpenCL (or too old to name its default queue)",
        ));
    }
    Ok(stream)
}

/// A new contiguous device tensor owned by `ctx` (freed with it, after the
/// work queued on its stream).
///
/// # Safety
/// `ctx` is a framework context.
pub unsafe fn require(ctx: ContextHandle, shape: &[i64], dt: i32) -> R<T> {
    let size = DiopiSize {
        data: shape.as_ptr(),
        len: shape.len() as i64,
    };
    let mut out: TensorHandle = std::ptr::null_mut();
    // SAFETY: the size array lives across the call; NULL stride is contiguous.
    let rc =
        unsafe { diopiRequireTensor(ctx, &mut out, &size, std::ptr::null(), dt, DEVICE_DEVICE) };
    check(rc, "diopiRequireTensor")?;
    // SAFETY: a tensor the framework just made.
    unsafe { tensor_mut(out, "a temporary") }
}
