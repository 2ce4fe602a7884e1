//! `BS`: whole blocks cached in size bins, never split or merged: the
//! shortest hit path, at the cost of memory.

use dipu_stream::Stream;

use crate::arena::{Arena, BlockId};
use crate::policy::Policy;
use crate::Algorithm;

/// Steps between two powers of two (a request wastes at most a quarter).
const STEPS: usize = 4;
/// The smallest block.
const MIN_BLOCK: usize = 512;

/// Bins: sizes 512 B to 2^63 B, [`STEPS`] per power of two.
const BINS: usize = (usize::BITS as usize - MIN_BLOCK.trailing_zeros() as usize) * STEPS;

/// Free blocks by stream, then by bin (a bin holds blocks of one size).
pub(crate) struct BinSize {
    /// A device has a few streams: a linear search over them is cheaper
    /// than hashing a stream on every call.
    streams: Vec<(Stream, Box<[Vec<BlockId>]>)>,
}

impl BinSize {
    pub(crate) fn new() -> Self {
        BinSize {
            streams: Vec::new(),
        }
    }

    /// `stream`'s bins, if it has any.
    #[inline]
    fn bins_of(&mut self, stream: Stream) -> Option<&mut [Vec<BlockId>]> {
        self.streams
            .iter_mut()
            .find(|(s, _)| *s == stream)
            .map(|(_, bins)| &mut bins[..])
    }
}

/// The bin of a size [`bin_size`] returned.
#[inline]
fn bin_index(size: usize) -> usize {
    let log = (usize::BITS - 1 - size.leading_zeros()) as usize;
    let step = (size >> (log - STEPS.trailing_zeros() as usize)) & (STEPS - 1);
    (log - MIN_BLOCK.trailing_zeros() as usize) * STEPS + step
}

/// `bytes` rounded up to its bin: a multiple of a quarter of its power of two.
pub(crate) fn bin_size(bytes: usize) -> usize {
    if bytes <= MIN_BLOCK {
        return MIN_BLOCK;
    }
    let floor = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
    let step = floor / STEPS;
    bytes.div_ceil(step) * step
}

impl Policy for BinSize {
    fn algorithm(&self) -> Algorithm {
        Algorithm::BinSize
    }

    fn round(&self, bytes: usize) -> usize {
        bin_size(bytes)
    }

    fn segment_size(&self, size: usize) -> usize {
        size
    }

    #[inline]
    fn take(&mut self, _arena: &Arena, size: usize, stream: Stream) -> Option<BlockId> {
        self.bins_of(stream)?[bin_index(size)].pop()
    }

    #[inline]
    fn insert(&mut self, arena: &Arena, block: BlockId) {
        let stream = arena.stream_of(block);
        let bin = bin_index(arena.blocks[block].size);
        let bins = match self.streams.iter().position(|(s, _)| *s == stream) {
            Some(i) => &mut self.streams[i].1,
            None => {
                self.streams
                    .push((stream, (0..BINS).map(|_| Vec::new()).collect()));
                &mut self.streams.last_mut().expect("just pushed").1
            }
        };
        bins[bin].push(block);
    }

    fn remove(&mut self, arena: &Arena, block: BlockId) {
        let bin = bin_index(arena.blocks[block].size);
        if let Some(bins) = self.bins_of(arena.stream_of(block)) {
            bins[bin].retain(|&b| b != block);
        }
    }

    fn should_split(&self, _block_size: usize, _size: usize) -> bool {
        false
    }

    fn merges(&self) -> bool {
        false
    }

    fn splits(&self) -> bool {
        false
    }

    fn thread_cached(&self) -> bool {
        true
    }

    fn pool_name(&self, _size: usize) -> &'static str {
        "bin"
    }
}

#[cfg(test)]
mod tests {
    use super::{bin_index, bin_size, BINS};

    #[test]
    fn bins_waste_at_most_a_quarter() {
        assert_eq!(bin_size(1), 512);
        assert_eq!(bin_size(513), 640);
        assert_eq!(bin_size(4096), 4096);
        assert_eq!(bin_size(4097), 5120);
        assert_eq!(
            bin_size(51_380_224),
            51_380_224 / (1 << 23) * (1 << 23) + (1 << 23)
        );
        for bytes in [700usize, 3000, 1 << 20 | 1, 77_777_777] {
            let b = bin_size(bytes);
            assert!(b >= bytes && (b - bytes) * 4 <= b, "{bytes} -> {b}");
        }
    }

    #[test]
    fn every_bin_size_has_its_own_index() {
        let mut last = None;
        let mut bytes = 1usize;
        while bytes < 1 << 40 {
            let size = bin_size(bytes);
            let index = bin_index(size);
            assert!(index < BINS);
            match last {
                Some((s, i)) if s == size => assert_eq!(i, index),
                Some((_, i)) => assert_eq!(index, i + 1, "{size} follows the last bin"),
                None => assert_eq!(index, 0),
            }
            last = Some((size, index));
            bytes = size + 1;
        }
        assert_eq!(bin_index(bin_size(usize::MAX / 2)), BINS - super::STEPS);
    }
}
