//! The runtime's part of the trace (`DIPU_PROFILE`, see `dipu-profiler`):
//! turning it on from the environment, decorating the vendor, and the
//! allocate and free events of every allocator algorithm. While the trace
//! is off each hook costs one relaxed load.

use std::sync::Arc;

use dipu_allocator::Allocation;
use dipu_deviceapi::{DeviceApi, Result};
use dipu_profiler::{self as prof, Args, Category, Track};

/// Reads `DIPU_PROFILE` and `DIPU_PROFILE_EVENTS`, and returns `api`
/// decorated so that its calls can be recorded.
pub(crate) fn init(api: Arc<dyn DeviceApi>) -> Result<Arc<dyn DeviceApi>> {
    prof::init_from_env()?;
    Ok(prof::wrap(api))
}

/// The start of an allocator call, taken only while the trace records.
#[inline(always)]
pub(crate) fn start() -> Option<u64> {
    if prof::enabled() {
        Some(prof::now_ns())
    } else {
        None
    }
}

/// `a` was allocated by a call that started at `t0`.
#[cold]
pub(crate) fn allocate(t0: u64, a: &Allocation) {
    let args = Args::new()
        .u64("bytes", a.size as u64)
        .hex("ptr", a.ptr as u64)
        .i64("device", a.device.into())
        .hex("stream", a.stream.raw().as_raw());
    let dur = prof::now_ns() - t0;
    prof::complete(
        "allocate",
        Category::Allocator,
        Track::current_thread(),
        t0,
        dur,
        args,
    );
}

/// `ptr` on `device` was freed by a call that started at `t0`.
#[cold]
pub(crate) fn free(t0: u64, device: i32, ptr: *mut std::ffi::c_void) {
    let args = Args::new()
        .hex("ptr", ptr as u64)
        .i64("device", device.into());
    let dur = prof::now_ns() - t0;
    prof::complete(
        "free",
        Category::Allocator,
        Track::current_thread(),
        t0,
        dur,
        args,
    );
}
