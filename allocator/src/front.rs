//! Thread caches: a thread keeps the blocks it freed in a few slots, by
//! stream and requested size, and hands them back to its own next
//! requests of the same size and stream without taking the device lock.
//!
//! - A block a thread got from the device is *lent* to that thread's
//!   cache (the device counts it as allocated). The thread's private map
//!   knows which of its addresses its user holds; a free of one of them
//!   puts the block in a free slot, a plain store.
//! - The device takes slotted blocks back, under its lock, with an atomic
//!   swap per slot: before it grows, on `empty_cache` and OOM, and when a
//!   thread ends. The owner takes a slot with a swap too, so each block
//!   goes to exactly one side.
//! - A lent block freed on another thread, or used on another stream
//!   (`record_stream`), goes back to the device under its lock, which tells
//!   the owner to forget the address (`Shared::invalid`); the owner reads
//!   that notice at the start of each of its calls.

use std::sync::{Arc, Weak};

use dipu_stream::sync::{AtomicBool, AtomicU64, Mutex, Ordering};
use dipu_stream::Stream;
use rustc_hash::FxHashMap as HashMap;

use crate::arena::BlockId;
use crate::stats::{CacheTotals, Pool};
use crate::thread::ThreadState;

/// Slots per thread and device (at most 32; fewer in loom models, whose
/// branch budget each atomic slot spends). More slots serve more sizes at
/// once, but every call scans them: on resnet18.trace (`alloc_replay`
/// bench, with a full cache evicting its oldest block) 16 were faster than
/// 8 or 32.
#[cfg(not(loom))]
const SLOTS: usize = 16;
#[cfg(loom)]
const SLOTS: usize = 2;
/// Every slot's bit.
const ALL: u32 = u32::MAX >> (32 - SLOTS);
/// An empty slot (a full one holds its block's id + 1).
const EMPTY: u64 = 0;

/// The part of a thread cache the device reaches, under its lock.
pub(crate) struct Shared {
    slots: [AtomicU64; SLOTS],
    /// Set when the device took slotted blocks back or posted to `invalid`.
    notice: AtomicBool,
    /// Lent addresses that are no longer the owner's (freed elsewhere, or
    /// handed to the device by `record_stream`).
    invalid: Mutex<Vec<usize>>,
    /// What the owner served and took back without the device.
    pub(crate) counters: Counters,
}

/// Totals of the calls a thread cache served itself, per pool (written by
/// its owner only, read by statistics).
pub(crate) struct Counters {
    /// Indexed by [`Pool`]: a call bumps its block's pool's counters only.
    pools: [PoolCounters; 2],
}

/// [`Counters`] of one pool.
pub(crate) struct PoolCounters {
    pub(crate) hits: AtomicU64,
    pub(crate) hit_bytes: AtomicU64,
    pub(crate) hit_requested: AtomicU64,
    pub(crate) frees: AtomicU64,
    pub(crate) free_bytes: AtomicU64,
    pub(crate) free_requested: AtomicU64,
}

/// Puts `value` in `slot`, which is empty (owner side: the device only
/// ever empties a slot, and only the owner fills one). A store in real
/// builds (a swap would cost the hit pair, docs/benchmarks.md).
///
/// Under loom it is a swap, not a store. loom 0.7 can let a thread's later
/// load miss its own store when another thread swapped the same atomic just
/// before that store (tokio-rs/loom#254): the device's `take_all` swapping
/// an empty slot, then the owner's fill, then the owner's `settle` or the
/// statistics (on the owner's thread) reading the slot empty again, a state
/// that C11 coherence forbids (the swap read the value before the store, so
/// it comes first; the owner's load comes after its own store). loom orders
/// a swap after a swap correctly. For this slot the two are the same in
/// C11: the value the swap reads is always empty, which the model asserts.
#[inline]
fn publish(slot: &AtomicU64, value: u64) {
    #[cfg(not(loom))]
    slot.store(value, Ordering::Release);
    #[cfg(loom)]
    assert_eq!(
        slot.swap(value, Ordering::Release),
        EMPTY,
        "the owner fills only empty slots"
    );
}

/// Adds to a counter only its owner writes (no read-modify-write needed).
#[inline]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

