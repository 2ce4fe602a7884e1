//! The framework's side: diopirt functions and `dipu_launch_host_func_raw`,
//! undefined here and resolved when the runtime loads the library, plus the
//! small wrappers every op entry point uses (read a descriptor, queue a
//! kernel). Errors, the last-error message, the op guard and the scalar
//! readers are `dipu-diopi-kernelkit`'s, re-exported.

use crate::types::*;
use crate::view::{TView, MAX_DIMS};
use dipu_diopi_kernelkit::sys::*;
use std::ffi::c_void;

pub use dipu_diopi_kernelkit::rt::{
    check, describe, err, guard, last_error_ptr, opt_scalar, scalar, size, Error, R,
};

#[allow(missing_docs)]
extern "C" {
    fn diopiGetTensorDeviceIndex(th: ConstTensorHandle, idx: *mut i8) -> i32;
    fn diopiGetCurrentDeviceIndex(idx: *mut i8) -> i32;
    fn diopiGeneratorGetSeedAndOffset(g: GeneratorHandle, seed: *mut u64, offset: *mut u64) -> i32;
    fn diopiGeneratorSetSeedAndOffset(g: GeneratorHandle, seed: u64, offset: u64) -> i32;
    fn dipu_launch_host_func_raw(
        device: i32,
        raw_stream: *mut c_void,
        f: unsafe extern "C" fn(*mut c_void),
        user: *mut c_void,
    ) -> i32;
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

/// Reads a (non-NULL) tensor descriptor.
///
/// # Safety
/// `h` must be a tensor handle of the framework (or NULL).
pub unsafe fn tensor(h: ConstTensorHandle, name: &str) -> R<TView> {
    // SAFETY: forwarded from the caller; the descriptor is copied out here.
    let d = unsafe { describe(h, name, MAX_DIMS) }?;
    if dtype::size(d.dtype).is_none() {
        return Err(dtype_err("", name, d.dtype));
    }
    let nd = d.shape.len();
    let mut v = TView {
        ptr: d.data as *mut u8,
        dtype: d.dtype,
        ndim: nd,
        shape: [0; MAX_DIMS],
        strides: [0; MAX_DIMS],
    };
    v.shape[..nd].copy_from_slice(d.shape);
    v.strides[..nd].copy_from_slice(d.strides);
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
