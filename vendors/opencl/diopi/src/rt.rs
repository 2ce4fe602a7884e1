//! The framework's side: the diopirt functions (undefined here, resolved
//! when the runtime loads the library), errors and the last-error
//! message, and tensor descriptors read and checked on the calling thread.

use crate::types::*;
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};

#[allow(missing_docs)]
extern "C" {
    fn diopiGetTensorData(th: TensorHandle, pptr: *mut *mut c_void) -> i32;
    fn diopiGetTensorDataConst(th: ConstTensorHandle, pptr: *mut *const c_void) -> i32;
    fn diopiGetTensorShape(th: ConstTensorHandle, size: *mut DiopiSize) -> i32;
    fn diopiGetTensorStride(th: ConstTensorHandle, stride: *mut DiopiSize) -> i32;
    fn diopiGetTensorDtype(th: ConstTensorHandle, dtype: *mut i32) -> i32;
    fn diopiGetTensorDevice(th: ConstTensorHandle, device: *mut i32) -> i32;
    fn diopiGetStream(ctx: ContextHandle, stream: *mut StreamHandle) -> i32;
}

/// The most dimensions a tensor may have (the kernels' descriptor holds 8).
pub const MAX_DIMS: usize = 8;

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

fn check(code: i32, what: &str) -> R<()> {
    if code == error::SUCCESS {
        Ok(())
    } else {
        Err(err(format!("{what} failed with status {code}")))
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
    if shape.len < 0 || shape.len as usize > MAX_DIMS {
        return Err(err(format!(
            "{name} has {} dimensions; at most {MAX_DIMS} are supported",
            shape.len
        )));
    }
    if stride.len != shape.len {
        return Err(err(format!(
            "{name}: {} strides for {} dimensions",
            stride.len, shape.len
        )));
    }
    if !crate::kernels::dtype_supported(dt) {
        return Err(dtype_err(name, dt));
    }
    // SAFETY: the runtime returned `len` entries for each.
    let (shape, strides) = unsafe { (shape.to_vec(), stride.to_vec()) };
    if shape.iter().any(|&s| s < 0) {
        return Err(err(format!("{name} has a negative size {shape:?}")));
    }
    let t = T {
        ptr: data as *mut c_void,
        dtype: dt,
        shape,
        strides,
    };
    if t.numel() > 0 {
        if t.ptr.is_null() {
            return Err(err(format!("{name} has no data")));
        }
        if dev != DEVICE_DEVICE {
            return Err(err(format!(
                "{name} is in host memory; this library's kernels take device tensors"
            )));
        }
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

extern "C" {
    fn diopiRequireTensor(
        ctx: ContextHandle,
        out: *mut TensorHandle,
        size: *const DiopiSize,
        stride: *const DiopiSize,
        dtype: i32,
        device: i32,
    ) -> i32;
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
