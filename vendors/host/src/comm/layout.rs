//! What lies where in a communicator's shared-memory segment.
//!
//! ```text
//! Header                      world size, joined ranks, pids, abort word,
//!                             probe addresses and direct-read verdicts
//! Counters x world            collective step counters of each rank
//! Counters x world^2          point-to-point counters of each channel src -> dst
//! slots x world x DEPTH       collective staging slots of each rank (chunk bytes each)
//! slots x world^2 x P2P_DEPTH ring of each point-to-point channel (p2p_chunk bytes each)
//! ```
//!
//! Every rank computes the same layout from the world size alone; the
//! header's layout word makes builds with other constants refuse to join.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8};

/// The most ranks a host-vendor communicator can have.
pub const MAX_WORLD: usize = 64;
/// Staging slots per rank for collectives (steps a rank may post ahead).
pub(crate) const DEPTH: usize = 2;
/// Slots in each point-to-point ring.
pub(crate) const P2P_DEPTH: usize = 2;
/// The largest collective slot; smaller for large worlds (see [`Layout::new`]).
pub(crate) const CHUNK_MAX: usize = 512 << 10;
/// The largest point-to-point slot.
pub(crate) const P2P_CHUNK_MAX: usize = 512 << 10;
/// Collective slots of all ranks together stay near this.
const COLL_BUDGET: usize = 16 << 20;
/// Point-to-point rings of all channels together stay near this.
const P2P_BUDGET: usize = 16 << 20;
const PAGE: usize = 4096;

/// Format and constants of the segment; a rank built differently refuses
/// to join instead of misreading the memory.
pub(crate) const LAYOUT_WORD: u64 = (0xD1B0 << 48)
    | (6 << 32)
    | ((DEPTH as u64) << 24)
    | ((P2P_DEPTH as u64) << 16)
    | ((CHUNK_MAX.trailing_zeros() as u64) << 8)
    | P2P_CHUNK_MAX.trailing_zeros() as u64;

/// A value alone on its cache line.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Line<T>(pub(crate) T);

/// The start of the segment. All zero when the segment is created, which
/// is a valid value of every field.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Header {
    /// [`LAYOUT_WORD`] once the first rank joined.
    pub(crate) layout: Line<AtomicU64>,
    /// The world size, set (0 -> n) by the first rank to join.
    pub(crate) world: Line<AtomicU32>,
    /// Bit r is set once rank r joined.
    pub(crate) joined: Line<AtomicU64>,
    /// 0, or `reason << 32 | (rank + 1)` of the first rank that gave up.
    pub(crate) abort: Line<AtomicU64>,
    /// Each rank's pid, set (0 -> pid) when it joins.
    pub(crate) pids: Line<[AtomicI32; MAX_WORLD]>,
    /// The address of a word in each rank's own memory holding a known
    /// value, set when it joins: peers in other processes read it once to
    /// learn whether they may read that rank's memory (see `direct.rs`).
    pub(crate) probe: Line<[AtomicU64; MAX_WORLD]>,
    /// Each rank's verdict on reading every peer's buffers directly: 0 not
    /// yet known, [`DIRECT_YES`] or [`DIRECT_NO`].
    pub(crate) direct: Line<[AtomicU8; MAX_WORLD]>,
    /// Each rank's device arena (`arena.rs`), set when it joins: its
    /// descriptor plus one (0: none), the file's inode and its size.
    pub(crate) arenas: Line<[[AtomicU64; 3]; MAX_WORLD]>,
    /// 1 while a rank may write into its peers' buffers (a direct
    /// all_reduce's push), else 0: a rank that gives up waits for its
    /// peers' to be 0 before its buffers can be reused (see `direct.rs`).
    pub(crate) pushing: Line<[AtomicU8; MAX_WORLD]>,
}

/// A rank's verdict: it can read every peer's memory.
pub(crate) const DIRECT_YES: u8 = 1;
/// A rank's verdict: it cannot (or must not) read some peer's memory.
pub(crate) const DIRECT_NO: u8 = 2;

/// Step counters of one rank (collectives) or one channel (point to point).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Counters {
    /// The last step whose slot is written (the writer stores it, Release).
    pub(crate) posted: Line<AtomicU64>,
    /// The last step the reader(s) finished with (Release).
    pub(crate) consumed: Line<AtomicU64>,
    /// Each slot's operation signature (see `desc.rs`), two words.
    pub(crate) sigs: Line<[[AtomicU64; 2]; DEPTH_MAX]>,
    /// Each slot's send and receive buffer addresses (collectives read
    /// directly, see `direct.rs`; unused by point to point).
    pub(crate) addrs: Line<[[AtomicU64; 2]; DEPTH_MAX]>,
    /// Each slot's send and receive buffer offsets in the rank's device
    /// arena, or [`NOT_IN_ARENA`].
    pub(crate) offsets: Line<[[AtomicU64; 2]; DEPTH_MAX]>,
}

