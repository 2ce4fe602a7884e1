//! `dipu_work`: the handle of one queued collective (or coalesced batch)
//! of a process group, looked up in a registry of live works on every use.

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

use dipu_comm::Work;
use dipu_runtime::{Error, ErrorKind, Result};

use crate::handles::{duration_ms, Registry};
use crate::status::{dipu_status, ffi_boundary, non_null, write_c_string, write_out};

/// A queued operation of a process group (opaque; returned by the
/// collectives, freed by dipu_work_destroy). Destroying it does not cancel
/// or wait for the operation.
pub struct dipu_work {
    work: Work,
    /// The group's timeout (what dipu_work_wait_host with 0 waits).
    timeout: Duration,
}

/// Live works, by the address handed to C.
static WORKS: Registry<dipu_work> = Registry::new("work");

/// Registers `work` of a group whose timeout is `timeout`; returns its handle.
pub(crate) fn register(work: Work, timeout: Duration) -> *mut dipu_work {
    WORKS.insert(dipu_work { work, timeout })
}

fn lookup(handle: *const dipu_work) -> Result<Arc<dipu_work>> {
    WORKS.get(handle, "work")
}

/// Destroys `work` (NULL is a no-op). The operation goes on; the group
/// still watches it, and memory from dipu_malloc it uses stays protected.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a handle that is not a live
/// work (a second destroy, for one). Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_work_destroy(work: *mut dipu_work) -> dipu_status {
    ffi_boundary!("dipu_work_destroy", { WORKS.remove(work) })
}

/// Stores 1 in `*out` if the operation has finished, successfully or not,
/// else 0; never blocks (dipu_work_wait_host then reports a failure).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown work or a NULL
/// `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_work_is_completed(
    work: *mut dipu_work,
    out: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_work_is_completed", {
        non_null(out, "out")?;
        let done = lookup(work)?.work.is_completed();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", done.into()) }
    })
}

/// Makes the calling thread's current stream of the group's device wait
/// for the operation, without blocking the host (c10d's Work::wait); with
/// the group's blocking_wait, waits on the host instead, up to the
/// group's timeout, as dipu_work_wait_host(work, 0).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown work or a coalesced
/// batch not ended yet; the operation's own error status if it has already
/// failed (message in dipu_last_error_message). Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_work_wait(work: *mut dipu_work) -> dipu_status {
    ffi_boundary!("dipu_work_wait", { lookup(work)?.work.wait() })
}

/// Waits on the host until the operation finishes, up to `timeout_ms`
/// (positive: milliseconds; 0: the group's timeout; negative: no limit).
/// A timeout fails the operation and, as the group's watchdog would, aborts
/// the group: its pending and later operations fail too.
/// Errors: DIPU_STATUS_TIMEOUT when it did not finish in time, the
/// operation's own error status if it failed (e.g. DIPU_STATUS_VENDOR_ERROR
/// or DIPU_STATUS_TIMEOUT from the watchdog; the message names the
/// operation and rank), DIPU_STATUS_INVALID_ARGUMENT for an unknown work.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_work_wait_host(work: *mut dipu_work, timeout_ms: i64) -> dipu_status {
    ffi_boundary!("dipu_work_wait_host", {
        let w = lookup(work)?;
        w.work.wait_host(duration_ms(timeout_ms, w.timeout))
    })
}

/// Stores the device time the operation took, in milliseconds, in `*out`
/// (from timing events around it on the communication stream).
/// Errors: DIPU_STATUS_NOT_READY while it is pending, the operation's own
/// error status if it failed, DIPU_STATUS_INVALID_ARGUMENT for an unknown
/// work or a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a float.
#[no_mangle]
pub unsafe extern "C" fn dipu_work_duration_ms(work: *mut dipu_work, out: *mut f32) -> dipu_status {
    ffi_boundary!("dipu_work_duration_ms", {
        non_null(out, "out")?;
        let w = lookup(work)?;
        if let Some(e) = w.work.error() {
            return Err(e);
        }
        let d = w.work.duration().ok_or_else(|| {
            Error::new(
                ErrorKind::NotReady,
                format!("{} has not completed yet", w.work.describe()),
            )
        })?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", (d.as_secs_f64() * 1e3) as f32) }
    })
}

/// Copies a description of the operation (e.g. "all_reduce #3 (1024 x
/// F32, Sum) on process group rank 0 of 2 (device 0)") and a NUL into
/// `buf` of `len` bytes, and the size needed (NUL included) into `*needed`
/// when `needed` is not NULL. `buf` NULL with `len` 0 only asks for the size.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown work or a too small
/// `buf` (nothing is written to it). Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_work_describe(
    work: *mut dipu_work,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_work_describe", {
        let w = lookup(work)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_c_string(w.work.describe(), buf, len, needed) }
    })
}
