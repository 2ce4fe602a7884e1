//! Which device each address range reserved from the vendor belongs to:
//! the segments of a set of device allocators (for RAW, each allocation),
//! readable without a lock. Written only when a segment is reserved or
//! given back; read to route a pointer to its device's allocator, whose
//! own block map then says what the pointer is.

use std::sync::Arc;

#[cfg(not(loom))]
use arc_swap::ArcSwap;
#[cfg(loom)]
use dipu_stream::sync::Mutex;

/// An address range reserved from one device's vendor memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRange {
    /// The first address.
    pub base: usize,
    /// Its length in bytes.
    pub size: usize,
    /// The device.
    pub device: i32,
}

impl SegmentRange {
    /// Whether the byte at `addr` lies in the range.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr - self.base < self.size
    }
}

/// The reserved ranges of a set of device allocators, by address: reads
/// take a snapshot without a lock (an `ArcSwap` load), writes copy it.
#[derive(Debug, Default)]
pub struct SegmentMap {
    #[cfg(not(loom))]
    ranges: ArcSwap<Vec<SegmentRange>>,
    #[cfg(loom)]
    ranges: Mutex<Arc<Vec<SegmentRange>>>,
}

impl SegmentMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The range holding the byte at `addr`, if any.
    #[inline]
    pub fn find(&self, addr: usize) -> Option<SegmentRange> {
        let ranges = self.snapshot();
        let after = ranges.partition_point(|r| r.base <= addr);
        let r = *ranges.get(after.checked_sub(1)?)?;
        r.contains(addr).then_some(r)
    }

    /// Every range, by address.
    pub fn ranges(&self) -> Vec<SegmentRange> {
        self.snapshot().to_vec()
    }

    #[cfg(not(loom))]
    #[inline]
    fn snapshot(&self) -> arc_swap::Guard<Arc<Vec<SegmentRange>>> {
        self.ranges.load()
    }

    #[cfg(loom)]
    fn snapshot(&self) -> Arc<Vec<SegmentRange>> {
        Arc::clone(&self.ranges.lock())
    }

    /// Applies `change` to a copy of the ranges and publishes it.
    fn update(&self, change: impl Fn(&mut Vec<SegmentRange>)) {
        #[cfg(not(loom))]
        self.ranges.rcu(|old| {
            let mut new = Vec::clone(old);
            change(&mut new);
            new
        });
        #[cfg(loom)]
        {
            let mut ranges = self.ranges.lock();
            let mut new = Vec::clone(&ranges);
            change(&mut new);
            *ranges = Arc::new(new);
        }
    }

    /// Records a range just reserved (before any of it is handed out).
    pub(crate) fn insert(&self, range: SegmentRange) {
        self.update(|v| {
            let at = v.partition_point(|r| r.base < range.base);
            v.insert(at, range);
        });
    }

    /// Forgets the range starting at `base` (before it goes back to the
    /// vendor, which may hand it to another device next).
    pub(crate) fn remove(&self, base: usize) {
        self.update(|v| v.retain(|r| r.base != base));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn finds_the_range_holding_an_address() {
        let map = SegmentMap::new();
        let r = |base, size, device| SegmentRange { base, size, device };
        map.insert(r(0x3000, 0x1000, 1));
        map.insert(r(0x1000, 0x1000, 0));
        map.insert(r(0x2000, 0x800, 2));
        assert_eq!(map.find(0xfff), None);
        assert_eq!(map.find(0x1000).map(|r| r.device), Some(0));
        assert_eq!(map.find(0x1fff).map(|r| r.device), Some(0));
        assert_eq!(map.find(0x27ff).map(|r| r.device), Some(2));
        assert_eq!(map.find(0x2800), None, "the gap after a short range");
        assert_eq!(map.find(0x3fff).map(|r| r.base), Some(0x3000));
        assert_eq!(map.find(0x4000), None);
        map.remove(0x1000);
        assert_eq!(map.find(0x1000), None);
        assert_eq!(map.ranges().len(), 2);
        assert_eq!(map.find(usize::MAX), None);
    }
}
