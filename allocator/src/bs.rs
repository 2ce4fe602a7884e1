//! `BS`: whole blocks cached in size bins, never split or merged: the
//! shortest hit path, at the cost of memory.

use rustc_hash::FxHashMap as HashMap;

use dipu_stream::Stream;

use crate::arena::{Arena, BlockId};
use crate::policy::Policy;
use crate::Algorithm;

/// Steps between two powers of two (a request wastes at most a quarter).
const STEPS: usize = 4;
/// The smallest block.
const MIN_BLOCK: usize = 512;

/// Free blocks by (stream, bin size).
pub(crate) struct BinSize {
    bins: HashMap<(Stream, usize), Vec<BlockId>>,
}

impl BinSize {
    pub(crate) fn new() -> Self {
        BinSize {
            bins: HashMap::default(),
        }
    }
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

    fn take(&mut self, _arena: &Arena, size: usize, stream: Stream) -> Option<BlockId> {
        self.bins.get_mut(&(stream, size))?.pop()
    }

    fn insert(&mut self, arena: &Arena, block: BlockId) {
        let key = (arena.stream_of(block), arena.blocks[block].size);
        self.bins.entry(key).or_default().push(block);
    }

    fn remove(&mut self, arena: &Arena, block: BlockId) {
        let key = (arena.stream_of(block), arena.blocks[block].size);
        if let Some(bin) = self.bins.get_mut(&key) {
            bin.retain(|&b| b != block);
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

    fn pool_name(&self, _size: usize) -> &'static str {
        "bin"
    }
}

#[cfg(test)]
mod tests {
    use super::bin_size;

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
}
