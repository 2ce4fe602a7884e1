//! Host functions queued on a stream (the way the host vendor's kernel
//! library launches its kernels): [`launch_host_func`] for a [`Stream`],
//! [`launch_host_func_raw`] for the raw stream `diopiGetStream` returned,
//! and its C form `dipu_launch_host_func_raw`.

use std::ffi::c_void;

use dipu_deviceapi::{HostCallback, StreamHandle};
use dipu_runtime::{DeviceGuard, Error, Result, Stream};

use crate::error::status_of;

/// Queues `f` on `stream`: it runs on a host thread after all earlier work
/// on the stream, and later work waits for it (as `cudaLaunchHostFunc`).
/// `f` must not call the runtime. `Unsupported` when the vendor has no
/// host functions.
pub fn launch_host_func(stream: Stream, f: HostCallback) -> Result<()> {
    let ctx = stream.context();
    // The default stream's handle means "the current device's".
    let _guard = DeviceGuard::new(ctx, stream.device())?;
    // SAFETY: the handle came from this context's vendor and streams are
    // never destroyed; the default handle is used on its own device.
    unsafe { ctx.api().launch_host_func(stream.raw(), f) }
}

/// [`launch_host_func`] on the vendor stream `raw` of `device` (what
/// `diopiGetStream` returned; NULL is `device`'s default stream). The
/// vendor checks the handle; it must be a stream of `device`.
pub fn launch_host_func_raw(device: i32, raw: *mut c_void, f: HostCallback) -> Result<()> {
    dipu_runtime::with(|rt| {
        rt.check_device(device)?;
        let _guard = DeviceGuard::new(rt.context(), device)?;
        // SAFETY: a NULL handle is the current (just set) device's default
        // stream; any other value is checked by the vendor, which rejects
        // handles it never made (documented precondition for vendors that
        // cannot: a stream from diopiGetStream).
        unsafe {
            rt.api()
                .launch_host_func(StreamHandle::from_raw(raw as u64), f)
        }
    })
}

/// The C callback and its argument, moved to the thread that runs it.
struct RawCallback(unsafe extern "C" fn(*mut c_void), *mut c_void);

// SAFETY: the caller of dipu_launch_host_func_raw promises that `fn(user)`
// may run on another thread (documented, as for cudaLaunchHostFunc).
unsafe impl Send for RawCallback {}

/// Queues `func(user)` on the raw stream `raw_stream` of `device` (NULL:
/// the device's default stream): it runs on a host thread after the work
/// queued earlier on that stream, and later work waits for it, like
/// cudaLaunchHostFunc. `func` must not call the runtime. A DIOPI kernel
/// library passes the stream diopiGetStream returned.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `func` or a stream the
/// vendor does not know, DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_UNSUPPORTED
/// when the vendor has no host functions. Thread-safe.
///
/// # Safety
/// `func(user)` must be safe to call once, on any thread.
#[no_mangle]
pub unsafe extern "C" fn dipu_launch_host_func_raw(
    device: i32,
    raw_stream: *mut c_void,
    func: Option<unsafe extern "C" fn(*mut c_void)>,
    user: *mut c_void,
) -> i32 {
    status_of("dipu_launch_host_func_raw", || {
        let func = func.ok_or_else(|| Error::invalid_argument("func is NULL"))?;
        let cb = RawCallback(func, user);
        launch_host_func_raw(
            device,
            raw_stream,
            Box::new(move || {
                let cb = cb;
                // SAFETY: the caller's contract.
                unsafe { (cb.0)(cb.1) }
            }),
        )
    })
}
