//! How a device allocator gets memory and gives it back: new segments with
//! the out-of-memory recovery ladder, mapping for expandable segments,
//! deferred frees that have completed, and releasing cached segments.

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::Stream;

use super::State;
use crate::arena::{BlockId, Use};
use crate::policy::Policy;
use crate::Pool;

impl<P: Policy> State<P> {
    /// Unmaps free granules of the expandable segments until `want` bytes
    /// are unmapped (all of them with `usize::MAX`).
    pub(super) fn unmap_free_granules_for(&mut self, want: usize) -> Result<()> {
        if let Some(exp) = self.expandable.as_mut() {
            // Counted from what is mapped before and after, so a vendor
            // error part-way still leaves the statistics true.
            let before = exp.mapped_total();
            let t0 = crate::trace::start();
            let result = exp.unmap_free(&self.arena, want);
            let bytes = before - exp.mapped_total();
            crate::trace::granules(t0, self.source.device, false, bytes);
            // Expandable segments count in the large pool (docs/allocator.md).
            self.stats.on_reserved(bytes as u64, Pool::Large, false);
            self.stats.num_device_free += (bytes / exp.vm.granularity) as u64;
            result?;
        }
        Ok(())
    }

    /// Unmaps every free granule of the expandable segments.
    pub(super) fn unmap_free_granules(&mut self) -> Result<()> {
        self.unmap_free_granules_for(usize::MAX)
    }

