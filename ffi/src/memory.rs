//! Device memory through the caching allocator, and pinned host memory.

use std::ffi::{c_char, c_void};

use dipu_runtime::{Error, ErrorKind, Result};

use crate::status::{dipu_status, fast_path, ffi_boundary, non_null, write_c_string, write_out};
use crate::stream::{self, dipu_stream};
use crate::types::{dipu_memory_stats, dipu_stat};
use dipu_runtime::{Pool, PoolStats};

/// Allocates at least `bytes` of device memory for use on `stream` (on
/// the stream's device) from the caching allocator and stores the pointer
/// in `*out` (NULL for 0 bytes). Free it with dipu_free; using it on other
/// streams needs dipu_record_stream.
/// Errors: DIPU_STATUS_OUT_OF_MEMORY (also for sizes no device can hold,
/// such as SIZE_MAX), DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT
/// for a NULL `out` or an unknown stream. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_malloc(
    bytes: usize,
    stream: dipu_stream,
    out: *mut *mut c_void,
) -> dipu_status {
    // A block this thread's allocator cache holds: no more to check.
    let hit = fast_path("dipu_malloc", || {
        !out.is_null()
            && matches!(
                dipu_runtime::with_current(|rt, ts| {
                    let Some(stream) =
                        rt.context()
                            .pooled_stream_from_parts(stream.device, stream.id, stream.raw)
                    else {
                        return Ok(false);
                    };
                    let Some(ptr) = rt.allocate_cached_in(ts, bytes, stream) else {
                        return Ok(false);
                    };
                    // SAFETY: `out` is not NULL (checked) and valid for
                    // writing by the caller's contract.
                    unsafe { out.write(ptr) };
                    Ok(true)
                }),
                Some(Ok(true))
            )
    });
    if let Some(status) = hit {
        return status;
    }
    ffi_boundary!("dipu_malloc", {
        non_null(out, "out")?;
        // No allocation can exceed PTRDIFF_MAX; refusing here also keeps
        // the allocators' size rounding away from overflow.
        if bytes > isize::MAX as usize {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!("{bytes} bytes is more than any allocation can hold (PTRDIFF_MAX)"),
            ));
        }
        let ptr = dipu_runtime::with(|rt| -> Result<_> {
            let stream = stream::from_c(rt, stream)?;
            rt.allocate_raw(bytes, stream)
        })?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", ptr) }
    })
}

/// Frees device memory from dipu_malloc (NULL is a no-op). The memory is
/// reused once the work queued so far on its stream (and on streams given
/// to dipu_record_stream) is done; the host does not wait.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a pointer that is not the
/// start of a live allocation (unknown, already freed, inside an
/// allocation, or from before dipu_shutdown); nothing changes then.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_free(ptr: *mut c_void) -> dipu_status {
    // A block this thread's allocator cache lent: it takes it back.
    let hit = fast_path("dipu_free", || {
        matches!(
            dipu_runtime::with_current(|rt, ts| Ok(rt.free_cached_in(ts, ptr))),
            Some(Ok(true))
        )
    });
    if let Some(status) = hit {
        return status;
    }
    ffi_boundary!("dipu_free", {
        if ptr.is_null() {
            return Ok(());
        }
        dipu_runtime::with(|rt| {
            // The segment map names the device; its allocator checks the
            // pointer (a double, interior or unknown free changes nothing).
            let Some(device) = rt.device_of(ptr) else {
                let e = Error::invalid_argument(format!(
                    "{ptr:p} is not a live allocation of dipu_malloc (never allocated, or \
                     already freed)"
                ));
                return Err(match dipu_runtime::memcheck::enabled() {
                    true => dipu_runtime::memcheck::on_bad_free(ptr as usize, e),
                    false => e,
                });
            };
            rt.free_raw(device, ptr)
        })
    })
}

/// Declares that work on `stream` (other than the allocation stream) uses
/// the allocation starting at `ptr`: after dipu_free the memory is reused
/// only once that work is done. NULL is a no-op.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown pointer or stream.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_record_stream(ptr: *mut c_void, stream: dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_record_stream", {
        dipu_runtime::with(|rt| {
            let stream = stream::from_c(rt, stream)?;
            rt.record_stream_raw(ptr, stream)
        })
    })
}

/// Gives `device`'s cached, unused memory back to the vendor.
/// Errors: DIPU_STATUS_INVALID_DEVICE, the vendor's status. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_empty_cache(device: i32) -> dipu_status {
    ffi_boundary!("dipu_empty_cache", {
        dipu_runtime::get()?.empty_cache(device)
    })
}

/// Stores `device`'s allocator statistics in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_memory_stats.
#[no_mangle]
pub unsafe extern "C" fn dipu_memory_get_stats(
    device: i32,
    out: *mut dipu_memory_stats,
) -> dipu_status {
    ffi_boundary!("dipu_memory_get_stats", {
        non_null(out, "out")?;
        let stats = dipu_runtime::get()?.stats(device)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", stats.into()) }
    })
}

/// A pool of the allocator statistics: `DIPU_MEMORY_POOL_SMALL` or
/// `DIPU_MEMORY_POOL_LARGE` (PyTorch's `small_pool` and `large_pool`; which
/// blocks each holds is docs/allocator.md's "Pools in the statistics").
pub type dipu_memory_pool = i32;
/// Segments made for requests of at most 1 MiB, and their blocks.
pub const DIPU_MEMORY_POOL_SMALL: dipu_memory_pool = 0;
/// Every other segment, and its blocks.
pub const DIPU_MEMORY_POOL_LARGE: dipu_memory_pool = 1;

