//! The memory history: recording allocation, free and segment events, and
//! dumping them with the segments as a snapshot PyTorch's memory viewer reads.

use std::ffi::{c_char, c_void, CStr};
use std::num::NonZeroUsize;
use std::sync::Arc;

use dipu_runtime::{Error, Frame, FrameSource, Stacks};

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

/// `dipu_memory_record_history_stacks` flag: each event keeps a short
/// native stack (the runtime's frames and its caller's).
pub const DIPU_MEMORY_HISTORY_NATIVE: u32 = 1;
/// `dipu_memory_record_history_stacks` flag: each event keeps the frames
/// of the hook set by dipu_memory_history_set_frames_hook (Python's, for
/// PyTorch), after the native ones.
pub const DIPU_MEMORY_HISTORY_FRAMEWORK: u32 = 2;

/// Receives one frame while a hook names a capture: `filename` and `name`
/// are NUL-terminated (NULL reads as ""), valid during the call only.
pub type dipu_memory_frame_sink = Option<
    unsafe extern "C" fn(
        sink_ctx: *mut c_void,
        filename: *const c_char,
        line: u32,
        name: *const c_char,
    ),
>;

/// Where the memory history takes a framework's frames from. The runtime
/// calls `capture` (on the allocating thread) for each recorded event while
/// framework frames are on, `symbolize` for each capture when a snapshot is
/// taken, and `release` once per capture when its last event leaves the
/// history. It holds none of its own locks during these calls, so they may
/// take the framework's (Python's GIL). They must be thread-safe and must
/// not unwind (C++ exceptions included).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct dipu_memory_frames_hook {
    /// Passed to every callback.
    pub user: *mut c_void,
    /// A handle to the calling thread's frames now (cheap: no names yet),
    /// or 0 when it has none.
    pub capture: Option<unsafe extern "C" fn(user: *mut c_void) -> usize>,
    /// Gives the frames of `handle`, innermost first, one `sink` call each.
    pub symbolize: Option<
        unsafe extern "C" fn(
            user: *mut c_void,
            handle: usize,
            sink: dipu_memory_frame_sink,
            sink_ctx: *mut c_void,
        ),
    >,
    /// Frees `handle`.
    pub release: Option<unsafe extern "C" fn(user: *mut c_void, handle: usize)>,
}

/// A hook's callbacks as the history's frame source.
struct HookSource {
    user: *mut c_void,
    capture: unsafe extern "C" fn(*mut c_void) -> usize,
    symbolize: unsafe extern "C" fn(*mut c_void, usize, dipu_memory_frame_sink, *mut c_void),
    release: unsafe extern "C" fn(*mut c_void, usize),
}

// SAFETY: the hook's contract: its callbacks (and `user`) are thread-safe.
unsafe impl Send for HookSource {}
// SAFETY: as above.
unsafe impl Sync for HookSource {}

/// The text at `p` (NULL: empty), lossily as UTF-8.
///
/// # Safety
/// `p` must be NULL or NUL-terminated.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The sink the runtime gives `symbolize`: appends a frame to the
/// `Vec<Frame>` at `sink_ctx`.
unsafe extern "C" fn collect_frame(
    sink_ctx: *mut c_void,
    filename: *const c_char,
    line: u32,
    name: *const c_char,
) {
    if sink_ctx.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `sink_ctx` is the `Vec<Frame>` `symbolize` below passed,
        // alive for the call; the strings are as the sink's contract says.
        let frames = unsafe { &mut *(sink_ctx as *mut Vec<Frame>) };
        frames.push(Frame {
            // SAFETY: as above.
            filename: unsafe { text(filename) },
            line,
            // SAFETY: as above.
            name: unsafe { text(name) },
        });
    }));
}

impl FrameSource for HookSource {
    fn capture(&self) -> Option<NonZeroUsize> {
        // SAFETY: the hook's contract (a thread-safe C function).
        NonZeroUsize::new(unsafe { (self.capture)(self.user) })
    }

    fn symbolize(&self, handle: NonZeroUsize) -> Vec<Frame> {
        let mut frames: Vec<Frame> = Vec::new();
        let ctx = &mut frames as *mut Vec<Frame> as *mut c_void;
        // SAFETY: the hook's contract; `ctx` outlives the call and is only
        // used by `collect_frame` during it.
        unsafe { (self.symbolize)(self.user, handle.get(), Some(collect_frame), ctx) };
        frames
    }

    fn release(&self, handle: NonZeroUsize) {
        // SAFETY: the hook's contract; each handle is released once.
        unsafe { (self.release)(self.user, handle.get()) }
    }
}

/// Sets where the memory history takes a framework's frames from (a copy
/// of `*hook` is kept), or removes it with NULL (framework frames stop;
/// events already recorded keep theirs and still release them through the
/// old hook, so its code must stay loaded).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a hook with a NULL callback.
/// Thread-safe.
///
/// # Safety
/// `hook` must be NULL or point to a dipu_memory_frames_hook whose
/// callbacks keep its contract.
#[no_mangle]
pub unsafe extern "C" fn dipu_memory_history_set_frames_hook(
    hook: *const dipu_memory_frames_hook,
) -> dipu_status {
    ffi_boundary!("dipu_memory_history_set_frames_hook", {
        // SAFETY: the caller's contract.
        let source: Option<Arc<dyn FrameSource>> = match unsafe { hook.as_ref() } {
            None => None,
            Some(h) => match (h.capture, h.symbolize, h.release) {
                (Some(capture), Some(symbolize), Some(release)) => Some(Arc::new(HookSource {
                    user: h.user,
                    capture,
                    symbolize,
                    release,
                })),
                _ => {
                    return Err(Error::invalid_argument(
                        "a frames hook needs capture, symbolize and release",
                    ))
                }
            },
        };
        dipu_runtime::get()?.set_memory_frame_source(source);
        Ok(())
    })
}

/// dipu_memory_record_history with the stacks `stacks` says: a set of
/// `DIPU_MEMORY_HISTORY_NATIVE` and `DIPU_MEMORY_HISTORY_FRAMEWORK` (0: none).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a negative `max_entries`, an
/// unknown flag, or `DIPU_MEMORY_HISTORY_FRAMEWORK` without a frames hook
/// (nothing changes then). Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_memory_record_history_stacks(max_entries: i64, stacks: u32) -> dipu_status {
    ffi_boundary!("dipu_memory_record_history_stacks", {
        let max = usize::try_from(max_entries).map_err(|_| {
            Error::invalid_argument(format!("max_entries {max_entries} is negative"))
        })?;
        let known = DIPU_MEMORY_HISTORY_NATIVE | DIPU_MEMORY_HISTORY_FRAMEWORK;
        if stacks & !known != 0 {
            return Err(Error::invalid_argument(format!(
                "unknown stack flags {stacks:#x}: expected DIPU_MEMORY_HISTORY_NATIVE (1) and/or \
                 DIPU_MEMORY_HISTORY_FRAMEWORK (2)"
            )));
        }
        let stacks = Stacks {
            native: stacks & DIPU_MEMORY_HISTORY_NATIVE != 0,
            framework: stacks & DIPU_MEMORY_HISTORY_FRAMEWORK != 0,
        };
        dipu_runtime::get()?.record_memory_history_stacks(max, stacks)
    })
}