impl Counters {
    fn new() -> Self {
        let zero = || AtomicU64::new(0);
        let pool = || PoolCounters {
            hits: zero(),
            hit_bytes: zero(),
            hit_requested: zero(),
            frees: zero(),
            free_bytes: zero(),
            free_requested: zero(),
        };
        Counters {
            pools: [pool(), pool()],
        }
    }

    /// The counters of `pool`.
    #[inline]
    fn of(&self, pool: Pool) -> &PoolCounters {
        &self.pools[pool as usize]
    }

    /// The totals of `pool` now.
    pub(crate) fn totals(&self, pool: Pool) -> CacheTotals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = self.of(pool);
        CacheTotals {
            hits: get(&c.hits),
            hit_bytes: get(&c.hit_bytes),
            hit_requested: get(&c.hit_requested),
            frees: get(&c.frees),
            free_bytes: get(&c.free_bytes),
            free_requested: get(&c.free_requested),
        }
    }
}

impl Shared {
    fn new() -> Self {
        Shared {
            slots: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            notice: AtomicBool::new(false),
            invalid: Mutex::new(Vec::new()),
            counters: Counters::new(),
        }
    }

    /// Takes every slotted block out (device side); tells the owner.
    pub(crate) fn take_all(&self) -> Vec<BlockId> {
        let taken: Vec<BlockId> = self
            .slots
            .iter()
            .map(|slot| slot.swap(EMPTY, Ordering::Acquire))
            .filter(|&v| v != EMPTY)
            .map(|v| (v - 1) as BlockId)
            .collect();
        if !taken.is_empty() {
            self.notice.store(true, Ordering::Release);
        }
        taken
    }

    /// The blocks in the slots now (device side, for statistics and snapshots).
    pub(crate) fn slotted(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.slots
            .iter()
            .map(|slot| slot.load(Ordering::Acquire))
            .filter(|&v| v != EMPTY)
            .map(|v| (v - 1) as BlockId)
    }

    /// Tells the owner that `addr` is no longer its (device side).
    pub(crate) fn invalidate(&self, addr: usize) {
        self.invalid.lock().push(addr);
        self.notice.store(true, Ordering::Release);
    }
}

/// A block the owner's user holds.
#[derive(Clone, Copy)]
pub(crate) struct Live {
    pub(crate) block: BlockId,
    pub(crate) size: usize,
    pub(crate) requested: usize,
    pub(crate) stream: Stream,
    /// Its segment's pool (which counters its reuse bumps).
    pub(crate) pool: Pool,
}

/// The slots whose bits are set in `bits`, lowest first.
#[inline]
fn slots_in(mut bits: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let k = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            k
        })
    })
}

/// What a slot holds, as its owner last left it.
#[derive(Clone, Copy)]
pub(crate) struct Slotted {
    addr: usize,
    live: Live,
}

impl Slotted {
    /// The block.
    pub(crate) fn block(&self) -> BlockId {
        self.live.block
    }
}

/// The device a thread cache belongs to.
pub(crate) trait Home: Send + Sync {
    /// Takes back the cache of a thread that ends: its slotted blocks
    /// become free, its lent ones ordinary allocations.
    fn retire(&self, front: &mut Front);
}

/// One thread's cache for one device allocator.
pub(crate) struct Front {
    allocator: u64,
    /// The cache's key in its device's registry.
    pub(crate) index: usize,
    home: Weak<dyn Home>,
    pub(crate) shared: Arc<Shared>,
    slots: [Option<Slotted>; SLOTS],
    /// Slots the owner filled (some may have been taken back since).
    occupied: u32,
    /// Slots whose block the owner's user holds: its free puts it back
    /// in the same slot (no map to update).
    out: u32,
    /// Other lent blocks the owner's user holds, by address.
    live: HashMap<usize, Live>,
    /// The slot whose block goes back to the device when every slot holds
    /// a cached block (round robin: roughly the one filled longest ago).
    evict_next: usize,
}

impl Front {
    /// Takes every slotted block out, for its thread's end (device side).
    pub(crate) fn take_all(&mut self) -> Vec<BlockId> {
        self.clear(self.occupied);
        self.shared.take_all()
    }

    /// Forgets what the owner knew of the slots in `bits`.
    fn clear(&mut self, bits: u32) {
        for k in slots_in(bits) {
            self.slots[k] = None;
        }
        self.occupied &= !bits;
        self.out &= !bits;
    }

