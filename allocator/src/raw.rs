//! `RAW`: every allocation straight from the vendor, every free straight
//! back (after waiting for other streams that used the memory), so
//! external tools see each allocation.

use rustc_hash::FxHashMap as HashMap;
use std::ffi::c_void;

use dipu_deviceapi::{Error, Result};
use dipu_stream::Stream;
use parking_lot::Mutex;

use crate::snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot};
use crate::source::Source;
use crate::{Algorithm, Allocation, DeviceAllocator, DeviceStats, LiveBlock, Pool};

struct Live {
    size: usize,
    stream: Stream,
    other_streams: Vec<Stream>,
}

struct State {
    source: Source,
    live: HashMap<usize, Live>,
    stats: DeviceStats,
}

/// The pass-through allocator of one device.
pub(crate) struct RawAllocator {
    device: i32,
    state: Mutex<State>,
}

impl RawAllocator {
    pub(crate) fn new(source: Source) -> Self {
        RawAllocator {
            device: source.device,
            state: Mutex::new(State {
                source,
                live: HashMap::default(),
                stats: DeviceStats::default(),
            }),
        }
    }
}

impl DeviceAllocator for RawAllocator {
    fn device(&self) -> i32 {
        self.device
    }

    fn algorithm(&self) -> Algorithm {
        Algorithm::Raw
    }

    fn allocate(&self, bytes: usize, stream: Stream) -> Result<Allocation> {
        if let Some(empty) = crate::trivial_request(self.device, bytes, stream)? {
            return Ok(empty);
        }
        let mut st = self.state.lock();
        let reserved = st.stats.reserved_bytes.current;
        let ptr = st.source.malloc(bytes, reserved).map_err(|e| {
            if e.kind() != dipu_deviceapi::ErrorKind::OutOfMemory {
                return e;
            }
            st.stats.num_ooms += 1;
            let allocated = st.stats.allocated_bytes.current;
            st.source.oom_error(bytes, bytes, reserved, allocated, &e)
        })?;
        // Each allocation is its own segment: its pool is its request's.
        let pool = Pool::for_request(bytes);
        st.stats.on_segment_created(bytes, pool);
        st.stats.on_allocate(bytes, bytes, pool);
        st.live.insert(
            ptr as usize,
            Live {
                size: bytes,
                stream,
                other_streams: Vec::new(),
            },
        );
        Ok(Allocation {
            ptr,
            size: bytes,
            device: self.device,
            stream,
        })
    }

    fn free(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let mut st = self.state.lock();
        let live = st.live.remove(&(ptr as usize)).ok_or_else(|| {
            Error::invalid_argument(format!(
                "{ptr:p} was not allocated by the device {} allocator, or was already freed",
                self.device
            ))
        })?;
        for stream in &live.other_streams {
            stream.synchronize()?;
        }
        let pool = Pool::for_request(live.size);
        st.stats.on_free(live.size, live.size, pool);
        st.stats.on_inactive(live.size, pool);
        st.source.free(ptr as usize)?;
        st.stats.on_segment_released(live.size, pool);
        Ok(())
    }

    fn record_stream(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        let mut st = self.state.lock();
        let live = st.live.get_mut(&(ptr as usize)).ok_or_else(|| {
            Error::invalid_argument(format!(
                "record_stream: {ptr:p} is not a live allocation of the device {} allocator",
                self.device
            ))
        })?;
        if live.stream != stream && !live.other_streams.contains(&stream) {
            live.other_streams.push(stream);
        }
        Ok(())
    }

    fn find(&self, addr: usize) -> Option<LiveBlock> {
        let st = self.state.lock();
        // Each allocation is a range of its own in the segment map.
        let base = st.source.segments.find(addr)?.base;
        let live = st.live.get(&base)?;
        (addr - base < live.size).then_some(LiveBlock {
            addr: base,
            requested: live.size,
        })
    }

    fn empty_cache(&self) -> Result<()> {
        Ok(())
    }

    fn stats(&self) -> DeviceStats {
        self.state.lock().stats
    }

    fn reset_peak_stats(&self) {
        self.state.lock().stats.reset_peaks();
    }

    fn snapshot(&self) -> Snapshot {
        let st = self.state.lock();
        let mut segments: Vec<SegmentInfo> = st
            .live
            .iter()
            .map(|(&address, live)| SegmentInfo {
                device: self.device,
                address,
                size: live.size,
                stream: live.stream.id().as_u32(),
                pool: Pool::for_request(live.size).as_str().to_owned(),
                blocks: vec![BlockInfo {
                    address,
                    size: live.size,
                    state: BlockState::Allocated,
                    requested: live.size,
                }],
            })
            .collect();
        segments.sort_by_key(|s| s.address);
        Snapshot { segments }
    }

    fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.state.lock().source.set_fraction(fraction)
    }
}
