//! Frames a framework supplies (Python's, for PyTorch): captured as an
//! opaque handle at each recorded event, named only when a snapshot is
//! taken, and released when the event leaves the log.

use std::num::NonZeroUsize;
use std::sync::Arc;

use super::Frame;

/// A framework's stacks: the runtime asks for a handle to the current
/// frames at each recorded event, and for their names at snapshot time.
///
/// The runtime never calls these while it holds a lock of the history's,
/// so an implementation may take its own locks (Python's GIL).
pub trait FrameSource: Send + Sync {
    /// A handle to the calling thread's frames now; `None` when it has none
    /// (a thread without Python frames). Should be cheap: no names yet.
    fn capture(&self) -> Option<NonZeroUsize>;

    /// The frames of a handle from `capture`, innermost first.
    fn symbolize(&self, handle: NonZeroUsize) -> Vec<Frame>;

    /// Frees a handle from `capture` (called once, after its last use).
    fn release(&self, handle: NonZeroUsize);
}

/// Frames captured from a [`FrameSource`]; releases its handle on drop.
pub(crate) struct Captured {
    source: Arc<dyn FrameSource>,
    handle: NonZeroUsize,
}

impl Captured {
    /// The current frames from `source`, if it has any.
    pub(crate) fn capture(source: &Arc<dyn FrameSource>) -> Option<Arc<Captured>> {
        let handle = source.capture()?;
        Some(Arc::new(Captured {
            source: Arc::clone(source),
            handle,
        }))
    }

    /// Their names, innermost first.
    pub(crate) fn resolve(&self) -> Vec<Frame> {
        self.source.symbolize(self.handle)
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        self.source.release(self.handle);
    }
}