    /// The slot of a block the owner's user holds at `addr`, if it came from a slot.
    #[inline]
    fn out_slot(&self, addr: usize) -> Option<usize> {
        self.slot_among(self.out, addr)
    }

    /// The slot among `bits` whose block is at `addr`.
    #[inline]
    fn slot_among(&self, bits: u32, addr: usize) -> Option<usize> {
        slots_in(bits).find(|&k| self.slots[k].is_some_and(|s| s.addr == addr))
    }

    /// Whether the owner's user holds the lent block at `addr`.
    pub(crate) fn holds(&self, addr: usize) -> bool {
        self.out_slot(addr).is_some() || self.live.contains_key(&addr)
    }

    /// Every lent block the owner's user holds, forgotten (for its thread's end).
    pub(crate) fn drain_lent(&mut self) -> Vec<BlockId> {
        let mut blocks: Vec<BlockId> = self.live.drain().map(|(_, l)| l.block).collect();
        blocks.extend(slots_in(self.out).filter_map(|k| self.slots[k].map(|s| s.block())));
        self.clear(self.out);
        blocks
    }
}

impl Front {
    /// Reads the device's notices: forgets invalidated addresses and
    /// empties the slots the device took back.
    #[inline]
    pub(crate) fn settle(&mut self) {
        if self.shared.notice.load(Ordering::Acquire) {
            self.settle_notices();
        }
    }

    /// `settle` when the device posted a notice.
    #[cold]
    fn settle_notices(&mut self) {
        self.shared.notice.swap(false, Ordering::Acquire);
        let invalid = std::mem::take(&mut *self.shared.invalid.lock());
        for addr in invalid {
            if self.live.remove(&addr).is_some() {
                continue;
            }
            if let Some(k) = self.out_slot(addr) {
                self.clear(1 << k);
                continue;
            }
            // Freed here and elsewhere at once: keep the device's copy.
            if let Some(k) = self.slot_among(self.occupied, addr) {
                self.shared.slots[k].swap(EMPTY, Ordering::Acquire);
                self.clear(1 << k);
                tracing::error!("{addr:#x} was freed twice at once, on two threads");
            }
        }
        let taken = slots_in(self.occupied)
            .filter(|&k| self.shared.slots[k].load(Ordering::Relaxed) == EMPTY)
            .fold(0, |bits, k| bits | 1 << k);
        self.clear(taken);
    }

    /// A slotted block for `requested` bytes on `stream`, now lent to the user.
    #[inline]
    fn pop(&mut self, stream: Stream, requested: usize) -> Option<usize> {
        self.settle();
        for k in slots_in(self.occupied) {
            let Some(s) = self.slots[k] else { continue };
            if s.live.requested != requested || s.live.stream != stream {
                continue;
            }
            if self.shared.slots[k].swap(EMPTY, Ordering::Acquire) == EMPTY {
                self.clear(1 << k); // the device took it back
                continue;
            }
            self.occupied &= !(1 << k);
            self.out |= 1 << k;
            let c = self.shared.counters.of(s.live.pool);
            bump(&c.hits, 1);
            bump(&c.hit_bytes, s.live.size as u64);
            bump(&c.hit_requested, requested as u64);
            return Some(s.addr);
        }
        None
    }

    /// Puts a lent block its user freed in a slot.
    #[inline]
    fn push(&mut self, addr: usize) -> Freed {
        self.settle();
        let (k, live) = match self.out_slot(addr) {
            Some(k) => (k, self.slots[k].expect("an out slot has its block").live),
            None => {
                let Some(live) = self.live.remove(&addr) else {
                    return Freed::NotHere(Some(self.index));
                };
                let Some(k) = self.free_slot() else {
                    // The device makes room, under its lock (`evict_for`).
                    return Freed::Full(Slotted { addr, live });
                };
                self.slots[k] = Some(Slotted { addr, live });
                (k, live)
            }
        };
        self.fill(k, live);
        Freed::Cached
    }

