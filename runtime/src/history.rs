//! The runtime's side of the memory history: every device allocator is
//! wrapped (after the memory checker's guards, so the history sees the
//! user's pointers), and the snapshot covers every device.

use std::path::Path;
use std::sync::Arc;

use dipu_allocator::history::{FrameSource, History, MemorySnapshot, Stacks};
use dipu_allocator::{AllocatorWrapper, SegmentMap};
use dipu_deviceapi::{Error, Result};

use crate::Runtime;

/// The wrapper recording into `history`, around `inner` (the guards) when given.
pub(crate) fn wrapper(
    history: Arc<History>,
    segments: Arc<SegmentMap>,
    inner: Option<AllocatorWrapper>,
) -> AllocatorWrapper {
    Arc::new(move |device, alloc| {
        let alloc = match &inner {
            Some(wrap) => wrap(device, alloc),
            None => alloc,
        };
        history.wrap(device, alloc, Arc::clone(&segments))
    })
}

impl Runtime {
    /// Records the last `max_entries` allocation, free and segment events of
    /// each device from now on (0 stops), with short stacks when `stacks`.
    /// `DIPU_MEM_HISTORY` and `DIPU_MEM_HISTORY_STACKS` set it at start.
    pub fn record_memory_history(&self, max_entries: usize, stacks: bool) {
        let before = self.history.record(max_entries, stacks);
        self.observers.switched(before > 0, max_entries > 0);
    }

    /// [`Runtime::record_memory_history`] with the stacks `stacks` says;
    /// framework frames need a frame source
    /// ([`Runtime::set_memory_frame_source`]), else `InvalidArgument`.
    pub fn record_memory_history_stacks(&self, max_entries: usize, stacks: Stacks) -> Result<()> {
        let before = self.history.record_stacks(max_entries, stacks)?;
        self.observers.switched(before > 0, max_entries > 0);
        Ok(())
    }

    /// Sets (or removes, with `None`) where the memory history takes the
    /// framework's frames from (Python's, for PyTorch).
    pub fn set_memory_frame_source(&self, source: Option<Arc<dyn FrameSource>>) {
        self.history.set_frame_source(source);
    }

    /// Every device's segments and blocks now, with the recorded events.
    pub fn memory_snapshot(&self) -> MemorySnapshot {
        self.history.snapshot(self.allocators.created())
    }

    /// Writes [`Runtime::memory_snapshot`] to `path` as a pickle that
    /// PyTorch's `torch.cuda._memory_viz` and `dipu memviz` read.
    pub fn dump_memory_snapshot(&self, path: &Path) -> Result<()> {
        let bytes = self.memory_snapshot().to_pickle()?;
        std::fs::write(path, bytes)
            .map_err(|e| Error::invalid_argument(format!("cannot write {}: {e}", path.display())))
    }
}
