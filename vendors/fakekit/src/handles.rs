//! Opaque handles: a table from never-null, never-reused integers (what a
//! C API hands out as a pointer) to objects.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// A table of live objects of one kind.
#[derive(Debug)]
pub struct Table<T> {
    inner: Mutex<(usize, BTreeMap<usize, Arc<T>>)>,
    base: usize,
}

impl<T> Table<T> {
    /// An empty table whose handles start at `base` (distinct per kind, so
    /// a handle of one kind is never taken for another's).
    pub const fn new(base: usize) -> Self {
        Table {
            inner: Mutex::new((0, BTreeMap::new())),
            base,
        }
    }

    /// Adds `value`; its handle.
    pub fn insert(&self, value: Arc<T>) -> usize {
        let mut inner = self.inner.lock();
        inner.0 += 1;
        let handle = self.base + inner.0 * 16;
        inner.1.insert(handle, value);
        handle
    }

    /// The object of `handle`, if live.
    pub fn get(&self, handle: usize) -> Option<Arc<T>> {
        self.inner.lock().1.get(&handle).cloned()
    }

    /// Removes `handle`; its object, if it was live.
    pub fn remove(&self, handle: usize) -> Option<Arc<T>> {
        self.inner.lock().1.remove(&handle)
    }

    /// Every live object.
    pub fn all(&self) -> Vec<Arc<T>> {
        self.inner.lock().1.values().cloned().collect()
    }
}
