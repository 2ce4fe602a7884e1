//! The pinned-host allocator's statistics and cache, and resetting a
//! device allocator's accumulated statistics.

use crate::status::{dipu_status, ffi_boundary, non_null, write_out};
use crate::types::dipu_memory_stats;

/// Stores the pinned-host allocator's statistics in `*out` (with the
/// device statistics' meaning; *segment* and *reserved_bytes* count the
/// vendor's pinned blocks).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_memory_stats.
#[no_mangle]
pub unsafe extern "C" fn dipu_host_memory_get_stats(out: *mut dipu_memory_stats) -> dipu_status {
    ffi_boundary!("dipu_host_memory_get_stats", {
        non_null(out, "out")?;
        let stats = dipu_runtime::get()?.host_stats();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", stats.into()) }
    })
}

/// Gives the pinned-host allocator's cached blocks (and freed blocks whose
/// copies are done) back to the vendor.
/// Errors: the vendor's status. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_host_empty_cache() -> dipu_status {
    ffi_boundary!("dipu_host_empty_cache", {
        dipu_runtime::get()?.empty_host_cache()
    })
}

/// Restarts the pinned-host allocator's peak statistics at their current
/// values. Errors: none besides the runtime's creation. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_host_memory_reset_peak_stats() -> dipu_status {
    ffi_boundary!("dipu_host_memory_reset_peak_stats", {
        dipu_runtime::get()?.host_allocator().reset_peak_stats();
        Ok(())
    })
}

/// Restarts `device`'s accumulated statistics (every `allocated` and
/// `freed` total, and the `num_*` counts) at zero; current values and
/// peaks stay. Errors: DIPU_STATUS_INVALID_DEVICE. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_memory_reset_accumulated_stats(device: i32) -> dipu_status {
    ffi_boundary!("dipu_memory_reset_accumulated_stats", {
        dipu_runtime::get()?.reset_accumulated_stats(device)
    })
}
