//! The framework's side: diopirt functions and `dipu_launch_host_func_raw`,
//! undefined here and resolved when the runtime loads the library, plus the
//! small wrappers every op entry point uses (read a descriptor, queue a
//! kernel, report an error).

use crate::types::*;
use crate::view::{TView, MAX_DIMS};
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};

#[allow(missing_docs)]
extern "C" {
    fn diopiGetTensorData(th: TensorHandle, pptr: *mut *mut c_void) -> i32;
    fn diopiGetTensorDataConst(th: ConstTensorHandle, pptr: *mut *const c_void) -> i32;
    fn diopiGetTensorShape(th: ConstTensorHandle, size: *mut DiopiSize) -> i32;
    fn diopiGetTensorStride(th: ConstTensorHandle, stride: *mut DiopiSize) -> i32;
    fn diopiGetTensorDtype(th: ConstTensorHandle, dtype: *mut i32) -> i32;
    fn diopiGetTensorDeviceIndex(th: ConstTensorHandle, idx: *mut i8) -> i32;
    fn diopiGetCurrentDeviceIndex(idx: *mut i8) -> i32;
    fn diopiGetStream(ctx: ContextHandle, stream: *mut StreamHandle) -> i32;
    fn diopiGetTensorDevice(th: ConstTensorHandle, device: *mut i32) -> i32;
    fn diopiRequireTensor(
        ctx: ContextHandle,
        out: *mut TensorHandle,
        size: *const DiopiSize,
        stride: *const DiopiSize,
        dtype: i32,
        device: i32,
    ) -> i32;
    fn diopiGeneratorGetSeedAndOffset(g: GeneratorHandle, seed: *mut u64, offset: *mut u64) -> i32;
    fn diopiGeneratorSetSeedAndOffset(g: GeneratorHandle, seed: u64, offset: u64) -> i32;
    fn dipu_launch_host_func_raw(
        device: i32,
        raw_stream: *mut c_void,
        f: unsafe extern "C" fn(*mut c_void),
        user: *mut c_void,
    ) -> i32;
}

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

/// A `diopiDtypeNotSupported` error.
pub fn dtype_err(op: &str, what: &str, d: i32) -> Error {
    Error {
        code: error::DTYPE_NOT_SUPPORTED,
        msg: format!(
            "{op}: {what} has dtype {} which is not supported",
            dtype::name(d)
        ),
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::new("no error").unwrap_or_default());
}

/// Stores the message of the calling thread's last error.
pub fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// The calling thread's last error message (valid until its next error).
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs an op's front half, turning errors and panics into a status.
pub fn guard(op: &str, f: impl FnOnce() -> R<()>) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => error::SUCCESS,
        Ok(Err(e)) => {
            set_last_error(&format!("diopi{op}: {}", e.msg));
            e.code
        }
        Err(_) => {
            set_last_error(&format!("diopi{op}: internal error (panic)"));
            error::ERROR_OCCURRED
        }
    }
}

fn check(code: i32, what: &str) -> R<()> {
    if code == error::SUCCESS {
        Ok(())
    } else {
        Err(err(format!("{what} failed with status {code}")))
    }
}

/// Reads a (non-NULL) tensor descriptor.
///
/// # Safety
/// `h` must be a tensor handle of the framework (or NULL).
pub unsafe fn tensor(h: ConstTensorHandle, name: &str) -> R<TView> {
    if h.is_null() {
        return Err(err(format!("{name} is NULL")));
    }
    let mut data: *const c_void = std::ptr::null();
    let mut shape = DiopiSize {
        data: std::ptr::null(),
        len: 0,
    };
    let mut stride = DiopiSize {
        data: std::ptr::null(),
        len: 0,
    };
    let mut dt = 0i32;
    // SAFETY: h is a framework handle; out-pointers are valid locals.
    unsafe {
        check(
            diopiGetTensorDataConst(h, &mut data),
            "diopiGetTensorDataConst",
        )?;
        check(diopiGetTensorShape(h, &mut shape), "diopiGetTensorShape")?;
        check(diopiGetTensorStride(h, &mut stride), "diopiGetTensorStride")?;
        check(diopiGetTensorDtype(h, &mut dt), "diopiGetTensorDtype")?;
    }
    let nd = shape.len.max(0) as usize;
    if nd > MAX_DIMS {
        return Err(err(format!(
            "{name} has {nd} dimensions; at most {MAX_DIMS} are supported"
        )));
    }
    if stride.len != shape.len {
        return Err(err(format!(
            "{name}: {} strides for {} dimensions",
            stride.len, shape.len
        )));
    }
    if dtype::size(dt).is_none() {
        return Err(dtype_err("", name, dt));
    }
    let mut v = TView {
        ptr: data as *mut u8,
        dtype: dt,
        ndim: nd,
        shape: [0; MAX_DIMS],
        strides: [0; MAX_DIMS],
    };
    if nd > 0 {
        // SAFETY: the runtime returned `nd` entries for each.
        unsafe {
            v.shape[..nd].copy_from_slice(std::slice::from_raw_parts(shape.data, nd));
            v.strides[..nd].copy_from_slice(std::slice::from_raw_parts(stride.data, nd));
        }
    }
    if v.shape().iter().any(|&s| s < 0) {
        return Err(err(format!("{name} has a negative size {:?}", v.shape())));
    }
    if v.numel() > 0 && v.ptr.is_null() {
        return Err(err(format!("{name} has no data")));
    }
    Ok(v)
}

