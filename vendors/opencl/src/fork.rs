//! Whether this process may be a child forked after OpenCL was
//! initialised, without a system call on every vendor call: a
//! `pthread_atfork` child handler raises a flag, and only once it is
//! raised are process ids compared. (A `getpid` per call cost more than
//! the runtime's whole path on PoCL's round trip: `docs/benchmarks.md`.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// Raised in every child forked after [`watch`]; also raised when the
/// handler could not be installed, so ids are then always compared.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_fork_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Installs the child handler, once per process. Call it before taking
/// the process id that [`maybe_forked`] guards.
pub(crate) fn watch() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handler only stores to an atomic, which is sound in
        // a forked child of a multithreaded process.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
        if rc != 0 {
            FORKED.store(true, Ordering::Relaxed);
        }
    });
}

/// Whether a fork may have happened since [`watch`]: false means this is
/// still the process that called it.
pub(crate) fn maybe_forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}
