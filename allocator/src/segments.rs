//! Which device each address range reserved from the vendor belongs to:
//! the segments of a set of device allocators (for RAW, each allocation),
//! readable without a lock. Written only when a range is reserved or
//! given back; read to route a pointer to its device's allocator, whose
//! own block map then says what the pointer is.
//!
//! A sequence lock over a sorted table of atomics: a writer (under a mutex)
//! makes the sequence odd, rewrites the table and makes it even again; a
//! reader reads the sequence, binary-searches the table and keeps its
//! answer only if the sequence is even and unchanged (else it reads
//! again). A reader writes nothing shared, so readers on many cores do
//! not slow each other. A table that gets full is replaced by one twice
//! as large; the old ones are kept until the map is dropped (a reader may
//! still be reading one), at most as much memory again as the largest.

use dipu_stream::sync::{fence, AtomicPtr, AtomicU64, Mutex, Ordering};

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

/// One published table: `len` ranges sorted by base, each as three atomics
/// (base, size, device).
struct Table {
    len: AtomicU64,
    slots: Box<[[AtomicU64; 3]]>,
}

impl Table {
    fn new(capacity: usize) -> Box<Table> {
        Box::new(Table {
            len: AtomicU64::new(0),
            slots: (0..capacity)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
        })
    }

    /// Stores `ranges` (fits: checked by the caller).
    fn fill(&self, ranges: &[SegmentRange]) {
        for (slot, r) in self.slots.iter().zip(ranges) {
            slot[0].store(r.base as u64, Ordering::Relaxed);
            slot[1].store(r.size as u64, Ordering::Relaxed);
            slot[2].store(r.device as u32 as u64, Ordering::Relaxed);
        }
        self.len.store(ranges.len() as u64, Ordering::Relaxed);
    }

    /// The range holding `addr` as read now (possibly torn: the caller
    /// validates with the sequence).
    fn find(&self, addr: usize) -> Option<SegmentRange> {
        let len = (self.len.load(Ordering::Relaxed) as usize).min(self.slots.len());
        let slots = &self.slots[..len];
        let after = slots.partition_point(|s| s[0].load(Ordering::Relaxed) as usize <= addr);
        let s = &slots[after.checked_sub(1)?];
        let r = SegmentRange {
            base: s[0].load(Ordering::Relaxed) as usize,
            size: s[1].load(Ordering::Relaxed) as usize,
            device: s[2].load(Ordering::Relaxed) as u32 as i32,
        };
        r.contains(addr).then_some(r)
    }
}

/// What the writers share: the ranges, and every table ever published.
struct Writer {
    ranges: Vec<SegmentRange>,
    tables: Vec<*mut Table>,
}

// SAFETY: the raw pointers are owned boxes (`Box::into_raw`), freed only
// in `SegmentMap`'s drop; `Writer` lives in the map's mutex.
unsafe impl Send for Writer {}

/// The reserved ranges of a set of device allocators, by address: read
/// without a lock (a sequence lock), written under a mutex.
pub struct SegmentMap {
    /// Odd while a writer changes the table.
    seq: AtomicU64,
    /// The table readers search.
    table: AtomicPtr<Table>,
    write: Mutex<Writer>,
}

impl std::fmt::Debug for SegmentMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentMap")
            .field("ranges", &self.ranges())
            .finish()
    }
}

/// Slots of a new map's table (fewer in loom models, whose cost grows
/// with every atomic).
#[cfg(not(loom))]
const FIRST_CAPACITY: usize = 16;
#[cfg(loom)]
const FIRST_CAPACITY: usize = 2;

impl Default for SegmentMap {
    fn default() -> Self {
        let table = Box::into_raw(Table::new(FIRST_CAPACITY));
        SegmentMap {
            seq: AtomicU64::new(0),
            table: AtomicPtr::new(table),
            write: Mutex::new(Writer {
                ranges: Vec::new(),
                tables: vec![table],
            }),
        }
    }
}

impl Drop for SegmentMap {
    fn drop(&mut self) {
        for &t in &self.write.lock().tables {
            // SAFETY: each came from `Box::into_raw` and is freed once,
            // here, where no reader can be left (`&mut self`).
            drop(unsafe { Box::from_raw(t) });
        }
    }
}

