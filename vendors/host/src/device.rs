//! The current device of each host thread, kept per vendor instance so that
//! several vendors in one process (as in tests) do not disturb each other.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_VENDOR: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (vendor id, device) pairs this thread has set.
    static CURRENT: RefCell<Vec<(u64, i32)>> = const { RefCell::new(Vec::new()) };
}

/// A fresh vendor instance id.
pub(crate) fn new_vendor_id() -> u64 {
    NEXT_VENDOR.fetch_add(1, Ordering::Relaxed)
}

/// The calling thread's current device for `vendor` (0 until set).
pub(crate) fn current(vendor: u64) -> i32 {
    CURRENT.with_borrow(|c| c.iter().find(|(v, _)| *v == vendor).map_or(0, |(_, d)| *d))
}

/// Makes `device` current for `vendor` on the calling thread.
pub(crate) fn set_current(vendor: u64, device: i32) {
    CURRENT.with_borrow_mut(|c| match c.iter_mut().find(|(v, _)| *v == vendor) {
        Some(entry) => entry.1 = device,
        None => c.push((vendor, device)),
    });
}

/// Forgets `vendor` on the calling thread (when it is dropped).
pub(crate) fn forget(vendor: u64) {
    // Ignore a thread-local that is already gone (thread exiting).
    let _ = CURRENT.try_with(|c| c.borrow_mut().retain(|(v, _)| *v != vendor));
}
