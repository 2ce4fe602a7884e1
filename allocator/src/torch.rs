//! `TORCH`: PyTorch's caching policy, so users get the behaviour they know.
//! Requests round up to 512 bytes (or by `roundup_power2_divisions`);
//! requests up to 1 MiB share 2 MiB segments of the small pool, requests
//! under 10 MiB get 20 MiB segments and larger ones are rounded to 2 MiB,
//! in the large pool. Free blocks are reused per stream, smallest fit
//! first (by size, then address). Small blocks split when at least 512
//! bytes remain, large ones when more than 1 MiB remains and the block is
//! below `max_split_size`; blocks of `max_split_size` or more serve only
//! requests that large, and only within 20 MiB of the request.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use dipu_stream::Stream;

use crate::arena::{Arena, BlockId};
use crate::policy::Policy;
use crate::{Algorithm, AllocatorConfig};

const MIN_BLOCK: usize = 512;
const SMALL_REQUEST: usize = 1 << 20;
const SMALL_SEGMENT: usize = 2 << 20;
const MIN_LARGE_ALLOC: usize = 10 << 20;
const LARGE_BUFFER: usize = 20 << 20;
const ROUND_LARGE: usize = 2 << 20;

type Pool = HashMap<Stream, BTreeSet<(usize, usize, BlockId)>>;

/// PyTorch's policy.
pub(crate) struct TorchPolicy {
    small: Pool,
    large: Pool,
    max_split: usize,
    config: AllocatorConfig,
}

impl TorchPolicy {
    pub(crate) fn new(config: &AllocatorConfig) -> Self {
        TorchPolicy {
            small: HashMap::default(),
            large: HashMap::default(),
            max_split: config.max_split_size.unwrap_or(usize::MAX),
            config: config.clone(),
        }
    }

    fn pool_of(&mut self, arena: &Arena, block: BlockId) -> &mut Pool {
        if arena.segments[arena.blocks[block].segment].size == SMALL_SEGMENT {
            &mut self.small
        } else {
            &mut self.large
        }
    }
}

impl Policy for TorchPolicy {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Torch
    }

    fn round(&self, bytes: usize) -> usize {
        if bytes < MIN_BLOCK {
            return MIN_BLOCK;
        }
        let rounded = self.config.round_power2_divisions(bytes);
        rounded.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }

    fn segment_size(&self, size: usize) -> usize {
        if size <= SMALL_REQUEST {
            SMALL_SEGMENT
        } else if size < MIN_LARGE_ALLOC {
            LARGE_BUFFER
        } else {
            size.div_ceil(ROUND_LARGE) * ROUND_LARGE
        }
    }

    fn take(&mut self, _arena: &Arena, size: usize, stream: Stream) -> Option<BlockId> {
        let pool = if size <= SMALL_REQUEST {
            &mut self.small
        } else {
            &mut self.large
        };
        let free = pool.get_mut(&stream)?;
        let entry = *free.range((size, 0, 0)..).next()?;
        let block_size = entry.0;
        if size < self.max_split && block_size >= self.max_split {
            return None;
        }
        if size >= self.max_split && block_size >= size + LARGE_BUFFER {
            return None;
        }
        free.remove(&entry);
        Some(entry.2)
    }

    fn insert(&mut self, arena: &Arena, block: BlockId) {
        let key = (arena.blocks[block].size, arena.blocks[block].addr, block);
        let stream = arena.stream_of(block);
        self.pool_of(arena, block)
            .entry(stream)
            .or_default()
            .insert(key);
    }

    fn remove(&mut self, arena: &Arena, block: BlockId) {
        let key = (arena.blocks[block].size, arena.blocks[block].addr, block);
        let stream = arena.stream_of(block);
        if let Some(free) = self.pool_of(arena, block).get_mut(&stream) {
            free.remove(&key);
        }
    }

    fn should_split(&self, block_size: usize, size: usize) -> bool {
        let remaining = block_size - size;
        if size <= SMALL_REQUEST && block_size <= SMALL_SEGMENT {
            remaining >= MIN_BLOCK
        } else {
            size < self.max_split && remaining > SMALL_REQUEST
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_pytorch() {
        let p = TorchPolicy::new(&AllocatorConfig::default());
        assert_eq!(p.round(1), 512);
        assert_eq!(p.round(513), 1024);
        assert_eq!(p.segment_size(1 << 20), 2 << 20);
        assert_eq!(p.segment_size((1 << 20) + 512), 20 << 20);
        assert_eq!(p.segment_size(10 << 20), 10 << 20);
        assert_eq!(p.segment_size((10 << 20) + 512), 12 << 20);
        assert!(p.should_split(2 << 20, 1 << 20));
        assert!(
            !p.should_split(20 << 20, (19 << 20) + 512),
            "large keeps a remainder of 1 MiB or less"
        );
        let limited = TorchPolicy::new(&AllocatorConfig::parse("max_split_size_mb:64").unwrap());
        assert!(
            !limited.should_split(100 << 20, 70 << 20),
            "requests over max_split_size are not split"
        );
    }
}
