//! What distinguishes one caching algorithm from another: rounding,
//! segment sizes, where free blocks are indexed and which one a request
//! gets, and when to split. The bookkeeping is shared (`caching.rs`).

use dipu_stream::Stream;

use crate::arena::{Arena, BlockId};
use crate::{Algorithm, Pool};

/// A caching algorithm's decisions.
pub(crate) trait Policy: Send + 'static {
    /// Which algorithm this is.
    fn algorithm(&self) -> Algorithm;

    /// The block size that serves a request of `bytes` (≥ `bytes`, > 0).
    fn round(&self, bytes: usize) -> usize;

    /// The size of a new segment for a block of `size`.
    fn segment_size(&self, size: usize) -> usize;

    /// Takes the free block that should serve a block of `size` on
    /// `stream` out of the index, if one is cached.
    fn take(&mut self, arena: &Arena, size: usize, stream: Stream) -> Option<BlockId>;

    /// Puts a free block into the index.
    fn insert(&mut self, arena: &Arena, block: BlockId);

    /// Removes a free block from the index (to merge or release it).
    fn remove(&mut self, arena: &Arena, block: BlockId);

    /// Whether a free block of `block_size` serving `size` is split, the
    /// rest staying cached.
    fn should_split(&self, block_size: usize, size: usize) -> bool;

    /// Whether a block of `size` is cut from the end of the free block it
    /// splits rather than from its start: large blocks at the top of a
    /// segment and small ones at the bottom, so that the small blocks,
    /// which live long here, do not pin holes between large ones.
    fn splits_from_end(&self, _size: usize) -> bool {
        false
    }

    /// Whether a freed block merges with its free neighbours.
    fn merges(&self) -> bool {
        true
    }

    /// Whether freed blocks are parked whole for an exact-size reuse (no
    /// split, merge or index work on the hit path) and merged only before
    /// the allocator grows, so growth sees the same merged free space.
    fn parks_frees(&self) -> bool {
        false
    }

    /// Whether each thread keeps the blocks it freed for its own next
    /// requests of the same size and stream, without the device lock.
    fn thread_cached(&self) -> bool {
        false
    }

    /// Whether blocks are split (expandable segments need it).
    fn splits(&self) -> bool {
        true
    }

    /// Whether a miss first gives cached, wholly free segments back to the
    /// vendor (they could not serve the request) before growing, trading
    /// vendor calls for a lower peak of reserved memory.
    fn release_before_grow(&self) -> bool {
        false
    }

    /// The pool of a new segment made for a block of `size` (its blocks
    /// count there in the statistics): small for at most 1 MiB, as CUDA's
    /// small pool, unless the policy says otherwise.
    fn segment_pool(&self, size: usize) -> Pool {
        Pool::for_request(size)
    }

    /// The name snapshots give a segment of `pool`.
    fn pool_name(&self, pool: Pool) -> &'static str {
        pool.as_str()
    }
}
