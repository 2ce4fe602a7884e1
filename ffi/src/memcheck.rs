//! The memory checker (`DIPU_MEM_CHECK`): switch it on, write its report.

use crate::status::{dipu_status, ffi_boundary, write_out};

/// Switches the memory checker on (as DIPU_MEM_CHECK=1 does when the
/// runtime is created), capturing a backtrace at every allocation and free
/// when `backtraces` is not 0 (as DIPU_MEM_CHECK_ENABLE_BACKTRACE=1).
/// Allocations made before are not known to it. From then on invalid and
/// double frees are reported with backtraces, and a leak report is written
/// at dipu_shutdown and at process exit (exit() or return from main).
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_memcheck_enable(backtraces: i32) -> dipu_status {
    ffi_boundary!("dipu_memcheck_enable", {
        dipu_runtime::memcheck::MemCheck::enable(backtraces != 0);
        Ok(())
    })
}

/// Writes the memory checker's report now: the live allocations grouped by
/// backtrace (largest first) with size, device, stream, age and thread,
/// the invalid frees and accesses seen, and a summary line "N blocks,
/// X MiB leaked". It goes to the file named by DIPU_MEM_CHECK_LOG_FILE
/// (appended), else to stderr. With the checker off it reports nothing
/// live. Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no
/// runtime.
#[no_mangle]
pub extern "C" fn dipu_memcheck_report() -> dipu_status {
    ffi_boundary!("dipu_memcheck_report", {
        dipu_runtime::memcheck::report().write();
        Ok(())
    })
}

/// Checks the memory checker's guard bytes (DIPU_MEM_CHECK_GUARD_BYTES)
/// and poisoned frees (DIPU_MEM_CHECK_POISON) now: synchronizes each
/// device with guarded allocations, then checks the guards of every live
/// allocation and of the frees still waiting for their streams, and the
/// poison of every block in the quarantine (which keeps them). Each
/// overwritten guard and each block written after its free is reported
/// once (logged, and kept for dipu_memcheck_report and the exit report;
/// with DIPU_MEM_CHECK_ABORT=1 the process aborts). Stores in
/// `*violations` (when not NULL) how many this call reported. Without a
/// runtime, or with guards and poison off, nothing is checked and 0 is
/// stored.
/// Errors: a vendor's status from the synchronize or the copies.
/// Thread-safe.
///
/// # Safety
/// `violations` must be NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_memcheck_check_all(violations: *mut usize) -> dipu_status {
    ffi_boundary!("dipu_memcheck_check_all", {
        let found = match dipu_runtime::is_initialized() {
            true => dipu_runtime::get()?.check_guards()?,
            false => 0,
        };
        if !violations.is_null() {
            // SAFETY: not NULL, and valid for writing by the caller's contract.
            unsafe { write_out(violations, "violations", found)? };
        }
        Ok(())
    })
}