/// Reads an optional tensor (NULL = None).
///
/// # Safety
/// As [`tensor`].
pub unsafe fn opt_tensor(h: ConstTensorHandle, name: &str) -> R<Option<TView>> {
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

/// The stream and device a kernel goes to.
#[derive(Clone, Copy)]
pub struct Target {
    stream: StreamHandle,
    device: i32,
}

/// The context's stream and the device of `t` (the current device for host tensors).
///
/// # Safety
/// `ctx` must be a framework context; `t` was read from a framework tensor.
pub unsafe fn target(ctx: ContextHandle, t: ConstTensorHandle) -> R<Target> {
    if ctx.is_null() {
        return Err(err("the context is NULL"));
    }
    let mut stream: StreamHandle = std::ptr::null_mut();
    // SAFETY: ctx is a framework context; out-pointer is a local.
    let rc = unsafe { diopiGetStream(ctx, &mut stream) };
    check(rc, "diopiGetStream")?;
    let mut dev: i8 = -1;
    if !t.is_null() {
        // SAFETY: t is a framework tensor handle.
        let rc = unsafe { diopiGetTensorDeviceIndex(t, &mut dev) };
        check(rc, "diopiGetTensorDeviceIndex")?;
    }
    if dev < 0 {
        // SAFETY: out-pointer is a local.
        let rc = unsafe { diopiGetCurrentDeviceIndex(&mut dev) };
        check(rc, "diopiGetCurrentDeviceIndex")?;
    }
    Ok(Target {
        stream,
        device: dev as i32,
    })
}

unsafe extern "C" fn run_job<F: FnOnce() + Send + 'static>(user: *mut c_void) {
    // SAFETY: `user` is the Box<F> leaked by `launch`, run exactly once.
    let job: Box<F> = unsafe { Box::from_raw(user as *mut F) };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(*job)).is_err() {
        eprintln!("diopi_impl_host: a kernel panicked; its outputs are undefined");
    }
}

/// Queues `f` on the target's stream, in order; returns at once. One
/// allocation per kernel: the closure itself, run by a trampoline made
/// for its type.
pub fn launch<F: FnOnce() + Send + 'static>(t: Target, f: F) -> R<()> {
    let user = Box::into_raw(Box::new(f)) as *mut c_void;
    // SAFETY: run_job::<F> takes ownership of `user` when the runtime calls it.
    let rc = unsafe { dipu_launch_host_func_raw(t.device, t.stream, run_job::<F>, user) };
    if rc != 0 {
        // SAFETY: the runtime refused the job, so `user` is still ours.
        drop(unsafe { Box::from_raw(user as *mut F) });
        return Err(err(format!(
            "dipu_launch_host_func_raw failed with status {rc}"
        )));
    }
    Ok(())
}

/// Reads the generator's seed and offset and advances the offset by `inc`
/// (on the calling thread, so the next op draws fresh numbers).
///
/// # Safety
/// `g` must be a framework generator handle (or NULL).
pub unsafe fn philox_seed(g: GeneratorHandle, inc: u64) -> R<(u64, u64)> {
    if g.is_null() {
        return Err(err("the generator is NULL"));
    }
    let (mut seed, mut offset) = (0u64, 0u64);
    // SAFETY: g is a framework generator; out-pointers are locals.
    unsafe {
        check(
            diopiGeneratorGetSeedAndOffset(g, &mut seed, &mut offset),
            "diopiGeneratorGetSeedAndOffset",
        )?;
        check(
            diopiGeneratorSetSeedAndOffset(g, seed, offset.wrapping_add(inc)),
            "diopiGeneratorSetSeedAndOffset",
        )?;
    }
    Ok((seed, offset))
}

/// Reads the data pointer of a mutable handle (checks it is writable memory).
///
/// # Safety
/// `h` must be a framework tensor handle.
pub unsafe fn tensor_mut(h: TensorHandle, name: &str) -> R<TView> {
    // SAFETY: forwarded.
    let mut v = unsafe { tensor(h, name) }?;
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: h is a framework handle; out-pointer is a local.
    let rc = unsafe { diopiGetTensorData(h, &mut p) };
    check(rc, "diopiGetTensorData")?;
    v.ptr = p as *mut u8;
    Ok(v)
}

/// A new tensor owned by `ctx` (lives as long as the context) of the given
/// shape, strides, dtype, on the device of `like`.
///
/// # Safety
/// `ctx` and `like` are framework handles.
pub unsafe fn require_tensor(
    ctx: ContextHandle,
    like: ConstTensorHandle,
    shape: &[i64],
    strides: &[i64],
    dt: i32,
) -> R<TensorHandle> {
    let mut dev = DEVICE_DEVICE;
    // SAFETY: framework handle; out-pointer is a local.
    let rc = unsafe { diopiGetTensorDevice(like, &mut dev) };
    check(rc, "diopiGetTensorDevice")?;
    let size = DiopiSize {
        data: shape.as_ptr(),
        len: shape.len() as i64,
    };
    let stride = DiopiSize {
        data: strides.as_ptr(),
        len: strides.len() as i64,
    };
    let mut out: TensorHandle = std::ptr::null_mut();
    // SAFETY: the size/stride arrays live across the call.
    let rc = unsafe { diopiRequireTensor(ctx, &mut out, &size, &stride, dt, dev) };
    check(rc, "diopiRequireTensor")?;
    Ok(out)
}
