//! The caching allocator shared by TORCH, BF and BS: one lock per device,
//! segments from the vendor, blocks split and merged as the policy says,
//! frees deferred until other streams' work is done, OOM recovery,
//! statistics and snapshots. BF and BS put thread caches in front of the
//! lock (`front.rs`).

use std::ffi::c_void;
use std::sync::{Arc, Weak};

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{PooledEvent, Stream};
use rustc_hash::FxHashMap as HashMap;

use crate::arena::{Arena, BlockId, Use};
use crate::deferred::Deferred;
use crate::expandable::Expandables;
use crate::front::{self, Freed, Front, Home, Live};
use crate::policy::Policy;
use crate::snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot};
use crate::source::Source;
use crate::{Algorithm, Allocation, AllocatorConfig, DeviceAllocator, DeviceStats};
use dipu_stream::sync::Mutex;

struct State<P> {
    policy: P,
    arena: Arena,
    stats: DeviceStats,
    pending: Deferred<BlockId, PooledEvent>,
    /// Parked blocks by (stream, size).
    parked: HashMap<(Stream, usize), Vec<BlockId>>,
    parked_blocks: usize,
    /// Whether frees are parked (the policy's choice; not with expandable
    /// segments, whose free granules are unmapped instead).
    park: bool,
    source: Source,
    gc_threshold: Option<f64>,
    expandable: Option<Expandables>,
    /// The shared parts of the thread caches, when the policy has them.
    fronts: Option<slab::Slab<Arc<front::Shared>>>,
}

/// A caching device allocator for one device, over policy `P`.
pub(crate) struct CachingAllocator<P: Policy> {
    device: i32,
    algorithm: Algorithm,
    /// This allocator's key in thread caches, when it has them.
    cached: Option<u64>,
    state: Arc<Mutex<State<P>>>,
}

impl<P: Policy> CachingAllocator<P> {
    pub(crate) fn new(policy: P, source: Source, config: &AllocatorConfig) -> Result<Self> {
        let expandable = if config.expandable_segments {
            if !policy.splits() {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "expandable_segments works with the TORCH and BF algorithms, not {}",
                        policy.algorithm()
                    ),
                ));
            }
            Some(Expandables::new(source.ctx, source.device, source.limit)?)
        } else {
            None
        };
        let park = policy.parks_frees() && expandable.is_none();
        let cached =
            (policy.thread_cached() && expandable.is_none()).then(front::next_allocator_id);
        let (device, algorithm) = (source.device, policy.algorithm());
        let state = Arc::new(Mutex::new(State {
            policy,
            arena: Arena::default(),
            stats: DeviceStats::default(),
            pending: Deferred::new(),
            parked: HashMap::default(),
            parked_blocks: 0,
            park,
            source,
            gc_threshold: config.garbage_collection_threshold,
            expandable,
            fronts: cached.map(|_| slab::Slab::new()),
        }));
        Ok(CachingAllocator {
            device,
            algorithm,
            cached,
            state,
        })
    }
}

impl<P: Policy> State<P> {
    /// Counts a reusable block as inactive-split when its segment is in use.
    fn count_inactive(&mut self, block: BlockId) {
        if !self.arena.is_whole_segment(block) {
            let size = self.arena.blocks[block].size as u64;
            self.stats.inactive_split.increase(1);
            self.stats.inactive_split_bytes.increase(size);
        }
    }

    /// Indexes a free block, counting it as inactive-split when its segment is in use.
    fn index(&mut self, block: BlockId) {
        self.count_inactive(block);
        self.policy.insert(&self.arena, block);
    }

    /// A parked block of exactly `size` for `stream`, if one waits.
    fn unpark(&mut self, stream: Stream, size: usize) -> Option<BlockId> {
        if self.parked_blocks == 0 {
            return None;
        }
        let block = self.parked.get_mut(&(stream, size))?.pop()?;
        self.parked_blocks -= 1;
        self.unindexed(block);
        self.arena.blocks[block].used = Use::Free;
        Some(block)
    }

    /// Merges and indexes every parked block.
    fn flush_parked(&mut self) {
        if self.parked_blocks == 0 {
            return;
        }
        let parked: Vec<BlockId> = self.parked.drain().flat_map(|(_, blocks)| blocks).collect();
        self.parked_blocks = 0;
        for block in parked {
            self.unindexed(block);
            self.arena.blocks[block].used = Use::Free;
            self.merge_and_index(block);
        }
    }

