//! Fork detection: a child forked after the global runtime was created
//! cannot use it (the vendor's threads and device state stay in the
//! parent), so every call in such a child fails at once with a clear error
//! instead of waiting on a stream worker that does not exist.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Once;

use dipu_deviceapi::{Error, ErrorKind, Result};

/// The process that created the global runtime now alive (0: none).
static CREATED_BY: AtomicU32 = AtomicU32::new(0);

/// Set in a child forked while a global runtime existed.
static BAD_FORK: AtomicBool = AtomicBool::new(false);

/// Registers the fork handler once per process.
static REGISTER: Once = Once::new();

/// Runs in the child right after `fork()`, on the forking thread: only
/// atomics (async-signal-safe), no lock that another parent thread might
/// have held.
extern "C" fn in_child() {
    if CREATED_BY.load(Ordering::Acquire) != 0 {
        BAD_FORK.store(true, Ordering::Release);
        // Every thread view of the runtime is stale now, so the next call
        // takes the slow path, which checks `BAD_FORK`.
        crate::global::invalidate_views();
    }
}

/// Records that this process created the global runtime, and registers
/// the fork handler (first time only).
pub(crate) fn note_created() {
    REGISTER.call_once(|| {
        // SAFETY: `in_child` is a plain `extern "C" fn` that lives as long
        // as the process and only touches atomics; the other handlers are
        // absent.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!(rc, "pthread_atfork failed: a forked child is not detected");
        }
    });
    CREATED_BY.store(std::process::id(), Ordering::Release);
}

/// Records that the global runtime is gone (a fork from now on is fine).
pub(crate) fn note_shutdown() {
    CREATED_BY.store(0, Ordering::Release);
}

/// Whether this process is a child forked after its parent created the
/// global runtime (which it then cannot use).
pub fn is_in_bad_fork() -> bool {
    BAD_FORK.load(Ordering::Acquire)
}

/// An error in a bad fork, else `Ok`.
pub(crate) fn check() -> Result<()> {
    if !is_in_bad_fork() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::VendorInitFailed,
        format!(
            "Cannot re-initialize dipu in forked subprocess: process {} was forked after its \
             parent created the dipu runtime; use the 'spawn' start method, or fork before \
             the parent uses dipu",
            std::process::id()
        ),
    ))
}
