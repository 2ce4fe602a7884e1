//! `BF`: best fit over free blocks kept per stream in log-linear size bins,
//! with an occupancy bitmap so the next non-empty bin is found in constant
//! time; blocks are split on allocation and merged with free neighbours on
//! free.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use dipu_stream::Stream;

use crate::arena::{Arena, BlockId};
use crate::policy::Policy;
use crate::{Algorithm, AllocatorConfig};

/// Sub-bins per power of two.
const SUB_BITS: u32 = 3;
const SUBS: usize = 1 << SUB_BITS;
/// Bins: 64 powers of two × 8 steps.
const BINS: usize = 64 * SUBS;
const WORDS: usize = BINS / 64;
/// Sizes are multiples of this.
const ALIGN: usize = 512;
/// Requests up to this size share small segments.
const SMALL: usize = 1 << 20;
const SMALL_SEGMENT: usize = 2 << 20;
const LARGE_ROUND: usize = 2 << 20;

/// The bin of a block of `size`: its power of two and the step below it.
fn bin_of(size: usize) -> usize {
    let log = (usize::BITS - 1 - size.leading_zeros()) as usize;
    let sub = if log >= SUB_BITS as usize {
        (size >> (log - SUB_BITS as usize)) & (SUBS - 1)
    } else {
        0
    };
    log * SUBS + sub
}

/// A free block's place in its bin: the smallest first; among equal
/// sizes, blocks of the most recently made segment first, then by address
/// within the segment. The order never depends on where the vendor put a
/// segment, so a replay gives the same result wherever memory lands.
type Key = (usize, Reverse<u64>, usize, BlockId);

/// The bin key of a free block.
fn key(arena: &Arena, block: BlockId) -> Key {
    let b = &arena.blocks[block];
    (
        b.size,
        Reverse(arena.segments[b.segment].born),
        b.addr,
        block,
    )
}

/// One stream's free blocks.
struct StreamBins {
    occupied: [u64; WORDS],
    bins: Vec<BTreeSet<Key>>,
}

impl StreamBins {
    fn new() -> Self {
        StreamBins {
            occupied: [0; WORDS],
            bins: (0..BINS).map(|_| BTreeSet::new()).collect(),
        }
    }

    /// The first non-empty bin at or after `from`.
    fn next_occupied(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.occupied[word] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            if word == WORDS {
                return None;
            }
            bits = self.occupied[word];
        }
    }

    fn mark(&mut self, bin: usize) {
        if self.bins[bin].is_empty() {
            self.occupied[bin / 64] &= !(1 << (bin % 64));
        } else {
            self.occupied[bin / 64] |= 1 << (bin % 64);
        }
    }
}

/// The best-fit policy.
pub(crate) struct BestFit {
    streams: HashMap<Stream, StreamBins>,
    max_split: usize,
}

impl BestFit {
    pub(crate) fn new(config: &AllocatorConfig) -> Self {
        BestFit {
            streams: HashMap::default(),
            max_split: config.max_split_size.unwrap_or(usize::MAX),
        }
    }
}

impl Policy for BestFit {
    fn algorithm(&self) -> Algorithm {
        Algorithm::BestFit
    }

    fn round(&self, bytes: usize) -> usize {
        bytes.max(1).div_ceil(ALIGN) * ALIGN
    }

    fn segment_size(&self, size: usize) -> usize {
        if size <= SMALL {
            SMALL_SEGMENT
        } else {
            size.div_ceil(LARGE_ROUND) * LARGE_ROUND
        }
    }

    fn take(&mut self, _arena: &Arena, size: usize, stream: Stream) -> Option<BlockId> {
        let bins = self.streams.get_mut(&stream)?;
        let first = bin_of(size);
        // Best fit inside the request's own bin, else the smallest block of
        // the next occupied bin (every block there is larger than `size`).
        let in_own = bins.bins[first]
            .range((size, Reverse(u64::MAX), 0, 0)..)
            .next()
            .copied();
        let found = match in_own {
            Some(entry) => (first, entry),
            None => {
                let bin = bins.next_occupied(first + 1)?;
                (bin, *bins.bins[bin].first()?)
            }
        };
        let (bin, entry) = found;
        if size < self.max_split && entry.0 >= self.max_split && entry.0 > size {
            return None; // keep oversize blocks whole for oversize requests
        }
        bins.bins[bin].remove(&entry);
        bins.mark(bin);
        Some(entry.3)
    }

    fn insert(&mut self, arena: &Arena, block: BlockId) {
        let key = key(arena, block);
        let bins = self
            .streams
            .entry(arena.stream_of(block))
            .or_insert_with(StreamBins::new);
        let bin = bin_of(key.0);
        bins.bins[bin].insert(key);
        bins.mark(bin);
    }

    fn remove(&mut self, arena: &Arena, block: BlockId) {
        let key = key(arena, block);
        if let Some(bins) = self.streams.get_mut(&arena.stream_of(block)) {
            let bin = bin_of(key.0);
            bins.bins[bin].remove(&key);
            bins.mark(bin);
        }
    }

    fn should_split(&self, block_size: usize, size: usize) -> bool {
        block_size - size >= ALIGN && block_size < self.max_split
    }

    fn splits_from_end(&self, size: usize) -> bool {
        size > SMALL
    }

    fn release_before_grow(&self) -> bool {
        true
    }

    fn parks_frees(&self) -> bool {
        true
    }

    fn thread_cached(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_monotonic_and_fine() {
        let mut last = 0;
        for size in (ALIGN..64 << 20).step_by(ALIGN * 7) {
            let bin = bin_of(size);
            assert!(bin >= last, "bin of {size} went down");
            last = bin;
        }
        assert_ne!(
            bin_of(1 << 20),
            bin_of((1 << 20) + (1 << 17)),
            "eight steps per power of two"
        );
        assert!(bin_of(usize::MAX) < BINS);
    }

    #[test]
    fn next_occupied_finds_the_first_set_bit_across_words() {
        let mut b = StreamBins::new();
        assert_eq!(b.next_occupied(0), None);
        b.bins[130].insert((1, Reverse(1), 1, 1));
        b.mark(130);
        assert_eq!(b.next_occupied(0), Some(130));
        assert_eq!(b.next_occupied(130), Some(130));
        assert_eq!(b.next_occupied(131), None);
        b.bins[130].clear();
        b.mark(130);
        assert_eq!(b.next_occupied(0), None);
    }
}