    /// Takes a block out of the index (after `policy.take`, or to merge or release it).
    fn unindexed(&mut self, block: BlockId) {
        if !self.arena.is_whole_segment(block) {
            let size = self.arena.blocks[block].size as u64;
            self.stats.inactive_split.decrease(1);
            self.stats.inactive_split_bytes.decrease(size);
        }
    }

    /// Makes a freed block reusable: merges it with free neighbours and indexes it.
    fn release(&mut self, block: BlockId) {
        let addr = self.arena.blocks[block].addr;
        self.arena.in_use.remove(&addr);
        self.release_unlisted(block);
    }

    /// [`State::release`] for a block already taken out of `in_use`.
    fn release_unlisted(&mut self, block: BlockId) {
        let size = self.arena.blocks[block].size;
        self.stats.on_inactive(size);
        self.cache_block(block);
    }

    /// Caches a block nobody uses any more (parked, or merged and indexed).
    fn cache_block(&mut self, block: BlockId) {
        let size = self.arena.blocks[block].size;
        let b = &mut self.arena.blocks[block];
        b.requested = 0;
        b.other_streams.clear();
        if self.park {
            b.used = Use::Parked;
            let stream = self.arena.stream_of(block);
            self.count_inactive(block);
            self.parked.entry((stream, size)).or_default().push(block);
            self.parked_blocks += 1;
        } else {
            b.used = Use::Free;
            self.merge_and_index(block);
        }
    }

    /// Takes back a block from the slots of thread cache `front` (its
    /// user's free was counted there); false if it is not lent there.
    fn take_back(&mut self, front: usize, block: BlockId) -> bool {
        let Some(b) = self.arena.blocks.get(block) else {
            return false;
        };
        if b.used != Use::Lent(front) {
            return false;
        }
        let (addr, size, requested) = (b.addr, b.size, b.requested);
        self.stats.on_taken_back(size, requested);
        self.arena.in_use.remove(&addr);
        self.cache_block(block);
        true
    }

    /// Takes back every block waiting in a thread cache's slots; true if
    /// there was any.
    fn reclaim_fronts(&mut self) -> bool {
        let Some(registry) = self.fronts.as_ref() else {
            return false;
        };
        let taken: Vec<(usize, BlockId)> = registry
            .iter()
            .flat_map(|(i, shared)| shared.take_all().into_iter().map(move |b| (i, b)))
            .collect();
        let mut any = false;
        for (front, block) in taken {
            any |= self.take_back(front, block);
        }
        any
    }

    /// Whether `block` waits in a slot of thread cache `front`.
    fn in_slot(&self, front: usize, block: BlockId) -> bool {
        self.fronts
            .as_ref()
            .and_then(|r| r.get(front))
            .is_some_and(|shared| shared.slotted().any(|b| b == block))
    }

    /// Tells thread cache `front` that the block at `addr` is no longer its.
    fn invalidate(&self, front: usize, addr: usize) {
        if let Some(shared) = self.fronts.as_ref().and_then(|r| r.get(front)) {
            shared.invalidate(addr);
        }
    }

    /// The statistics with the thread caches' part: their totals added and
    /// their slotted blocks counted as free.
    fn reported_stats(&self) -> DeviceStats {
        let mut stats = self.stats;
        for (i, shared) in self.fronts.iter().flatten() {
            stats.add_cache_totals(shared.counters.totals());
            for block in shared.slotted() {
                if let Some(b) = self
                    .arena
                    .blocks
                    .get(block)
                    .filter(|b| b.used == Use::Lent(i))
                {
                    stats.as_slotted(b.size, b.requested, !self.arena.is_whole_segment(block));
                }
            }
        }
        stats
    }

    /// Merges a free, unindexed block with its free neighbours and indexes it.
    fn merge_and_index(&mut self, mut block: BlockId) {
        if self.policy.merges() {
            for neighbour in self.arena.free_neighbours(block).into_iter().flatten() {
                self.policy.remove(&self.arena, neighbour);
                self.unindexed(neighbour);
                block = self.arena.merge(block, neighbour);
            }
        }
        self.index(block);
    }

