//! The synchronisation types of the dipu crates: std's (and parking_lot's)
//! in normal builds, loom's under `--cfg loom`, so the same code is
//! model-checked. Internal to dipu-rs (the allocator uses it too); not a
//! public API.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64};

pub use std::sync::atomic::Ordering;

/// A mutex whose `lock` cannot fail (no poisoning).
#[derive(Debug, Default)]
pub struct Mutex<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub fn new(value: T) -> Self {
        Mutex {
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Locks the mutex.
    #[cfg(not(loom))]
    #[inline]
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.inner.lock()
    }

    /// Locks the mutex.
    #[cfg(loom)]
    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.inner
            .lock()
            .expect("loom mutexes are never poisoned here")
    }
}
