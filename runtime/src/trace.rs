//! The runtime's part of the trace (`DIPU_PROFILE`, see `dipu-profiler`):
//! turning it on from the environment, decorating the vendor, and the
//! allocate and free events of every allocator algorithm. While the trace
//! is off each hook costs one relaxed load.

use std::sync::Arc;

use dipu_allocator::Allocation;
use dipu_deviceapi::{DeviceApi, Result};
use dipu_profiler::{self as prof, Args, Category};

/// Reads `DIPU_PROFILE` and `DIPU_PROFILE_EVENTS`, and returns `api`
/// decorated so that its calls can be recorded.
pub(crate) fn init(api: Arc<dyn DeviceApi>) -> Result<Arc<dyn DeviceApi>> {
    prof::init_from_env()?;
    Ok(prof::wrap(api))
}

/// `a` was just allocated: an instant event.
#[cold]
pub(crate) fn allocate(a: &Allocation) {
    let args = Args::new()
        .u64("bytes", a.size as u64)
        .hex("ptr", a.ptr as u64)
        .i64("device", a.device.into())
        .hex("stream", a.stream.raw().as_raw());
    prof::instant("allocate", Category::Allocator, args);
}

/// `ptr` on `device` is about to be freed: an instant event (a bad
/// pointer's free is recorded too, and then fails).
#[cold]
pub(crate) fn free(device: i32, ptr: *mut std::ffi::c_void) {
    let args = Args::new()
        .hex("ptr", ptr as u64)
        .i64("device", device.into());
    prof::instant("free", Category::Allocator, args);
}
