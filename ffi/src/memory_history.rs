//! The memory history: recording allocation, free and segment events, and
//! dumping them with the segments as a snapshot PyTorch's memory viewer reads.

use std::ffi::c_char;

use dipu_runtime::Error;

use crate::handles::c_str;
use crate::status::{dipu_status, ffi_boundary};

/// Records the last `max_entries` allocation, free and segment events of
/// each device from now on, with a short stack per event when `stacks` is
/// not 0; `max_entries` 0 stops recording (what was recorded is kept).
/// DIPU_MEM_HISTORY=N and DIPU_MEM_HISTORY_STACKS=1 do the same at start.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a negative `max_entries`.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_memory_record_history(max_entries: i64, stacks: i32) -> dipu_status {
    ffi_boundary!("dipu_memory_record_history", {
        let max = usize::try_from(max_entries).map_err(|_| {
            Error::invalid_argument(format!("max_entries {max_entries} is negative"))
        })?;
        dipu_runtime::get()?.record_memory_history(max, stacks != 0);
        Ok(())
    })
}

/// Writes every device's segments, blocks and recorded events to the file
/// `path` as a pickle in the layout of PyTorch's memory snapshots (open it
/// with `python -m torch.cuda._memory_viz` or `dipu memviz`).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL or non-UTF-8 `path` or a
/// file that cannot be written. Thread-safe.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_memory_dump_snapshot(path: *const c_char) -> dipu_status {
    ffi_boundary!("dipu_memory_dump_snapshot", {
        // SAFETY: forwarded caller's contract.
        let path = unsafe { c_str(path, "path") }?;
        dipu_runtime::get()?.dump_memory_snapshot(std::path::Path::new(path))
    })
}
