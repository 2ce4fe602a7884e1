//! `BS`: whole blocks cached in size bins, never split or merged: the
//! shortest hit path, at the cost of memory. A request whose bin is empty
//! takes a cached block of up to twice its size before it asks the vendor.

use dipu_stream::Stream;

use crate::arena::{Arena, BlockId};
use crate::policy::Policy;
use crate::Algorithm;

/// Steps between two powers of two for device blocks (a request's bin
/// wastes at most a sixteenth).
const STEPS: usize = 16;
/// Steps between two powers of two for pinned host blocks (a quarter):
/// pinning is slow, so blocks are shared by more sizes.
pub(crate) const HOST_STEPS: usize = 4;
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

/// `bytes` rounded up to its device bin: a multiple of a sixteenth of its
/// power of two, at least 512 bytes.
pub(crate) fn bin_size(bytes: usize) -> usize {
    bin_size_in(bytes, STEPS)
}

/// `bytes` rounded up to a multiple of `1/steps` of its power of two, at
/// least 512 bytes.
pub(crate) fn bin_size_in(bytes: usize, steps: usize) -> usize {
    if bytes <= MIN_BLOCK {
        return MIN_BLOCK;
    }
    let floor = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
    let step = floor / steps;
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
        let bins = self.bins_of(stream)?;
        let own = bin_index(size);
        if let Some(block) = bins[own].pop() {
            return Some(block);
        }
        // The smallest cached block of at most twice the size (the bins of
        // the next power of two) rather than a new one from the vendor.
        let last = (own + STEPS).min(bins.len() - 1);
        bins[own + 1..=last].iter_mut().find_map(Vec::pop)
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
}

#[cfg(test)]
mod tests {
    use super::{bin_index, bin_size, bin_size_in, BINS, HOST_STEPS};

    #[test]
    fn device_bins_waste_at_most_a_sixteenth() {
        assert_eq!(bin_size(1), 512);
        assert_eq!(bin_size(513), 544);
        assert_eq!(bin_size(4096), 4096);
        assert_eq!(bin_size(4097), 4352);
        // 49 MiB (resnet18's first activation) in the 2 MiB steps of 32 MiB.
        assert_eq!(bin_size(49 << 20), 50 << 20);
        for bytes in [700usize, 3000, 1 << 20 | 1, 77_777_777] {
            let b = bin_size(bytes);
            assert!(b >= bytes && (b - bytes) * 16 <= b, "{bytes} -> {b}");
        }
    }

    #[test]
    fn host_bins_waste_at_most_a_quarter() {
        assert_eq!(bin_size_in(1, HOST_STEPS), 512);
        assert_eq!(bin_size_in(513, HOST_STEPS), 640);
        assert_eq!(bin_size_in(4097, HOST_STEPS), 5120);
        for bytes in [700usize, 3000, 1 << 20 | 1, 77_777_777] {
            let b = bin_size_in(bytes, HOST_STEPS);
            assert!(b >= bytes && (b - bytes) * 4 <= b, "{bytes} -> {b}");
            assert!(
                b >= bin_size(bytes),
                "host bins are no finer than device bins"
            );
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