    /// [`Front::push`] when it needs neither the device nor an eviction:
    /// puts the lent block its user freed at `addr` in a slot and says so;
    /// otherwise changes nothing (not lent here, or every slot holds a
    /// cached block) and returns false.
    #[inline]
    fn try_push(&mut self, addr: usize) -> bool {
        self.settle();
        if let Some(k) = self.out_slot(addr) {
            let live = self.slots[k].expect("an out slot has its block").live;
            self.fill(k, live);
            return true;
        }
        if self.out == 0 && (!self.occupied & ALL) == 0 {
            return false;
        }
        let Some(live) = self.live.remove(&addr) else {
            return false;
        };
        let k = self.free_slot().expect("a free or out slot was seen");
        self.slots[k] = Some(Slotted { addr, live });
        self.fill(k, live);
        true
    }

    /// A slot to put a freed block in: an empty one, or one kept for a block
    /// its user holds (that block moves to the map); none when every slot
    /// holds a cached block.
    #[inline]
    fn free_slot(&mut self) -> Option<usize> {
        let free = !(self.occupied | self.out) & ALL;
        if free != 0 {
            return Some(free.trailing_zeros() as usize);
        }
        if self.out == 0 {
            return None;
        }
        let k = self.out.trailing_zeros() as usize;
        let s = self.slots[k].take().expect("an out slot has its block");
        self.live.insert(s.addr, s.live);
        self.out &= !(1 << k);
        Some(k)
    }

    /// Publishes slot `k`, which holds `live`, to the device.
    #[inline]
    fn fill(&mut self, k: usize, live: Live) {
        self.out &= !(1 << k);
        self.occupied |= 1 << k;
        publish(&self.shared.slots[k], live.block as u64 + 1);
        let c = self.shared.counters.of(live.pool);
        bump(&c.frees, 1);
        bump(&c.free_bytes, live.size as u64);
        bump(&c.free_requested, live.requested as u64);
    }

    /// Puts `freed`, a block its user freed, in the slot filled longest ago
    /// (round robin), whose block goes back to the device: that block, or
    /// `None` if the device had taken it already. Called under the device
    /// lock, so the device cannot take slots back meanwhile.
    fn evict_for(&mut self, freed: Slotted) -> Option<BlockId> {
        self.settle();
        let Slotted { addr, live } = freed;
        let (k, evicted) = match self.free_slot() {
            Some(k) => (k, None),
            None => {
                let k = self.evict_next;
                self.evict_next = (k + 1) % SLOTS;
                let taken = self.shared.slots[k].swap(EMPTY, Ordering::Acquire);
                self.clear(1 << k);
                (k, (taken != EMPTY).then(|| (taken - 1) as BlockId))
            }
        };
        self.slots[k] = Some(Slotted { addr, live });
        self.fill(k, live);
        evicted
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.retire(self);
        }
    }
}

/// A thread's caches, one per device allocator it used, with the
/// allocators' ids apart so that finding one reads one short array.
pub(crate) struct Fronts {
    ids: Vec<u64>,
    caches: Vec<Front>,
}

impl Fronts {
    pub(crate) const fn new() -> Self {
        Fronts {
            ids: Vec::new(),
            caches: Vec::new(),
        }
    }

    #[inline]
    fn position(&self, allocator: u64) -> Option<usize> {
        self.ids.iter().position(|&id| id == allocator)
    }

