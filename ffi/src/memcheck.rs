//! The memory checker (`DIPU_MEM_CHECK`): switch it on, write its report.

use crate::status::{dipu_status, ffi_boundary};

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
