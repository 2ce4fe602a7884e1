//! The device side of the thread caches (`front.rs`): taking lent blocks
//! back, telling a cache that a block is no longer its, the statistics that
//! count slotted blocks as free, and retiring the cache of a thread that
//! ended.

use super::State;
use crate::arena::{BlockId, Use};
use crate::front::{Front, Home};
use crate::policy::Policy;
use crate::{DeviceStats, Pool};
use dipu_stream::sync::Mutex;

impl<P: Policy> State<P> {
    /// Takes back a block from the slots of thread cache `front` (its
    /// user's free was counted there); false if it is not lent there.
    pub(super) fn take_back(&mut self, front: usize, block: BlockId) -> bool {
        let Some(b) = self.arena.blocks.get(block) else {
            return false;
        };
        if b.used != Use::Lent(front) {
            return false;
        }
        let (addr, size, requested, pool) = (b.addr, b.size, b.requested, b.pool);
        self.stats.on_taken_back(size, requested, pool);
        self.arena.in_use.remove(&addr);
        self.cache_block(block);
        true
    }

    /// Takes back every block waiting in a thread cache's slots; true if
    /// there was any.
    pub(super) fn reclaim_fronts(&mut self) -> bool {
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
    pub(super) fn in_slot(&self, front: usize, block: BlockId) -> bool {
        self.fronts
            .as_ref()
            .and_then(|r| r.get(front))
            .is_some_and(|shared| shared.slotted().any(|b| b == block))
    }

    /// Tells thread cache `front` that the block at `addr` is no longer its.
    pub(super) fn invalidate(&self, front: usize, addr: usize) {
        if let Some(shared) = self.fronts.as_ref().and_then(|r| r.get(front)) {
            shared.invalidate(addr);
        }
    }

    /// The statistics with the thread caches' part: their totals added and
    /// their slotted blocks counted as free.
    pub(super) fn reported_stats(&self) -> DeviceStats {
        let mut stats = self.stats;
        for (i, shared) in self.fronts.iter().flatten() {
            for pool in [Pool::Small, Pool::Large] {
                stats.add_cache_totals(shared.counters.totals(pool), pool);
            }
            for block in shared.slotted() {
                if let Some(b) = self
                    .arena
                    .blocks
                    .get(block)
                    .filter(|b| b.used == Use::Lent(i))
                {
                    let split = !self.arena.is_whole_segment(block);
                    stats.as_slotted(b.size, b.requested, split, b.pool);
                }
            }
        }
        stats
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
        for pool in [Pool::Small, Pool::Large] {
            st.stats
                .add_cache_totals(front.shared.counters.totals(pool), pool);
        }
        if let Some(registry) = st.fronts.as_mut() {
            registry.try_remove(front.index);
        }
    }
}
