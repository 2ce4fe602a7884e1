//! A fixed-size pool of vendor streams, created together on first use and
//! handed out round-robin.

use dipu_deviceapi::{Result, StreamHandle};

use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, Ordering};

/// Streams per pool and priority, as in c10 (`kStreamsPerPool`).
pub const STREAMS_PER_POOL: usize = 32;

/// Lazily created streams handed out in turn. Streams in a pool live as long
/// as the process; `0` (the default stream's raw value) marks an empty slot.
pub(crate) struct StreamPool {
    slots: Box<[AtomicU64]>,
    next: AtomicU32,
    ready: AtomicBool,
    creating: Mutex<()>,
}

impl StreamPool {
    /// An empty pool of `size` slots (a power of two, so that turning the
    /// counter into a slot is a mask, not a division).
    pub(crate) fn new(size: usize) -> Self {
        assert!(
            size.is_power_of_two(),
            "stream pool size {size} is not a power of two"
        );
        StreamPool {
            slots: (0..size).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicU32::new(0),
            ready: AtomicBool::new(false),
            creating: Mutex::new(()),
        }
    }

    /// The next stream in turn and its slot index, creating every stream of
    /// the pool with `create` on first use.
    pub(crate) fn next(
        &self,
        create: impl FnMut() -> Result<StreamHandle>,
    ) -> Result<(u32, StreamHandle)> {
        if !self.ready.load(Ordering::Acquire) {
            self.fill(create)?;
        }
        let index = self.next.fetch_add(1, Ordering::Relaxed) & (self.slots.len() as u32 - 1);
        // Relaxed suffices: the Acquire load of `ready` (or `fill` itself)
        // ordered this read after the slot's store.
        let raw = self.slots[index as usize].load(Ordering::Relaxed);
        Ok((index, StreamHandle::from_raw(raw)))
    }

    /// The stream in slot `index` if the pool made it, without a lock.
    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<StreamHandle> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        let raw = self.slots.get(index as usize)?.load(Ordering::Relaxed);
        Some(StreamHandle::from_raw(raw))
    }

    /// Creates every stream once; concurrent callers wait for the first.
    #[cold]
    fn fill(&self, mut create: impl FnMut() -> Result<StreamHandle>) -> Result<()> {
        let _creating = self.creating.lock();
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        for slot in self.slots.iter() {
            if slot.load(Ordering::Relaxed) != 0 {
                continue; // made by an earlier, partly failed fill
            }
            let stream = create()?;
            if stream.is_default() {
                return Err(dipu_deviceapi::Error::new(
                    dipu_deviceapi::ErrorKind::Internal,
                    "the vendor's stream_create returned the default stream's handle (0)",
                ));
            }
            slot.store(stream.as_raw(), Ordering::Relaxed);
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dipu_deviceapi::{Error, ErrorKind};
    use std::collections::HashSet;

    #[test]
    fn creates_once_and_hands_out_round_robin() {
        let pool = StreamPool::new(4);
        let mut made = 0u64;
        let mut seen = Vec::new();
        for _ in 0..8 {
            let (index, stream) = pool
                .next(|| {
                    made += 1;
                    Ok(StreamHandle::from_raw(100 + made))
                })
                .unwrap();
            seen.push((index, stream.as_raw()));
        }
        assert_eq!(made, 4, "all streams are created together, once");
        assert_eq!(&seen[..4], &[(0, 101), (1, 102), (2, 103), (3, 104)]);
        assert_eq!(&seen[4..], &seen[..4], "the second round repeats the first");
        let distinct: HashSet<_> = seen.iter().map(|s| s.1).collect();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn a_failed_fill_is_retried_and_keeps_what_it_made() {
        let pool = StreamPool::new(4);
        let mut calls = 0u64;
        let e = pool
            .next(|| {
                calls += 1;
                if calls == 2 {
                    Err(Error::new(ErrorKind::OutOfMemory, "no more streams"))
                } else {
                    Ok(StreamHandle::from_raw(calls))
                }
            })
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        let mut more = 10u64;
        let (_, first) = pool
            .next(|| {
                more += 1;
                Ok(StreamHandle::from_raw(more))
            })
            .unwrap();
        assert_eq!(
            first.as_raw(),
            1,
            "the stream made before the failure is kept"
        );
        assert_eq!(more, 13, "only the three missing streams are made");
    }

    #[test]
    fn a_vendor_returning_the_default_handle_is_an_error() {
        let pool = StreamPool::new(2);
        let e = pool.next(|| Ok(StreamHandle::DEFAULT)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicU64 as Counter;
    use loom::sync::Arc;

    /// Two threads take streams from a fresh pool at once: the streams are
    /// created exactly once, both threads get real streams, and the
    /// round-robin counter gives them different slots.
    #[test]
    fn concurrent_first_use_creates_once() {
        loom::model(|| {
            let pool = Arc::new(StreamPool::new(2));
            let made = Arc::new(Counter::new(0));
            let take = |pool: Arc<StreamPool>, made: Arc<Counter>| {
                move || {
                    pool.next(|| {
                        Ok(StreamHandle::from_raw(
                            made.fetch_add(1, Ordering::Relaxed) + 1,
                        ))
                    })
                    .unwrap()
                }
            };
            let t = loom::thread::spawn(take(pool.clone(), made.clone()));
            let (i1, s1) = take(pool.clone(), made.clone())();
            let (i2, s2) = t.join().unwrap();
            assert_eq!(
                made.load(Ordering::Relaxed),
                2,
                "each slot's stream is created once"
            );
            assert!(!s1.is_default() && !s2.is_default());
            assert_ne!(i1, i2, "two takers get different slots");
            assert_ne!(s1, s2);
        });
    }
}
