//! The plain C structs of the ABI (filled by the library, or by the caller
//! for `dipu_options`) and the copy-direction codes.

use std::ffi::c_char;

use dipu_runtime::{CopyKind, DeviceStats, Error, Result, ShutdownReport, Stat};

/// A copy direction: one of the `DIPU_COPY_*` values.
pub type dipu_copy_kind = i32;
/// Host memory to device memory.
pub const DIPU_COPY_HOST_TO_DEVICE: dipu_copy_kind = 0;
/// Device memory to host memory.
pub const DIPU_COPY_DEVICE_TO_HOST: dipu_copy_kind = 1;
/// Device memory to device memory (the same or another device).
pub const DIPU_COPY_DEVICE_TO_DEVICE: dipu_copy_kind = 2;
/// Host memory to host memory.
pub const DIPU_COPY_HOST_TO_HOST: dipu_copy_kind = 3;

/// The direction for a `dipu_copy_kind`, or `InvalidArgument`.
pub(crate) fn copy_kind(kind: dipu_copy_kind) -> Result<CopyKind> {
    u32::try_from(kind)
        .ok()
        .and_then(|k| CopyKind::ALL.get(k as usize).copied())
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{kind} is not a copy kind (DIPU_COPY_HOST_TO_DEVICE..DIPU_COPY_HOST_TO_HOST)"
            ))
        })
}

/// How `dipu_init` builds the runtime. Every NULL field is read from its
/// environment variable (`DIPU_VENDOR`, `DIPU_DEVICE_MEMCACHING_ALGORITHM`,
/// `DIPU_ALLOC_CONF`, `DIPU_HOST_MEMCACHING_ALGORITHM`); zero-initialise the
/// struct (`dipu_options o = {0};`) and set what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dipu_options {
    /// The vendor: a built-in name ("host"), a plugin name or a plugin path.
    pub vendor: *const c_char,
    /// The device allocator algorithm: "TORCH", "BF", "BS" or "RAW".
    pub device_algorithm: *const c_char,
    /// The device allocator options, as in `DIPU_ALLOC_CONF`
    /// (e.g. "max_split_size_mb:64,expandable_segments:True").
    pub alloc_conf: *const c_char,
    /// The pinned-host allocator algorithm (as `DIPU_HOST_MEMCACHING_ALGORITHM`).
    pub host_algorithm: *const c_char,
}

/// What `dipu_shutdown` found still live after synchronizing every device
/// and emptying every cache.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dipu_shutdown_report {
    /// 1 if there was a runtime to shut down, else 0.
    pub was_initialized: i32,
    /// 1 if nothing was live and no step failed, else 0.
    pub clean: i32,
    /// Device bytes still allocated, over all devices.
    pub leaked_device_bytes: u64,
    /// Device allocations (`dipu_malloc`) never freed.
    pub live_allocations: u64,
    /// Pinned host bytes still allocated.
    pub pinned_bytes: u64,
    /// Pinned host blocks (`dipu_host_malloc`) never freed.
    pub pinned_blocks: u64,
    /// Shutdown steps that failed (logged; the shutdown went on).
    pub errors: u64,
}

impl From<&ShutdownReport> for dipu_shutdown_report {
    fn from(r: &ShutdownReport) -> Self {
        dipu_shutdown_report {
            was_initialized: r.was_initialized.into(),
            clean: (r.was_initialized && r.is_clean()).into(),
            leaked_device_bytes: r.leaked_device_bytes(),
            live_allocations: r.live.len() as u64,
            pinned_bytes: r.pinned_bytes,
            pinned_blocks: r.pinned_blocks,
            errors: r.errors.len() as u64,
        }
    }
}

/// What a device is.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dipu_device_properties {
    /// The device's name, NUL-terminated (truncated to 255 bytes).
    pub name: [c_char; 256],
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Compute capability major (or the vendor runtime's major version).
    pub major: i32,
    /// Compute capability minor (or the vendor runtime's minor version).
    pub minor: i32,
    /// Multiprocessors (or clusters, or AI cores).
    pub multiprocessor_count: i32,
}

/// Free and total memory of a device, as the vendor sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dipu_memory_info {
    /// Bytes the vendor can still allocate.
    pub free: u64,
    /// Bytes the device has in all.
    pub total: u64,
}

/// One allocator statistic.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dipu_stat {
    /// The value now.
    pub current: u64,
    /// The highest value since start or `dipu_memory_reset_peak_stats`.
    pub peak: u64,
    /// Everything ever added.
    pub allocated: u64,
    /// Everything ever removed.
    pub freed: u64,
}

impl From<Stat> for dipu_stat {
    fn from(s: Stat) -> Self {
        dipu_stat {
            current: s.current,
            peak: s.peak,
            allocated: s.allocated,
            freed: s.freed,
        }
    }
}

/// A device caching allocator's statistics (PyTorch's `memory_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct dipu_memory_stats {
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
    /// Allocations that succeeded only after freeing cached memory.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out of memory.
    pub num_ooms: u64,
    /// Times every stream was waited for to reclaim memory.
    pub num_sync_all_streams: u64,
    /// Vendor allocations.
    pub num_device_alloc: u64,
    /// Vendor frees.
    pub num_device_free: u64,
}

impl From<DeviceStats> for dipu_memory_stats {
    fn from(s: DeviceStats) -> Self {
        dipu_memory_stats {
            allocation: s.allocation.into(),
            segment: s.segment.into(),
            active: s.active.into(),
            inactive_split: s.inactive_split.into(),
            allocated_bytes: s.allocated_bytes.into(),
            reserved_bytes: s.reserved_bytes.into(),
            active_bytes: s.active_bytes.into(),
            inactive_split_bytes: s.inactive_split_bytes.into(),
            requested_bytes: s.requested_bytes.into(),
            num_alloc_retries: s.num_alloc_retries,
            num_ooms: s.num_ooms,
            num_sync_all_streams: s.num_sync_all_streams,
            num_device_alloc: s.num_device_alloc,
            num_device_free: s.num_device_free,
        }
    }
}
