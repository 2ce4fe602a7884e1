//! Copies and memsets, checked against the live device allocations.

use std::ffi::c_void;

use crate::status::{dipu_status, ffi_boundary};
use crate::stream::{self, dipu_stream};
use crate::types::{copy_kind, dipu_copy_kind};

/// Copies `bytes` bytes from `src` to `dst` in direction `kind` (a
/// DIPU_COPY_* value) and returns when done. Device sides must lie inside
/// one live dipu_malloc allocation each; a copy between two devices goes
/// through the vendor's peer copy. 0 bytes is a no-op.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown kind, a device
/// range outside a live allocation, or a NULL host pointer; the vendor's
/// status. Thread-safe.
///
/// # Safety
/// Host sides must be valid for `bytes` bytes (readable `src`, writable
/// `dst`), and the ranges must not overlap.
#[no_mangle]
pub unsafe extern "C" fn dipu_memcpy(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: dipu_copy_kind,
) -> dipu_status {
    ffi_boundary!("dipu_memcpy", {
        let kind = copy_kind(kind)?;
        // SAFETY: device sides are checked by the runtime; host sides are
        // valid by the caller's contract.
        dipu_runtime::with(|rt| unsafe { rt.memcpy(dst, src, bytes, kind) })
    })
}

/// Queues a copy of `bytes` bytes from `src` to `dst` in direction `kind`
/// on `stream` and returns without waiting. Checked like dipu_memcpy.
/// Errors: as dipu_memcpy, plus DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown stream. Thread-safe.
///
/// # Safety
/// As dipu_memcpy; moreover host memory must stay valid and untouched
/// (not written, for `src`; not accessed, for `dst`) until the work queued
/// on `stream` so far is done (dipu_stream_synchronize or an event), and
/// device memory must not be freed before then unless it was allocated on
/// `stream` or recorded on it with dipu_record_stream.
#[no_mangle]
pub unsafe extern "C" fn dipu_memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: dipu_copy_kind,
    stream: dipu_stream,
) -> dipu_status {
    ffi_boundary!("dipu_memcpy_async", {
        let kind = copy_kind(kind)?;
        dipu_runtime::with(|rt| {
            let stream = stream::from_c(rt, stream)?;
            // SAFETY: as in `dipu_memcpy`, and the caller keeps the memory
            // valid until the stream gets there.
            unsafe { rt.memcpy_async(dst, src, bytes, kind, stream) }
        })
    })
}

/// Sets `bytes` bytes of device memory at `dst` to `value` (its low 8
/// bits) and returns when done. The range must lie inside one live
/// dipu_malloc allocation. 0 bytes is a no-op.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a range outside a live
/// allocation; the vendor's status. Thread-safe.
///
/// # Safety
/// No other work may use the range meanwhile.
#[no_mangle]
pub unsafe extern "C" fn dipu_memset(dst: *mut c_void, value: i32, bytes: usize) -> dipu_status {
    ffi_boundary!("dipu_memset", {
        // SAFETY: the range is checked by the runtime; ordering is the
        // caller's contract.
        dipu_runtime::with(|rt| unsafe { rt.memset(dst, value as u8, bytes) })
    })
}

/// Queues setting `bytes` bytes at `dst` to `value` (its low 8 bits) on
/// `stream` and returns without waiting. Checked like dipu_memset.
/// Errors: as dipu_memset, plus DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown stream. Thread-safe.
///
/// # Safety
/// The memory must not be freed before the work queued on `stream` so far
/// is done, unless it was allocated on `stream` or recorded on it.
#[no_mangle]
pub unsafe extern "C" fn dipu_memset_async(
    dst: *mut c_void,
    value: i32,
    bytes: usize,
    stream: dipu_stream,
) -> dipu_status {
    ffi_boundary!("dipu_memset_async", {
        dipu_runtime::with(|rt| {
            let stream = stream::from_c(rt, stream)?;
            // SAFETY: as in `dipu_memset`.
            unsafe { rt.memset_async(dst, value as u8, bytes, stream) }
        })
    })
}
