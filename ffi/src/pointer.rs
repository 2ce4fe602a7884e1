//! What a pointer is: device memory of `dipu_malloc`, pinned host memory
//! of `dipu_host_malloc`, or neither (PyTorch's `getDeviceFromPtr` and
//! `is_pinned`). A thin query over the runtime's one lookup of the live
//! allocation containing an address.

use std::ffi::c_void;

use crate::status::{dipu_status, ffi_boundary, non_null, write_out};

/// A `dipu_pointer_attributes.memory_type`: one of the `DIPU_MEMORY_*` values.
pub type dipu_memory_type = i32;
/// Memory this library did not hand out (or already freed).
pub const DIPU_MEMORY_UNREGISTERED: dipu_memory_type = 0;
/// Device memory from dipu_malloc.
pub const DIPU_MEMORY_DEVICE: dipu_memory_type = 1;
/// Pinned host memory from dipu_host_malloc.
pub const DIPU_MEMORY_PINNED: dipu_memory_type = 2;

/// What a pointer points into.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dipu_pointer_attributes {
    /// A `DIPU_MEMORY_*` value.
    pub memory_type: dipu_memory_type,
    /// The device of device memory; -1 otherwise.
    pub device: i32,
    /// The start of the live allocation containing the pointer (NULL when
    /// unregistered).
    pub base: *mut c_void,
    /// The bytes requested for that allocation (0 when unregistered).
    pub size: usize,
}

/// Stores what `ptr` points into in `*out`: a live device allocation (its
/// device, start and size), a live pinned host block, or neither
/// (`DIPU_MEMORY_UNREGISTERED`, not an error; NULL is unregistered too).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`; the runtime's
/// status if it cannot be created. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_pointer_attributes.
#[no_mangle]
pub unsafe extern "C" fn dipu_pointer_get_attributes(
    ptr: *const c_void,
    out: *mut dipu_pointer_attributes,
) -> dipu_status {
    ffi_boundary!("dipu_pointer_get_attributes", {
        non_null(out, "out")?;
        let rt = dipu_runtime::get()?;
        let mut attrs = dipu_pointer_attributes {
            memory_type: DIPU_MEMORY_UNREGISTERED,
            device: -1,
            base: std::ptr::null_mut(),
            size: 0,
        };
        if ptr.is_null() {
        } else if let Some(a) = rt.find_allocation(ptr) {
            attrs.memory_type = DIPU_MEMORY_DEVICE;
            attrs.device = a.device;
            attrs.base = a.as_ptr();
            attrs.size = a.len;
        } else if let Some((base, size)) = rt.host_allocator().find(ptr) {
            attrs.memory_type = DIPU_MEMORY_PINNED;
            attrs.base = base as *mut c_void;
            attrs.size = size;
        }
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", attrs) }
    })
}
