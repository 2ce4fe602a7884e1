//! The allocation path's one thread-local: this thread's caches (one per
//! device allocator it used, `front.rs`) and the view the layer above (the
//! runtime) keeps of what it serves the thread's calls from, so that a C
//! ABI call reads one thread-local, not two.

use std::cell::{Cell, RefCell};

use crate::front::Fronts;

/// The layer above's per-thread view of the object it serves calls from
/// (the runtime's: which runtime the thread last used, of which
/// generation, and how many of the thread's calls use it now). Plain
/// values the allocator never reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadView {
    /// Which generation of the object `ptr` is (`u64::MAX`: none).
    pub generation: u64,
    /// The object (null: none).
    pub ptr: *const (),
    /// The thread's calls using it now.
    pub depth: u32,
}

impl ThreadView {
    /// No view.
    pub const NONE: ThreadView = ThreadView {
        generation: u64::MAX,
        ptr: std::ptr::null(),
        depth: 0,
    };
}

/// This thread's allocation-path state (see the module documentation):
/// what [`crate::DeviceAllocators::allocate_cached_in`] and
/// [`crate::DeviceAllocators::free_cached_in`] take.
pub struct ThreadState {
    pub(crate) fronts: RefCell<Fronts>,
    view: Cell<ThreadView>,
}

impl ThreadState {
    /// Runs `f` on this thread's state; `None` while the thread ends (its
    /// thread-locals are being destroyed).
    #[inline]
    pub fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
        STATE.try_with(f).ok()
    }

    /// The layer above's view (see [`ThreadView`]).
    #[inline]
    pub fn view(&self) -> &Cell<ThreadView> {
        &self.view
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            fronts: RefCell::new(Fronts::new()),
            view: Cell::new(ThreadView::NONE),
        }
    };
}
#[cfg(loom)]
loom::thread_local! {
    static STATE: ThreadState = ThreadState {
        fronts: RefCell::new(Fronts::new()),
        view: Cell::new(ThreadView::NONE),
    };
}