/// An offset slot's value for a buffer outside the rank's arena.
pub(crate) const NOT_IN_ARENA: u64 = u64::MAX;

/// Signature entries per counter block (covers both depths).
const DEPTH_MAX: usize = if DEPTH > P2P_DEPTH { DEPTH } else { P2P_DEPTH };

const _: () = assert!(DEPTH_MAX * 16 <= 64, "signatures must fit one cache line");
const _: () = assert!(CHUNK_MAX.is_power_of_two() && P2P_CHUNK_MAX.is_power_of_two());
const _: () = assert!(MAX_WORLD <= u64::BITS as usize, "the joined set is a u64");

/// Offsets of everything in a segment for one world size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Ranks.
    pub(crate) world: usize,
    /// Bytes of one collective slot (a multiple of 4096).
    pub(crate) chunk: usize,
    /// Bytes of one point-to-point slot (a multiple of 4096).
    pub(crate) p2p_chunk: usize,
    coll_counters: usize,
    p2p_counters: usize,
    coll_slots: usize,
    p2p_slots: usize,
    /// Bytes of the whole segment.
    pub(crate) size: usize,
}

impl Layout {
    /// The layout for `world` ranks (`1..=MAX_WORLD`).
    pub(crate) fn new(world: usize) -> Layout {
        debug_assert!((1..=MAX_WORLD).contains(&world));
        let chunk = pow2_clamp(COLL_BUDGET / (world * DEPTH), 64 << 10, CHUNK_MAX);
        let p2p_chunk = pow2_clamp(
            P2P_BUDGET / (world * world * P2P_DEPTH),
            PAGE,
            P2P_CHUNK_MAX,
        );
        let counters = std::mem::size_of::<Counters>();
        let coll_counters = round_up(std::mem::size_of::<Header>(), PAGE);
        let p2p_counters = coll_counters + world * counters;
        let coll_slots = round_up(p2p_counters + world * world * counters, PAGE);
        let p2p_slots = coll_slots + world * DEPTH * chunk;
        let size = p2p_slots + world * world * P2P_DEPTH * p2p_chunk;
        Layout {
            world,
            chunk,
            p2p_chunk,
            coll_counters,
            p2p_counters,
            coll_slots,
            p2p_slots,
            size,
        }
    }

    /// Offset of rank `rank`'s collective counters.
    pub(crate) fn coll_counters(&self, rank: usize) -> usize {
        self.coll_counters + rank * std::mem::size_of::<Counters>()
    }

    /// Offset of rank `rank`'s collective slot for `step`.
    pub(crate) fn coll_slot(&self, rank: usize, step: u64) -> usize {
        self.coll_slots + (rank * DEPTH + (step % DEPTH as u64) as usize) * self.chunk
    }

    /// Index of the channel from `src` to `dst`.
    pub(crate) fn channel(&self, src: usize, dst: usize) -> usize {
        src * self.world + dst
    }

    /// Offset of channel `channel`'s counters.
    pub(crate) fn p2p_counters(&self, channel: usize) -> usize {
        self.p2p_counters + channel * std::mem::size_of::<Counters>()
    }

    /// Offset of channel `channel`'s slot for `step`.
    pub(crate) fn p2p_slot(&self, channel: usize, step: u64) -> usize {
        self.p2p_slots + (channel * P2P_DEPTH + (step % P2P_DEPTH as u64) as usize) * self.p2p_chunk
    }
}

/// The power of two at or below `n`, clamped to `lo..=hi` (powers of two).
fn pow2_clamp(n: usize, lo: usize, hi: usize) -> usize {
    let below = if n == 0 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    };
    below.clamp(lo, hi)
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_stay_bounded_and_aligned() {
        for world in 1..=MAX_WORLD {
            let l = Layout::new(world);
            assert_eq!(l.chunk % PAGE, 0);
            assert_eq!(l.p2p_chunk % PAGE, 0);
            assert_eq!(l.coll_slot(0, 0) % PAGE, 0);
            assert_eq!(l.p2p_slot(0, 0) % PAGE, 0);
            assert!(l.coll_counters(world - 1) < l.p2p_counters(0));
            assert!(l.p2p_counters(world * world - 1) < l.coll_slot(0, 0));
            assert_eq!(l.p2p_slot(world * world - 1, 1) + l.p2p_chunk, l.size);
            assert!(l.size <= 64 << 20, "world {world}: {} bytes", l.size);
        }
        assert_eq!(Layout::new(2).chunk, CHUNK_MAX);
        assert_eq!(std::mem::align_of::<Counters>(), 64);
    }
}