    /// Maps the granules an allocated block of an expandable segment
    /// needs, unmapping free granules and retrying once when out of memory.
    pub(super) fn map_for(&mut self, block: BlockId) -> Result<()> {
        let Some(exp) = self.expandable.as_mut() else {
            return Ok(());
        };
        let (addr, size, segment) = {
            let b = &self.arena.blocks[block];
            (b.addr, b.size, b.segment)
        };
        let stream = self.arena.segments[segment].stream;
        let vm = exp.vm;
        let missing = match exp.by_stream.get(&stream).filter(|e| e.segment == segment) {
            Some(seg) => vm.unmapped_bytes(seg, addr, size) as u64,
            None => return Ok(()),
        };
        if missing == 0 {
            return Ok(());
        }
        // Free granules are unmapped only when mapping more would pass the
        // high-water mark: the peak stays where unmapping them at every
        // growth would put it, without a vendor call per growth.
        // (Regular segments may have raised reserved memory past the mark.)
        exp.high_water = exp.high_water.max(self.stats.reserved_bytes.current);
        let ceiling = exp.high_water.min(self.source.limit);
        let over = (self.stats.reserved_bytes.current + missing).saturating_sub(ceiling);
        if self.policy.release_before_grow() && over > 0 {
            self.flush_parked();
            self.unmap_free_granules_for(over as usize)?;
        }
        let mut retried = false;
        loop {
            let exp = self.expandable.as_mut().expect("checked above");
            let before = exp.mapped_total();
            let t0 = crate::trace::start();
            let seg = exp.by_stream.get_mut(&stream).expect("checked above");
            let mapped = self
                .source
                .check_limit(missing, self.stats.reserved_bytes.current)
                .and_then(|()| vm.map_range(seg, addr, size));
            // Counted from what is mapped, even after a failure part-way.
            let bytes = exp.mapped_total() - before;
            crate::trace::granules(t0, self.source.device, true, bytes);
            self.stats.on_reserved(bytes as u64, Pool::Large, true);
            self.stats.num_device_alloc += (bytes / vm.granularity) as u64;
            exp.high_water = exp.high_water.max(self.stats.reserved_bytes.current);
            match mapped {
                Ok(()) => {
                    self.stats.num_alloc_retries += u64::from(retried);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::OutOfMemory && !retried => {
                    retried = true;
                    crate::trace::oom_retry(self.source.device, size);
                    self.release_cached_segments(None)?;
                    self.process_pending(true)?;
                    self.stats.num_sync_all_streams += 1;
                    self.release_cached_segments(None)?;
                }
                Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                    self.stats.num_ooms += 1;
                    crate::trace::oom(self.source.device, size);
                    return Err(self.oom_error(size, size, &e));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Releases pending frees whose events have all completed (all of them,
    /// waiting, when `wait`).
    pub(super) fn process_pending(&mut self, wait: bool) -> Result<()> {
        for block in self.pending.take_ready(wait)? {
            self.release(block);
        }
        Ok(())
    }

    /// Gives every cached whole segment back to the vendor (oldest first),
    /// until `keep_below` bytes are reserved if given.
    pub(super) fn release_cached_segments(&mut self, keep_below: Option<u64>) -> Result<()> {
        self.reclaim_fronts();
        self.flush_parked();
        let mut whole: Vec<(u64, BlockId)> = self
            .arena
            .segments
            .iter()
            .filter(|(id, s)| {
                s.blocks == 1
                    && self.arena.blocks[s.first].used == Use::Free
                    && !self
                        .expandable
                        .as_ref()
                        .is_some_and(|e| e.is_expandable(*id))
            })
            .map(|(_, s)| (s.born, s.first))
            .collect();
        whole.sort_unstable();
        for (_, block) in whole {
            if keep_below.is_some_and(|limit| self.stats.reserved_bytes.current <= limit) {
                break;
            }
            self.policy.remove(&self.arena, block);
            let pool = self.arena.blocks[block].pool;
            let (addr, size) = self.arena.remove_segment(block);
            self.source.free(addr)?;
            self.stats.on_segment_released(size, pool);
        }
        if keep_below.is_none() {
            self.unmap_free_granules()?;
            self.release_empty_reservations()?;
        }
        Ok(())
    }

    /// Gives back the address ranges of expandable segments that are wholly free and unmapped.
    pub(super) fn release_empty_reservations(&mut self) -> Result<()> {
        let Some(exp) = self.expandable.as_mut() else {
            return Ok(());
        };
        let empty: Vec<_> = exp
            .by_stream
            .iter()
            .filter(|(_, e)| exp.mapped_bytes(e) == 0)
            .map(|(stream, e)| (*stream, self.arena.segments[e.segment].first))
            .filter(|(_, first)| {
                self.arena.is_whole_segment(*first) && self.arena.blocks[*first].used == Use::Free
            })
            .collect();
        for (stream, block) in empty {
            self.policy.remove(&self.arena, block);
            let (base, _) = self.arena.remove_segment(block);
            self.source.unregister(base);
            self.expandable
                .as_mut()
                .expect("checked above")
                .free_reservation(stream)?;
            self.stats.on_segment_count(Pool::Large, false);
        }
        Ok(())
    }

    /// A new segment for a block of `size`, with PyTorch's recovery ladder.
    pub(super) fn grow(
        &mut self,
        size: usize,
        stream: Stream,
        requested: usize,
    ) -> Result<BlockId> {
        let reclaimed = self.reclaim_fronts();
        if self.parked_blocks > 0 || reclaimed {
            // Merged, the parked and slotted blocks may serve the request after all.
            self.flush_parked();
            if let Some(block) = self.policy.take(&self.arena, size, stream) {
                self.unindexed(block);
                return Ok(block);
            }
        }
        if let Some(exp) = self.expandable.as_mut() {
            if let Some(block) = exp.reserve(&mut self.arena, stream)? {
                let b = &self.arena.blocks[block];
                self.source.register(b.addr, b.size);
                self.stats.on_segment_count(Pool::Large, true);
                return Ok(block);
            }
            // The stream's range cannot serve this pool (TORCH's small
            // requests): fall back to a regular segment.
        }
        let seg = self.policy.segment_size(size);
        if self.policy.release_before_grow() {
            self.release_cached_segments(None)?;
        }
        if let Some(t) = self.gc_threshold {
            let limit = (self.source.limit as f64 * t) as u64;
            if self.stats.reserved_bytes.current + seg as u64 > limit {
                self.release_cached_segments(Some(limit.saturating_sub(seg as u64)))?;
            }
        }
        let first = self.source.malloc(seg, self.stats.reserved_bytes.current);
        let ptr = match first {
            Ok(ptr) => ptr,
            Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                crate::trace::oom_retry(self.source.device, seg);
                self.release_cached_segments(None)?;
                self.process_pending(true)?;
                self.stats.num_sync_all_streams += 1;
                self.release_cached_segments(None)?;
                match self.source.malloc(seg, self.stats.reserved_bytes.current) {
                    Ok(ptr) => {
                        self.stats.num_alloc_retries += 1;
                        ptr
                    }
                    Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                        self.stats.num_ooms += 1;
                        crate::trace::oom(self.source.device, requested);
                        return Err(self.oom_error(requested, seg, &e));
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let pool = self.policy.segment_pool(size);
        self.stats.on_segment_created(seg, pool);
        Ok(self.arena.add_segment(ptr as usize, seg, stream, pool))
    }

    pub(super) fn oom_error(&self, requested: usize, segment: usize, cause: &Error) -> Error {
        let s = &self.stats;
        self.source.oom_error(
            requested,
            segment,
            s.reserved_bytes.current,
            s.allocated_bytes.current,
            cause,
        )
    }
}
