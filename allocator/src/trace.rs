//! The allocator's events in the runtime trace (`DIPU_PROFILE`): segments
//! created and returned, granules mapped and unmapped, out-of-memory
//! retries and failures, `empty_cache`. Each hook costs one relaxed load
//! while the trace is off.

use dipu_profiler::{self as prof, Args, Category, Track};

/// A start time, taken only while the trace records.
pub(crate) fn start() -> Option<u64> {
    prof::enabled().then(prof::now_ns)
}

/// Records the slice `name` from `t0` (if it was taken) until now.
#[inline]
fn slice(name: &'static str, t0: Option<u64>, args: Args) {
    if let Some(t0) = t0 {
        let now = prof::now_ns();
        let track = Track::current_thread();
        prof::complete(name, Category::Allocator, track, t0, now - t0, args);
    }
}

/// A segment of `bytes` at `addr` was reserved from the vendor.
#[inline]
pub(crate) fn segment_created(t0: Option<u64>, device: i32, addr: usize, bytes: usize) {
    slice(
        "segment_created",
        t0,
        Args::new()
            .i64("device", device.into())
            .hex("ptr", addr as u64)
            .u64("bytes", bytes as u64),
    );
}

/// The segment at `addr` went back to the vendor.
#[inline]
pub(crate) fn segment_returned(t0: Option<u64>, device: i32, addr: usize) {
    slice(
        "segment_returned",
        t0,
        Args::new()
            .i64("device", device.into())
            .hex("ptr", addr as u64),
    );
}

/// Granules of expandable segments were mapped (`mapped`) or unmapped.
#[inline]
pub(crate) fn granules(t0: Option<u64>, device: i32, mapped: bool, bytes: usize) {
    if bytes > 0 {
        let name = if mapped { "map" } else { "unmap" };
        let args = Args::new()
            .i64("device", device.into())
            .u64("bytes", bytes as u64);
        slice(name, t0, args);
    }
}

/// Out of memory for a `bytes` segment: caches are freed and it is retried.
#[inline]
pub(crate) fn oom_retry(device: i32, bytes: usize) {
    if prof::enabled() {
        let args = Args::new()
            .i64("device", device.into())
            .u64("bytes", bytes as u64);
        prof::instant("oom_retry", Category::Allocator, args);
    }
}

/// A request of `requested` bytes failed out of memory after the retry.
#[inline]
pub(crate) fn oom(device: i32, requested: usize) {
    if prof::enabled() {
        let args = Args::new()
            .i64("device", device.into())
            .u64("requested", requested as u64);
        prof::instant("oom", Category::Allocator, args);
    }
}

/// `empty_cache` ran from `t0`; `reserved` bytes are left.
#[inline]
pub(crate) fn empty_cache(t0: Option<u64>, device: i32, reserved: u64) {
    slice(
        "empty_cache",
        t0,
        Args::new()
            .i64("device", device.into())
            .u64("reserved_after", reserved),
    );
}