    /// Drops the caches of allocators that no longer exist.
    fn prune(&mut self) {
        let mut i = 0;
        while i < self.caches.len() {
            if self.caches[i].home.strong_count() == 0 {
                self.ids.swap_remove(i);
                self.caches.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn push(&mut self, front: Front) -> &mut Front {
        self.ids.push(front.allocator);
        self.caches.push(front);
        self.caches.last_mut().expect("just pushed")
    }
}

/// Runs `f` on this thread's cache for `allocator`, if it has one and
/// thread-local storage is usable (not while the thread ends).
#[inline]
fn with_front<R>(allocator: u64, f: impl FnOnce(&mut Front) -> Option<R>) -> Option<R> {
    ThreadState::with(|ts| with_front_in(ts, allocator, f)).flatten()
}

/// `with_front` on the thread state `ts`.
#[inline]
fn with_front_in<R>(
    ts: &ThreadState,
    allocator: u64,
    f: impl FnOnce(&mut Front) -> Option<R>,
) -> Option<R> {
    let mut fronts = ts.fronts.try_borrow_mut().ok()?;
    let i = fronts.position(allocator)?;
    f(&mut fronts.caches[i])
}

/// A block for `requested` bytes on `stream` from this thread's cache.
#[inline]
pub(crate) fn hit(allocator: u64, stream: Stream, requested: usize) -> Option<usize> {
    with_front(allocator, |front| front.pop(stream, requested))
}

/// `hit` with this thread's state `ts` at hand.
#[inline]
pub(crate) fn hit_in(
    ts: &ThreadState,
    allocator: u64,
    stream: Stream,
    requested: usize,
) -> Option<usize> {
    with_front_in(ts, allocator, |front| front.pop(stream, requested))
}

/// What this thread's cache did with a freed address.
pub(crate) enum Freed {
    /// It took the block into a slot.
    Cached,
    /// The block was the user's (the cache has forgotten it), but every
    /// slot holds a cached block: the device makes room (`evict_for`) or
    /// frees it.
    Full(Slotted),
    /// The address is not one this thread's cache lent (with the cache's
    /// key, if this thread has a cache).
    NotHere(Option<usize>),
}

/// Offers a freed address to this thread's cache.
#[inline]
pub(crate) fn free(allocator: u64, addr: usize) -> Freed {
    with_front(allocator, |front| Some(front.push(addr))).unwrap_or(Freed::NotHere(None))
}

/// Takes the freed `addr` into the cache (in this thread's state `ts`) of an allocator whose
/// key `mine` accepts, if that cache lent it and has a slot for it without
/// the device: whether it did (otherwise nothing changed, and the
/// allocator's `free` decides). The caller's allocators are usually the
/// only ones the thread has caches of, so this reads one or two caches.
#[inline]
pub(crate) fn free_cached_in(ts: &ThreadState, addr: usize, mine: impl Fn(u64) -> bool) -> bool {
    let Ok(mut fronts) = ts.fronts.try_borrow_mut() else {
        return false;
    };
    fronts
        .caches
        .iter_mut()
        .any(|front| mine(front.allocator) && front.try_push(addr))
}

/// Caches `freed` (from [`Freed::Full`]) in place of the slotted block
/// filled longest ago: the cache's key and that block, which the device
/// takes back; `None` if this thread's cache cannot be reached. Called
/// under the device lock.
pub(crate) fn evict_for(allocator: u64, freed: Slotted) -> Option<(usize, Option<BlockId>)> {
    with_front(allocator, |front| {
        Some((front.index, front.evict_for(freed)))
    })
}

/// Whether this thread's cache for `allocator` knows its user holds `addr`.
pub(crate) fn holds(allocator: u64, addr: usize) -> bool {
    with_front(allocator, |front| {
        front.settle();
        Some(front.holds(addr))
    })
    .unwrap_or(false)
}

/// This thread's cache key for `allocator`, if it has a cache.
pub(crate) fn index_of(allocator: u64) -> Option<usize> {
    with_front(allocator, |front| Some(front.index))
}

/// Lends `block` (at `addr`) to this thread's cache, making the cache if
/// needed (its shared part goes into the device's `registry`, and `home`
/// leads back to the device); returns the cache's key, or `None` when
/// this thread cannot have one now. Called under the device lock.
pub(crate) fn lend(
    allocator: u64,
    home: impl FnOnce() -> Weak<dyn Home>,
    registry: &mut slab::Slab<Arc<Shared>>,
    addr: usize,
    live: Live,
) -> Option<usize> {
    ThreadState::with(|ts| {
        let mut fronts = ts.fronts.try_borrow_mut().ok()?;
        let fronts = &mut *fronts;
        let front = match fronts.position(allocator) {
            Some(i) => &mut fronts.caches[i],
            None => {
                // Caches of dropped allocators go first.
                fronts.prune();
                let shared = Arc::new(Shared::new());
                let index = registry.insert(shared.clone());
                fronts.push(Front {
                    allocator,
                    index,
                    home: home(),
                    shared,
                    slots: [None; SLOTS],
                    occupied: 0,
                    out: 0,
                    live: HashMap::default(),
                    evict_next: 0,
                })
            }
        };
        // An address invalidated earlier may be lent again now.
        front.settle();
        front.live.insert(addr, live);
        Some(front.index)
    })
    .flatten()
}

/// A new allocator's key for thread caches.
pub(crate) fn next_allocator_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
