//! `Traced`: a device allocator whose allocations, frees and segment
//! changes go into a [`History`] log. While history is off each call costs
//! one atomic load more than the allocator it wraps.

use std::ffi::c_void;
use std::sync::Arc;

use dipu_deviceapi::{ErrorKind, Result};
use dipu_stream::Stream;

use super::{Action, DeviceLog, History};
use crate::{Algorithm, Allocation, DeviceAllocator, DeviceStats, LiveBlock, Snapshot};

pub(crate) struct Traced {
    history: Arc<History>,
    log: Arc<DeviceLog>,
    inner: Box<dyn DeviceAllocator>,
}

impl Traced {
    pub(crate) fn new(
        history: Arc<History>,
        log: Arc<DeviceLog>,
        inner: Box<dyn DeviceAllocator>,
    ) -> Self {
        Traced {
            history,
            log,
            inner,
        }
    }

    #[inline(always)]
    fn on(&self) -> bool {
        self.history.max_entries() > 0
    }
}

impl DeviceAllocator for Traced {
    fn device(&self) -> i32 {
        self.inner.device()
    }

    fn algorithm(&self) -> Algorithm {
        self.inner.algorithm()
    }

    /// The wrapped allocator's: its hit paths bypass this wrapper, so the
    /// runtime takes them only while the history is off
    /// (`History::max_entries` is 0).
    fn thread_cache_key(&self) -> Option<u64> {
        self.inner.thread_cache_key()
    }

    #[inline]
    fn allocate(&self, bytes: usize, stream: Stream) -> Result<Allocation> {
        let result = self.inner.allocate(bytes, stream);
        if self.on() {
            match &result {
                Ok(a) if !a.ptr.is_null() => {
                    let addr = a.ptr as usize;
                    if !self.log.knows_segment_of(addr) {
                        self.history.reconcile(&self.log);
                    }
                    let id = stream.id().as_u32();
                    self.history.push(&self.log, Action::Alloc, addr, bytes, id);
                }
                Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                    let id = stream.id().as_u32();
                    self.history.push(&self.log, Action::Oom, 0, bytes, id);
                }
                _ => {}
            }
        }
        result
    }

    #[inline]
    fn free(&self, ptr: *mut c_void) -> Result<()> {
        if !self.on() || ptr.is_null() {
            return self.inner.free(ptr);
        }
        let addr = ptr as usize;
        let size = self.inner.find(addr).map_or(0, |b| b.requested);
        self.inner.free(ptr)?;
        // The stream is the allocation's; the log has it, the free does not.
        // One capture serves both events.
        let context = self.history.capture();
        let log = &self.log;
        let h = &self.history;
        h.push_with(log, Action::FreeRequested, addr, size, 0, context.clone());
        h.push_with(log, Action::FreeCompleted, addr, size, 0, context);
        Ok(())
    }

    fn record_stream(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        self.inner.record_stream(ptr, stream)
    }

    fn find(&self, addr: usize) -> Option<LiveBlock> {
        self.inner.find(addr)
    }

    fn empty_cache(&self) -> Result<()> {
        let result = self.inner.empty_cache();
        self.history.reconcile(&self.log);
        result
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }

    fn reset_peak_stats(&self) {
        self.inner.reset_peak_stats()
    }

    fn snapshot(&self) -> Snapshot {
        self.inner.snapshot()
    }

    fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.inner.set_memory_fraction(fraction)
    }
}
