//! The runtime trace (`DIPU_PROFILE`): start, stop, clear and dump it.

use std::ffi::c_char;

use dipu_runtime::profiler as prof;
use dipu_runtime::Error;

use crate::handles::c_str;
use crate::status::{dipu_status, ffi_boundary, write_out};

/// Starts recording the runtime trace (as DIPU_PROFILE=path does when the
/// runtime is created): vendor calls with host and device times,
/// allocator events, stream and event operations, collectives and host
/// callbacks, kept in a ring of the last DIPU_PROFILE_EVENTS events
/// (default 100000). Events already in the ring are kept.
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_start() -> dipu_status {
    ffi_boundary!("dipu_profiler_start", {
        prof::start();
        Ok(())
    })
}

/// Stops recording; the ring keeps its events for dipu_profiler_dump.
/// Device times of work queued while recording are still collected.
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_stop() -> dipu_status {
    ffi_boundary!("dipu_profiler_stop", {
        prof::stop();
        Ok(())
    })
}

/// Forgets every recorded event (recording goes on if it was on).
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_clear() -> dipu_status {
    ffi_boundary!("dipu_profiler_clear", {
        prof::clear();
        Ok(())
    })
}

/// Keeps at most the last `events` events (the oldest are dropped now if
/// more are held), as DIPU_PROFILE_EVENTS does.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for 0. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_set_capacity(events: usize) -> dipu_status {
    ffi_boundary!("dipu_profiler_set_capacity", { prof::set_capacity(events) })
}

/// Writes the recorded events to the file `path` (created or replaced) in
/// Chrome's trace event format, which chrome://tracing and Perfetto open,
/// after waiting for the device times still pending. The ring keeps them.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL or non-UTF-8 path or a
/// file that cannot be written (the message says why). Thread-safe; needs
/// no runtime.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_profiler_dump(path: *const c_char) -> dipu_status {
    ffi_boundary!("dipu_profiler_dump", {
        // SAFETY: NULL or NUL-terminated by the caller's contract.
        let path = unsafe { c_str(path, "path")? };
        prof::dump(path)
            .map(drop)
            .map_err(|e| Error::invalid_argument(format!("cannot write the trace: {e}")))
    })
}

/// Stores in `*count` how many events the ring holds now.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `count`. Thread-safe;
/// needs no runtime.
///
/// # Safety
/// `count` must be NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_profiler_events(count: *mut usize) -> dipu_status {
    ffi_boundary!("dipu_profiler_events", {
        // SAFETY: NULL or valid for writing by the caller's contract.
        unsafe { write_out(count, "count", prof::events()) }
    })
}
