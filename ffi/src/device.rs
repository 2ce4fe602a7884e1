//! Devices: count, current device, synchronize, properties, memory.

use std::ffi::c_char;

use crate::status::{dipu_status, ffi_boundary, non_null, write_out};
use crate::types::{dipu_device_properties, dipu_memory_info};

/// Stores the number of devices in `*out`.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`; the runtime's
/// status if it cannot be created. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_device_count(out: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_device_count", {
        non_null(out, "out")?;
        let rt = dipu_runtime::get()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", rt.device_count()) }
    })
}

/// Stores the calling thread's current device in `*out` (initially 0).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`. Thread-safe (the
/// current device is per thread).
///
/// # Safety
/// `out` must be NULL or valid for writing an int32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_device_get(out: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_device_get", {
        non_null(out, "out")?;
        let device = dipu_runtime::get()?.current_device()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", device) }
    })
}

/// Makes `device` the calling thread's current device.
/// Errors: DIPU_STATUS_INVALID_DEVICE. Thread-safe (per thread).
#[no_mangle]
pub extern "C" fn dipu_device_set(device: i32) -> dipu_status {
    ffi_boundary!("dipu_device_set", {
        dipu_runtime::get()?.set_device(device)
    })
}

/// Waits until all work on every stream of `device` is done.
/// Errors: DIPU_STATUS_INVALID_DEVICE; the vendor's status. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_device_synchronize(device: i32) -> dipu_status {
    ffi_boundary!("dipu_device_synchronize", {
        dipu_runtime::get()?.synchronize_device(device)
    })
}

/// Stores what `device` is in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_device_properties.
#[no_mangle]
pub unsafe extern "C" fn dipu_device_get_properties(
    device: i32,
    out: *mut dipu_device_properties,
) -> dipu_status {
    ffi_boundary!("dipu_device_get_properties", {
        non_null(out, "out")?;
        let p = dipu_runtime::get()?.device_properties(device)?;
        let mut name = [0 as c_char; 256];
        for (dst, &src) in name.iter_mut().zip(p.name.as_bytes().iter().take(255)) {
            *dst = src as c_char;
        }
        let props = dipu_device_properties {
            name,
            total_memory: p.total_memory,
            major: p.major,
            minor: p.minor,
            multiprocessor_count: p.multiprocessor_count,
        };
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", props) }
    })
}

/// Stores `device`'s free and total memory, as the vendor sees it, in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_memory_info.
#[no_mangle]
pub unsafe extern "C" fn dipu_device_memory_info(
    device: i32,
    out: *mut dipu_memory_info,
) -> dipu_status {
    ffi_boundary!("dipu_device_memory_info", {
        non_null(out, "out")?;
        let m = dipu_runtime::get()?.memory_info(device)?;
        let info = dipu_memory_info {
            free: m.free,
            total: m.total,
        };
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", info) }
    })
}
