//! Segments and the blocks they are split into, with split and merge.
//! The bookkeeping shared by every caching policy; the policy decides.

use rustc_hash::FxHashMap as HashMap;

use dipu_stream::Stream;
use slab::Slab;

use crate::stats::Pool;

/// Index of a block in the arena.
pub(crate) type BlockId = usize;
/// Index of a segment in the arena.
pub(crate) type SegmentId = usize;

/// What a block is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// Cached and reusable (in the policy's index).
    Free,
    /// Handed out.
    Allocated,
    /// Freed by its user; waiting for other streams before reuse.
    Pending,
    /// Freed and reusable for the same size and stream, kept whole (not
    /// merged or indexed) until the allocator next needs to grow.
    Parked,
    /// Lent to the thread cache with this key: its thread's user holds it,
    /// or it waits in one of that cache's slots.
    Lent(usize),
}

/// A piece of a segment.
#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) requested: usize,
    pub(crate) segment: SegmentId,
    pub(crate) prev: Option<BlockId>,
    pub(crate) next: Option<BlockId>,
    pub(crate) used: Use,
    /// Its segment's pool (copied here so statistics need no segment lookup).
    pub(crate) pool: Pool,
    /// Streams other than the segment's that used the block (`record_stream`).
    pub(crate) other_streams: Vec<Stream>,
}

/// Memory from one vendor allocation, serving one stream.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) stream: Stream,
    pub(crate) first: BlockId,
    pub(crate) blocks: usize,
    /// When the segment was made, for releasing the oldest first.
    pub(crate) born: u64,
    /// The pool its blocks count in.
    pub(crate) pool: Pool,
}

/// Every segment and block of one device allocator.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    pub(crate) blocks: Slab<Block>,
    pub(crate) segments: Slab<Segment>,
    /// Allocated and pending blocks by address.
    pub(crate) in_use: HashMap<usize, BlockId>,
    /// Segments by start address.
    by_base: HashMap<usize, SegmentId>,
    clock: u64,
}

impl Arena {
    /// Adds a segment `[addr, addr + size)` of `pool` for `stream`; returns its one free block.
    pub(crate) fn add_segment(
        &mut self,
        addr: usize,
        size: usize,
        stream: Stream,
        pool: Pool,
    ) -> BlockId {
        self.clock += 1;
        let segment = self.segments.insert(Segment {
            addr,
            size,
            stream,
            first: 0,
            blocks: 1,
            born: self.clock,
            pool,
        });
        let block = self.blocks.insert(Block {
            addr,
            size,
            requested: 0,
            segment,
            prev: None,
            next: None,
            used: Use::Free,
            pool,
            other_streams: Vec::new(),
        });
        self.segments[segment].first = block;
        self.by_base.insert(addr, segment);
        block
    }

    /// Removes the segment of `block`, which must be its only block; returns (addr, size).
    pub(crate) fn remove_segment(&mut self, block: BlockId) -> (usize, usize) {
        let b = self.blocks.remove(block);
        debug_assert!(b.prev.is_none() && b.next.is_none(), "segment still split");
        let s = self.segments.remove(b.segment);
        self.by_base.remove(&s.addr);
        (s.addr, s.size)
    }

    /// The block holding the byte at `addr`, found through the segment
    /// starting at `base` (a walk along its blocks).
    pub(crate) fn block_at(&self, base: usize, addr: usize) -> Option<BlockId> {
        let mut at = Some(self.segments[*self.by_base.get(&base)?].first);
        while let Some(id) = at {
            let b = &self.blocks[id];
            if addr < b.addr {
                return None;
            }
            if addr - b.addr < b.size {
                return Some(id);
            }
            at = b.next;
        }
        None
    }

    /// Whether `block` spans its whole segment.
    pub(crate) fn is_whole_segment(&self, block: BlockId) -> bool {
        let b = &self.blocks[block];
        b.prev.is_none() && b.next.is_none()
    }

    /// The stream `block`'s segment serves.
    pub(crate) fn stream_of(&self, block: BlockId) -> Stream {
        self.segments[self.blocks[block].segment].stream
    }

    /// Splits a free `block` so it keeps its first `size` bytes; returns the
    /// new free block holding the rest.
    pub(crate) fn split(&mut self, block: BlockId, size: usize) -> BlockId {
        let (addr, old_size, segment, next, pool) = {
            let b = &self.blocks[block];
            debug_assert!(size > 0 && size < b.size);
            (b.addr, b.size, b.segment, b.next, b.pool)
        };
        let rest = self.blocks.insert(Block {
            addr: addr + size,
            size: old_size - size,
            requested: 0,
            segment,
            prev: Some(block),
            next,
            used: Use::Free,
            pool,
            other_streams: Vec::new(),
        });
        if let Some(n) = next {
            self.blocks[n].prev = Some(rest);
        }
        let b = &mut self.blocks[block];
        b.size = size;
        b.next = Some(rest);
        self.segments[segment].blocks += 1;
        rest
    }

    /// Free neighbours of `block` (both must leave the policy's index before a merge).
    pub(crate) fn free_neighbours(&self, block: BlockId) -> [Option<BlockId>; 2] {
        let b = &self.blocks[block];
        let free = |n: Option<BlockId>| n.filter(|&n| self.blocks[n].used == Use::Free);
        [free(b.prev), free(b.next)]
    }

    /// Merges `block` with its neighbour `other` (adjacent, both free);
    /// returns the surviving block.
    pub(crate) fn merge(&mut self, block: BlockId, other: BlockId) -> BlockId {
        let (first, second) = if self.blocks[other].addr < self.blocks[block].addr {
            (other, block)
        } else {
            (block, other)
        };
        let gone = self.blocks.remove(second);
        debug_assert_eq!(self.blocks[first].addr + self.blocks[first].size, gone.addr);
        let f = &mut self.blocks[first];
        f.size += gone.size;
        f.next = gone.next;
        if let Some(n) = gone.next {
            self.blocks[n].prev = Some(first);
        }
        self.segments[gone.segment].blocks -= 1;
        first
    }
}