impl SegmentMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The range holding the byte at `addr`, if any. Lock-free: retries
    /// only while a writer is changing the table.
    #[inline]
    pub fn find(&self, addr: usize) -> Option<SegmentRange> {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                // SAFETY: every table stays allocated until the map is
                // dropped, which cannot happen during `&self`.
                let table = unsafe { &*self.table.load(Ordering::Acquire) };
                let found = table.find(addr);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    return found;
                }
            }
            std::hint::spin_loop();
            #[cfg(loom)]
            loom::thread::yield_now();
        }
    }

    /// Every range, by address.
    pub fn ranges(&self) -> Vec<SegmentRange> {
        self.write.lock().ranges.clone()
    }

    /// Applies `change` to the ranges and publishes them.
    fn update(&self, change: impl FnOnce(&mut Vec<SegmentRange>)) {
        let mut w = self.write.lock();
        change(&mut w.ranges);
        // SAFETY: as in `find`; writers are serialised by `write`.
        let table = unsafe { &*self.table.load(Ordering::Relaxed) };
        let bigger = (w.ranges.len() > table.slots.len()).then(|| {
            let t = Table::new(w.ranges.len().next_power_of_two());
            t.fill(&w.ranges);
            Box::into_raw(t)
        });
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        match bigger {
            Some(t) => {
                self.table.store(t, Ordering::Release);
                w.tables.push(t);
            }
            None => table.fill(&w.ranges),
        }
        self.seq.store(seq + 2, Ordering::Release);
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

    #[test]
    fn a_full_table_is_replaced_by_a_larger_one() {
        let map = SegmentMap::new();
        for i in 0..100 {
            map.insert(SegmentRange {
                base: 0x10_0000 + i * 0x1000,
                size: 0x800,
                device: (i % 3) as i32,
            });
        }
        for i in 0..100 {
            let at = 0x10_0000 + i * 0x1000;
            assert_eq!(map.find(at + 0x7ff).map(|r| r.device), Some((i % 3) as i32));
            assert_eq!(map.find(at + 0x800), None);
        }
        for i in (0..100).step_by(2) {
            map.remove(0x10_0000 + i * 0x1000);
        }
        assert_eq!(map.ranges().len(), 50);
        assert_eq!(map.find(0x10_0000), None);
        assert_eq!(map.find(0x10_1000).map(|r| r.device), Some(1));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// A reader looking a pointer up while a writer adds a range that does
    /// not fit the table (so the table is replaced, every range moving one
    /// slot up): the reader's answer is always the pointer's own range and
    /// device, never a torn or foreign one.
    #[test]
    fn readers_see_whole_tables() {
        loom::model(|| {
            let map = Arc::new(SegmentMap::new());
            let r = |base, device| SegmentRange {
                base,
                size: 0x100,
                device,
            };
            map.insert(r(0x1000, 1));
            map.insert(r(0x2000, 9));
            let reader = {
                let map = Arc::clone(&map);
                loom::thread::spawn(move || map.find(0x1080).map(|r| (r.base, r.device)))
            };
            map.insert(r(0x500, 2));
            assert_eq!(reader.join().unwrap(), Some((0x1000, 1)));
            map.remove(0x2000);
            assert_eq!(map.find(0x580).map(|r| r.device), Some(2));
        });
    }

    /// A reader while a writer removes a range in place (the ranges after
    /// it move one slot down): again never a torn or foreign answer.
    #[test]
    fn readers_see_whole_rewrites() {
        loom::model(|| {
            let map = Arc::new(SegmentMap::new());
            let r = |base, device| SegmentRange {
                base,
                size: 0x100,
                device,
            };
            map.insert(r(0x1000, 1));
            map.insert(r(0x2000, 2));
            let reader = {
                let map = Arc::clone(&map);
                loom::thread::spawn(move || map.find(0x2080).map(|r| (r.base, r.device)))
            };
            map.remove(0x1000);
            assert_eq!(reader.join().unwrap(), Some((0x2000, 2)));
        });
    }
}
