//! The lock the caching allocators use: parking_lot's in normal builds,
//! loom's under `--cfg loom`, so the allocate/free paths are model-checked.

/// A mutex whose `lock` cannot fail (no poisoning).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub(crate) fn new(value: T) -> Self {
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
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.inner.lock()
    }

    /// Locks the mutex.
    #[cfg(loom)]
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.inner
            .lock()
            .expect("loom mutexes are never poisoned here")
    }
}
