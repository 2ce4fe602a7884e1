//! The caching allocator shared by TORCH, BF and BS: one lock per device,
//! segments from the vendor, blocks split and merged as the policy says,
//! frees deferred until other streams' work is done, OOM recovery,
//! statistics and snapshots. BF and BS put thread caches in front of the
//! lock (`front.rs`; the device's side of them is `caching/fronts.rs`).
//! Getting memory from the vendor and giving it back is `caching/growth.rs`.

use std::ffi::c_void;
use std::sync::{Arc, Weak};

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{PooledEvent, Stream};
use rustc_hash::FxHashMap as HashMap;

use crate::arena::{Arena, BlockId, Use};
use crate::deferred::Deferred;
use crate::expandable::Expandables;
use crate::front::{self, Freed, Home, Live};
use crate::policy::Policy;
use crate::snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot};
use crate::source::Source;
use crate::{Algorithm, Allocation, AllocatorConfig, DeviceAllocator, DeviceStats, LiveBlock};
use dipu_stream::sync::Mutex;

mod fronts;
mod growth;

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
            Some(Expandables::new(source.ctx, source.device, source.total)?)
        } else {
            None
        };
        let park = policy.parks_frees() && expandable.is_none();
        let cached = (policy.thread_cached() && config.thread_caches && expandable.is_none())
            .then(front::next_allocator_id);
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
            let b = &self.arena.blocks[block];
            self.stats.on_inactive_split(b.size, b.pool, true);
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
            let b = &self.arena.blocks[block];
            self.stats.on_inactive_split(b.size, b.pool, false);
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
        let b = &self.arena.blocks[block];
        self.stats.on_inactive(b.size, b.pool);
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
}

impl<P: Policy> DeviceAllocator for CachingAllocator<P> {
    fn device(&self) -> i32 {
        self.device
    }

    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    fn thread_cache_key(&self) -> Option<u64> {
        self.cached
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
        let (addr, size, pool) = (b.addr, b.size, b.pool);
        if let (Some(id), Some(registry)) = (self.cached, st.fronts.as_mut()) {
            let live = Live {
                block,
                size,
                requested: bytes,
                stream,
                pool,
            };
            let home = || Arc::downgrade(&self.state) as Weak<dyn Home>;
            if let Some(f) = front::lend(id, home, registry, addr, live) {
                st.arena.blocks[block].used = Use::Lent(f);
            }
        }
        st.arena.in_use.insert(addr, block);
        st.stats.on_allocate(size, bytes, pool);
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
        let (full, own) = match self.cached {
            Some(id) => match front::free(id, addr) {
                Freed::Cached => return Ok(()),
                Freed::Full(freed) => (Some((id, freed)), None),
                Freed::NotHere(own) => (None, own),
            },
            None => (None, None),
        };
        let mut st = self.state.lock();
        let released = match full {
            // A full cache keeps the newest block and gives back its oldest.
            Some((id, freed)) => match front::evict_for(id, freed) {
                Some((f, evicted)) => {
                    if let Some(block) = evicted {
                        st.take_back(f, block);
                    }
                    return Ok(());
                }
                None => Some(freed.block()),
            },
            None => None,
        };
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
        let b = &st.arena.blocks[block];
        let (size, requested, pool) = (b.size, b.requested, b.pool);
        st.stats.on_free(size, requested, pool);
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

    fn find(&self, addr: usize) -> Option<LiveBlock> {
        let st = self.state.lock();
        let block = match st.arena.in_use.get(&addr) {
            Some(&b) => b,
            None => {
                let base = st.source.segments.find(addr)?.base;
                st.arena.block_at(base, addr)?
            }
        };
        let b = &st.arena.blocks[block];
        let live = match b.used {
            Use::Allocated => true,
            // Lent and not waiting in a slot: its user holds it.
            Use::Lent(f) => !st.in_slot(f, block),
            Use::Free | Use::Parked | Use::Pending => false,
        };
        (live && addr - b.addr < b.requested).then_some(LiveBlock {
            addr: b.addr,
            requested: b.requested,
        })
    }

    fn empty_cache(&self) -> Result<()> {
        let t0 = crate::trace::start();
        let mut st = self.state.lock();
        st.process_pending(false)?;
        st.release_cached_segments(None)?;
        let reserved = st.stats.reserved_bytes.current;
        crate::trace::empty_cache(t0, self.device, reserved);
        if let Some(exp) = st.expandable.as_mut() {
            // Memory given back stays given back: growing again unmaps
            // free granules from here on.
            exp.high_water = reserved;
        }
        Ok(())
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
                        st.policy.pool_name(s.pool)
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

#[cfg(all(test, loom))]
mod loom_tests;