/// One pool's part of a device allocator's statistics (the quantities of
/// dipu_memory_stats; the two pools add up to dipu_memory_stats', peaks
/// aside).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dipu_memory_pool_stats {
    /// Blocks handed out.
    pub allocation: dipu_stat,
    /// Segments obtained from the vendor.
    pub segment: dipu_stat,
    /// Blocks not reusable yet (allocated, or waiting for streams).
    pub active: dipu_stat,
    /// Free blocks inside partly used segments.
    pub inactive_split: dipu_stat,
    /// Bytes of blocks handed out.
    pub allocated_bytes: dipu_stat,
    /// Bytes obtained from the vendor.
    pub reserved_bytes: dipu_stat,
    /// Bytes of active blocks.
    pub active_bytes: dipu_stat,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: dipu_stat,
    /// Bytes callers asked for.
    pub requested_bytes: dipu_stat,
}

impl From<PoolStats> for dipu_memory_pool_stats {
    fn from(s: PoolStats) -> Self {
        dipu_memory_pool_stats {
            allocation: s.allocation.into(),
            segment: s.segment.into(),
            active: s.active.into(),
            inactive_split: s.inactive_split.into(),
            allocated_bytes: s.allocated_bytes.into(),
            reserved_bytes: s.reserved_bytes.into(),
            active_bytes: s.active_bytes.into(),
            inactive_split_bytes: s.inactive_split_bytes.into(),
            requested_bytes: s.requested_bytes.into(),
        }
    }
}

/// Stores the part of `device`'s allocator statistics that `pool` (a
/// `DIPU_MEMORY_POOL_*` value) holds in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown `pool` or a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_memory_pool_stats.
#[no_mangle]
pub unsafe extern "C" fn dipu_memory_get_pool_stats(
    device: i32,
    pool: dipu_memory_pool,
    out: *mut dipu_memory_pool_stats,
) -> dipu_status {
    ffi_boundary!("dipu_memory_get_pool_stats", {
        non_null(out, "out")?;
        let pool = match pool {
            DIPU_MEMORY_POOL_SMALL => Pool::Small,
            DIPU_MEMORY_POOL_LARGE => Pool::Large,
            other => {
                return Err(Error::invalid_argument(format!(
                    "unknown memory pool {other}: expected DIPU_MEMORY_POOL_SMALL (0) or DIPU_MEMORY_POOL_LARGE (1)"
                )))
            }
        };
        let stats = dipu_runtime::get()?.stats(device)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", (*stats.pool(pool)).into()) }
    })
}

/// Restarts `device`'s peak statistics at their current values.
/// Errors: DIPU_STATUS_INVALID_DEVICE. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_memory_reset_peak_stats(device: i32) -> dipu_status {
    ffi_boundary!("dipu_memory_reset_peak_stats", {
        dipu_runtime::get()?.reset_peak_stats(device)
    })
}

/// Limits `device`'s allocator to `fraction` (in (0, 1]) of its memory.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// fraction outside (0, 1]. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_memory_set_fraction(device: i32, fraction: f64) -> dipu_status {
    ffi_boundary!("dipu_memory_set_fraction", {
        dipu_runtime::get()?.set_memory_fraction(device, fraction)
    })
}

/// Copies `device`'s segments and blocks as JSON (PyTorch's snapshot
/// shape) and a NUL into `buf` of `len` bytes, and the size needed (NUL
/// included) into `*needed` when `needed` is not NULL. `buf` NULL with
/// `len` 0 only asks for the size (which may grow before the next call).
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT when
/// `buf` is too small (nothing is written to it). Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_memory_snapshot_json(
    device: i32,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_memory_snapshot_json", {
        let json = dipu_runtime::get()?.snapshot_json(device)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_c_string(&json, buf, len, needed) }
    })
}

/// Allocates at least `bytes` of pinned (page-locked) host memory,
/// zero-filled, and stores the pointer in `*out` (NULL for 0 bytes). Free
/// it with dipu_host_free.
/// Errors: DIPU_STATUS_OUT_OF_MEMORY, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_host_malloc(bytes: usize, out: *mut *mut c_void) -> dipu_status {
    ffi_boundary!("dipu_host_malloc", {
        non_null(out, "out")?;
        let ptr = dipu_runtime::get()?.allocate_host(bytes)?.into_raw();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", ptr) }
    })
}

/// Gives pinned memory from dipu_host_malloc back (NULL is a no-op); it is
/// reused once the copies recorded with dipu_host_record_stream are done.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown pointer or a second
/// free. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_host_free(ptr: *mut c_void) -> dipu_status {
    ffi_boundary!("dipu_host_free", {
        dipu_runtime::get()?.free_host_raw(ptr)
    })
}

/// Declares that a copy using the pinned block at `ptr` was queued on
/// `stream`: after dipu_host_free the block is reused only once it is done.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown pointer or stream.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_host_record_stream(ptr: *mut c_void, stream: dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_host_record_stream", {
        let rt = dipu_runtime::get()?;
        let stream = stream::from_c(&rt, stream)?;
        rt.record_host_event_raw(ptr, stream)
    })
}
