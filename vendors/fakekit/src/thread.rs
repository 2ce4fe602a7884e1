//! Per-thread state (the current device) and the fork detector.

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};

thread_local! {
    static CURRENT: Cell<Option<i32>> = const { Cell::new(None) };
}

/// The calling thread's current device, if one was set.
pub fn current_device() -> Option<i32> {
    CURRENT.with(Cell::get)
}

/// Sets the calling thread's current device.
pub fn set_current_device(device: i32) {
    CURRENT.with(|c| c.set(Some(device)));
}

static INIT_PID: AtomicI32 = AtomicI32::new(0);

/// Records that the library was initialised in this process.
pub fn mark_initialised() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = INIT_PID.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire);
}

/// Whether this process is a child forked after initialisation.
pub fn forked() -> bool {
    let pid = INIT_PID.load(Ordering::Acquire);
    // SAFETY: getpid has no preconditions.
    pid != 0 && pid != unsafe { libc::getpid() }
}