    /// Unmaps the free granules of every expandable segment.
    fn unmap_free_granules(&mut self) -> Result<()> {
        if let Some(exp) = self.expandable.as_mut() {
            let bytes = exp.unmap_free_all(&self.arena)?;
            let granularity = exp.vm.granularity;
            self.stats.reserved_bytes.decrease(bytes as u64);
            self.stats.num_device_free += (bytes / granularity) as u64;
        }
        Ok(())
    }

    /// Maps the granules an allocated block of an expandable segment
    /// needs, unmapping free granules and retrying once when out of memory.
    fn map_for(&mut self, block: BlockId) -> Result<()> {
        let Some(exp) = self.expandable.as_mut() else {
            return Ok(());
        };
        let (addr, size, segment) = {
            let b = &self.arena.blocks[block];
            (b.addr, b.size, b.segment)
        };
        let stream = self.arena.segments[segment].stream;
        let vm = exp.vm;
        let needs = match exp.by_stream.get(&stream).filter(|e| e.segment == segment) {
            Some(seg) => vm.needs_mapping(seg, addr, size),
            None => return Ok(()),
        };
        if !needs {
            return Ok(());
        }
        if self.policy.release_before_grow() {
            self.flush_parked();
            self.unmap_free_granules()?;
        }
        let mut retried = false;
        loop {
            let exp = self.expandable.as_mut().expect("checked above");
            let seg = exp.by_stream.get_mut(&stream).expect("checked above");
            match vm.map_range(seg, addr, size) {
                Ok(bytes) => {
                    self.stats.reserved_bytes.increase(bytes as u64);
                    self.stats.num_device_alloc += (bytes / vm.granularity) as u64;
                    self.stats.num_alloc_retries += u64::from(retried);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::OutOfMemory && !retried => {
                    retried = true;
                    self.release_cached_segments(None)?;
                    self.process_pending(true)?;
                    self.stats.num_sync_all_streams += 1;
                    self.release_cached_segments(None)?;
                }
                Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                    self.stats.num_ooms += 1;
                    return Err(self.oom_error(size, size, &e));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Releases pending frees whose events have all completed (all of them,
    /// waiting, when `wait`).
    fn process_pending(&mut self, wait: bool) -> Result<()> {
        for block in self.pending.take_ready(wait)? {
            self.release(block);
        }
        Ok(())
    }

    /// Gives every cached whole segment back to the vendor (oldest first),
    /// until `keep_below` bytes are reserved if given.
    fn release_cached_segments(&mut self, keep_below: Option<u64>) -> Result<()> {
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
            let (addr, size) = self.arena.remove_segment(block);
            self.source.free(addr)?;
            self.stats.on_segment_released(size);
        }
        if keep_below.is_none() {
            self.unmap_free_granules()?;
            self.release_empty_reservations()?;
        }
        Ok(())
    }

    /// Gives back the address ranges of expandable segments that are wholly free and unmapped.
    fn release_empty_reservations(&mut self) -> Result<()> {
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
            self.arena.remove_segment(block);
            self.expandable
                .as_mut()
                .expect("checked above")
                .free_reservation(stream)?;
            self.stats.segment.decrease(1);
        }
        Ok(())
    }

    /// A new segment for a block of `size`, with PyTorch's recovery ladder.
    fn grow(&mut self, size: usize, stream: Stream, requested: usize) -> Result<BlockId> {
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
                self.stats.segment.increase(1);
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
                        return Err(self.oom_error(requested, seg, &e));
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        self.stats.on_segment_created(seg);
        Ok(self.arena.add_segment(ptr as usize, seg, stream))
    }

    fn oom_error(&self, requested: usize, segment: usize, cause: &Error) -> Error {
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

impl<P: Policy> DeviceAllocator for CachingAllocator<P> {
    fn device(&self) -> i32 {
        self.device
    }

    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    fn allocate(&self, bytes: usize, stream: Stream) -> Result<Allocation> {
        if let Some(empty) = crate::trivial_request(self.device, bytes, stream)? {
            return Ok(empty);
        }
        if bytes > isize::MAX as usize / 2 {
            self.state.lock().stats.num_ooms += 1;
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "device {}: cannot allocate {bytes} bytes, more than any device holds",
                    self.device
                ),
            ));
        }
        if let Some(id) = self.cached {
            if let Some(addr) = front::hit(id, stream, bytes) {
                return Ok(Allocation {
                    ptr: addr as *mut c_void,
                    size: bytes,
                    device: self.device,
                    stream,
                });
            }
        }
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if !st.pending.is_empty() {
            st.process_pending(false)?;
        }
        let size = st.policy.round(bytes);
        let block = match st.unpark(stream, size) {
            Some(block) => block,
            None => match st.policy.take(&st.arena, size, stream) {
                Some(block) => {
                    st.unindexed(block);
                    block
                }
                None => st.grow(size, stream, bytes)?,
            },
        };
        let mut block = block;
        let block_size = st.arena.blocks[block].size;
        if block_size > size && st.policy.should_split(block_size, size) {
            // (Not in an expandable segment: its free tail is unmapped
            // address space, and blocks there grow upwards.)
            if st.expandable.is_none() && st.policy.splits_from_end(size) {
                let tail = st.arena.split(block, block_size - size);
                st.index(block);
                block = tail;
            } else {
                let rest = st.arena.split(block, size);
                st.index(rest);
            }
        }
        st.arena.blocks[block].used = Use::Allocated;
        if let Err(e) = st.map_for(block) {
            st.arena.blocks[block].used = Use::Free;
            st.merge_and_index(block);
            return Err(e);
        }
        let b = &mut st.arena.blocks[block];
        b.requested = bytes;
        let (addr, size) = (b.addr, b.size);
        if let (Some(id), Some(registry)) = (self.cached, st.fronts.as_mut()) {
            let live = Live {
                block,
                size,
                requested: bytes,
                stream,
            };
            let home = || Arc::downgrade(&self.state) as Weak<dyn Home>;
            if let Some(f) = front::lend(id, home, registry, addr, live) {
                st.arena.blocks[block].used = Use::Lent(f);
            }
        }
        st.arena.in_use.insert(addr, block);
        st.stats.on_allocate(size, bytes);
        Ok(Allocation {
            ptr: addr as *mut c_void,
            size: bytes,
            device: self.device,
            stream,
        })
    }

    fn free(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let addr = ptr as usize;
        // The block this thread's cache knew its user held, or this
        // thread's cache key.
        let (released, own) = match self.cached {
            Some(id) => match front::free(id, addr) {
                Freed::Cached => return Ok(()),
                Freed::Full(block) => (Some(block), None),
                Freed::NotHere(own) => (None, own),
            },
            None => (None, None),
        };
        let mut st = self.state.lock();
        let found = st.arena.in_use.remove(&addr);
        let valid = match found.map(|b| (b, st.arena.blocks[b].used)) {
            Some((b, Use::Allocated)) => Some(b),
            Some((b, Use::Lent(_))) if released == Some(b) => Some(b),
            // Lent to another thread's cache, and not in its slots: a free
            // on another thread than the allocation's.
            Some((b, Use::Lent(f))) if own != Some(f) && !st.in_slot(f, b) => {
                st.invalidate(f, addr);
                Some(b)
            }
            _ => None,
        };
        let Some(block) = valid else {
            if let Some(b) = found {
                st.arena.in_use.insert(addr, b);
            }
            return Err(Error::invalid_argument(format!(
                "{ptr:p} was not allocated by the device {} allocator, or was already freed",
                self.device
            )));
        };
        let (size, requested) = (
            st.arena.blocks[block].size,
            st.arena.blocks[block].requested,
        );
        st.stats.on_free(size, requested);
        let others = std::mem::take(&mut st.arena.blocks[block].other_streams);
        if others.is_empty() {
            st.release_unlisted(block);
            return Ok(());
        }
        let mut events = Vec::with_capacity(others.len());
        for stream in others {
            let event = stream.context().pooled_event(stream.device())?;
            event.record(&stream)?;
            events.push(event);
        }
        st.arena.blocks[block].used = Use::Pending;
        st.arena.in_use.insert(ptr as usize, block);
        st.pending.push(block, events);
        Ok(())
    }

    fn record_stream(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        let addr = ptr as usize;
        let own = self.cached.and_then(front::index_of);
        let mut st = self.state.lock();
        let found = st.arena.in_use.get(&addr).copied();
        let block = match found.map(|b| (b, st.arena.blocks[b].used)) {
            Some((b, Use::Allocated)) => b,
            // Lent and live: not in a slot, and not an address this
            // thread's cache saw its user free. Its free must now wait for
            // `stream`, so the device takes it back from the cache.
            Some((b, Use::Lent(f)))
                if !st.in_slot(f, b)
                    && (own != Some(f) || self.cached.is_some_and(|id| front::holds(id, addr))) =>
            {
                st.invalidate(f, addr);
                st.arena.blocks[b].used = Use::Allocated;
                b
            }
            _ => {
                return Err(Error::invalid_argument(format!(
                    "record_stream: {ptr:p} is not a live allocation of the device {} allocator",
                    self.device
                )))
            }
        };
        if st.arena.stream_of(block) != stream
            && !st.arena.blocks[block].other_streams.contains(&stream)
        {
            st.arena.blocks[block].other_streams.push(stream);
        }
        Ok(())
    }

    fn empty_cache(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.process_pending(false)?;
        st.release_cached_segments(None)
    }

    fn stats(&self) -> DeviceStats {
        self.state.lock().reported_stats()
    }

    fn reset_peak_stats(&self) {
        self.state.lock().stats.reset_peaks();
    }

    fn snapshot(&self) -> Snapshot {
        let st = self.state.lock();
        let slotted: std::collections::HashSet<BlockId> = st
            .fronts
            .iter()
            .flatten()
            .flat_map(|(_, shared)| shared.slotted())
            .collect();
        let mut segments: Vec<SegmentInfo> = st
            .arena
            .segments
            .iter()
            .map(|(id, s)| {
                let mut blocks = Vec::with_capacity(s.blocks);
                let mut at = Some(s.first);
                while let Some(id) = at {
                    let b = &st.arena.blocks[id];
                    let state = match b.used {
                        Use::Free | Use::Parked => BlockState::Free,
                        Use::Allocated => BlockState::Allocated,
                        Use::Lent(_) if slotted.contains(&id) => BlockState::Free,
                        Use::Lent(_) => BlockState::Allocated,
                        Use::Pending => BlockState::Pending,
                    };
                    blocks.push(BlockInfo {
                        address: b.addr,
                        size: b.size,
                        state,
                        requested: if state == BlockState::Free {
                            0
                        } else {
                            b.requested
                        },
                    });
                    at = b.next;
                }
                let expandable = st.expandable.as_ref().and_then(|e| {
                    e.by_stream
                        .get(&s.stream)
                        .filter(|x| x.segment == id)
                        .map(|x| e.mapped_bytes(x))
                });
                SegmentInfo {
                    device: self.device,
                    address: s.addr,
                    size: expandable.unwrap_or(s.size),
                    stream: s.stream.id().as_u32(),
                    pool: if expandable.is_some() {
                        "expandable"
                    } else {
                        st.policy.pool_name(s.size)
                    }
                    .to_owned(),
                    blocks,
                }
            })
            .collect();
        segments.sort_by_key(|s| s.address);
        Snapshot { segments }
    }

    fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.state.lock().source.set_fraction(fraction)
    }
}

impl<P: Policy> Home for Mutex<State<P>> {
    fn retire(&self, front: &mut Front) {
        let mut st = self.lock();
        front.settle();
        for block in front.take_all() {
            st.take_back(front.index, block);
        }
        for block in front.drain_lent() {
            if let Some(b) = st.arena.blocks.get_mut(block) {
                if b.used == Use::Lent(front.index) {
                    b.used = Use::Allocated;
                }
            }
        }
        st.stats.add_cache_totals(front.shared.counters.totals());
        if let Some(registry) = st.fronts.as_mut() {
            registry.try_remove(front.index);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use loom::sync::Mutex as LoomMutex;

    use dipu_stream::Stream;

    use crate::{new_device_allocator, Algorithm, AllocatorConfig, DeviceAllocator};

    /// An allocator of `algorithm` for a 64 MiB host device, and the
    /// device's current stream.
    fn host_allocator(algorithm: Algorithm) -> (Arc<dyn DeviceAllocator>, Stream) {
        let vendor = dipu_vendor_host::HostVendor::new(dipu_vendor_host::HostConfig {
            devices: 1,
            memory_per_device: 64 << 20,
            ..Default::default()
        })
        .unwrap();
        let ctx = dipu_stream::DeviceContext::new(Arc::new(vendor)).unwrap();
        let alloc = new_device_allocator(ctx, 0, algorithm, &AllocatorConfig::default()).unwrap();
        (Arc::from(alloc), ctx.current_stream(0).unwrap())
    }

    /// Two threads allocate and free at once through one device allocator
    /// whose cache already holds a segment: every interleaving hands out
    /// disjoint live blocks, and afterwards the books balance.
    #[test]
    fn concurrent_allocate_and_free_never_share_memory() {
        loom::model(|| {
            let (alloc, stream) = host_allocator(Algorithm::BestFit);
            let warm = alloc.allocate(8192, stream).unwrap();
            alloc.free(warm.ptr).unwrap();
            let live = Arc::new(LoomMutex::new(Vec::<(usize, usize)>::new()));
            let worker = {
                let (alloc, live) = (alloc.clone(), live.clone());
                move |bytes: usize| {
                    let a = alloc.allocate(bytes, stream).unwrap();
                    let start = a.ptr as usize;
                    {
                        let mut live = live.lock().unwrap();
                        for &(s, e) in live.iter() {
                            assert!(start + bytes <= s || e <= start, "overlapping live blocks");
                        }
                        live.push((start, start + bytes));
                    }
                    live.lock().unwrap().retain(|&(s, _)| s != start);
                    alloc.free(a.ptr).unwrap();
                }
            };
            let w = worker.clone();
            let t = loom::thread::spawn(move || w(3000));
            worker(5000);
            t.join().unwrap();
            let stats = alloc.stats();
            assert_eq!(stats.allocated_bytes.current, 0);
            assert_eq!(
                stats.num_device_alloc, 1,
                "both threads were served from the cached segment"
            );
            alloc.empty_cache().unwrap();
            assert_eq!(alloc.stats().reserved_bytes.current, 0);
        });
    }

    /// A block waits in this thread's cache while this thread asks for the
    /// same size again and another thread asks for it too (taking it back
    /// from the cache as it grows): each gets a different block, and after
    /// both frees and the other thread's end the books balance and every
    /// segment can go back.
    #[test]
    fn a_cached_block_goes_to_exactly_one_thread() {
        loom::model(|| {
            let (alloc, stream) = host_allocator(Algorithm::BinSize);
            let cached = alloc.allocate(4096, stream).unwrap();
            alloc.free(cached.ptr).unwrap();
            let other = {
                let alloc = alloc.clone();
                loom::thread::spawn(move || {
                    let b = alloc.allocate(4096, stream).unwrap();
                    b.ptr as usize
                })
            };
            let a = alloc.allocate(4096, stream).unwrap();
            let b = other.join().unwrap();
            assert_ne!(a.ptr as usize, b, "one block handed to two threads");
            assert!(
                a.ptr == cached.ptr || b == cached.ptr as usize,
                "the cached block served one of them"
            );
            assert_eq!(alloc.stats().allocation.current, 2);
            alloc.free(a.ptr).unwrap();
            alloc.free(b as *mut std::ffi::c_void).unwrap();
            let stats = alloc.stats();
            assert_eq!(stats.allocation.current, 0);
            assert_eq!(stats.allocated_bytes.current, 0);
            assert_eq!(stats.allocation.allocated, stats.allocation.freed);
            alloc.empty_cache().unwrap();
            assert_eq!(alloc.stats().reserved_bytes.current, 0);
        });
    }

    /// A block lent to this thread's cache is freed on another thread while
    /// this thread frees and allocates other blocks: the address is freed
    /// once, this thread forgets it, and a second free is an error.
    #[test]
    fn a_free_on_another_thread_reaches_the_lending_cache() {
        loom::model(|| {
            let (alloc, stream) = host_allocator(Algorithm::BinSize);
            let lent = alloc.allocate(4096, stream).unwrap();
            let mine = alloc.allocate(8192, stream).unwrap();
            let other = {
                let alloc = alloc.clone();
                let ptr = lent.ptr as usize;
                loom::thread::spawn(move || {
                    alloc.free(ptr as *mut std::ffi::c_void).unwrap();
                })
            };
            alloc.free(mine.ptr).unwrap();
            let again = alloc.allocate(8192, stream).unwrap();
            assert_eq!(again.ptr, mine.ptr, "this thread's cache served it");
            other.join().unwrap();
            assert!(alloc.free(lent.ptr).is_err(), "freed twice");
            alloc.free(again.ptr).unwrap();
            let stats = alloc.stats();
            assert_eq!(stats.allocation.current, 0);
            assert_eq!(stats.allocation.allocated, stats.allocation.freed);
            alloc.empty_cache().unwrap();
            assert_eq!(alloc.stats().reserved_bytes.current, 0);
        });
    }
}
