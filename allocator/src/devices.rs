//! One allocator per device, each created on first use.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use dipu_deviceapi::{Error, Result};
use dipu_stream::{DeviceContext, Stream};

use crate::{
    new_device_allocator_in, Algorithm, AllocatorConfig, DeviceAllocator, LiveBlock, SegmentMap,
    ThreadState,
};

/// Wraps each device allocator as it is created (the memory checker's
/// guards): given the device and the allocator, the allocator to use.
pub type AllocatorWrapper =
    Arc<dyn Fn(i32, Box<dyn DeviceAllocator>) -> Box<dyn DeviceAllocator> + Send + Sync>;

/// The device allocators of a context: one per device (as many as the
/// vendor has), created lazily with one algorithm and configuration.
pub struct DeviceAllocators {
    ctx: &'static DeviceContext,
    algorithm: Algorithm,
    config: AllocatorConfig,
    devices: Box<[OnceLock<Entry>]>,
    /// Every range the allocators reserved, with its device.
    segments: Arc<SegmentMap>,
    /// Applied to each allocator when it is created.
    wrapper: Option<AllocatorWrapper>,
}

/// A device's allocator and its key in thread caches (read on the hit
/// path without a dynamic call).
struct Entry {
    alloc: Box<dyn DeviceAllocator>,
    cache_key: Option<u64>,
}

impl Entry {
    fn new(alloc: Box<dyn DeviceAllocator>) -> Self {
        let cache_key = alloc.thread_cache_key();
        Entry { alloc, cache_key }
    }
}

impl std::fmt::Debug for DeviceAllocators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAllocators")
            .field("algorithm", &self.algorithm)
            .field("devices", &self.devices.len())
            .finish()
    }
}

impl DeviceAllocators {
    /// Allocators of `algorithm` with `config` for every device of `ctx`.
    /// An unusable combination (e.g. expandable segments without virtual
    /// memory) shows up when a device's allocator is first needed.
    pub fn new(ctx: &'static DeviceContext, algorithm: Algorithm, config: AllocatorConfig) -> Self {
        let devices = (0..ctx.device_count()).map(|_| OnceLock::new()).collect();
        DeviceAllocators {
            ctx,
            algorithm,
            config,
            devices,
            segments: Arc::default(),
            wrapper: None,
        }
    }

    /// These allocators with `wrapper` applied to each one when it is
    /// created (the allocation path of an unwrapped set is unchanged).
    pub fn with_wrapper(mut self, wrapper: AllocatorWrapper) -> Self {
        self.wrapper = Some(wrapper);
        self
    }

    /// Allocators chosen by `DIPU_DEVICE_MEMCACHING_ALGORITHM` and `DIPU_ALLOC_CONF`.
    pub fn from_env(ctx: &'static DeviceContext) -> Result<Self> {
        Ok(Self::new(
            ctx,
            Algorithm::from_env()?,
            AllocatorConfig::from_env()?,
        ))
    }

    /// The map of every range these allocators reserved (shared with them).
    pub fn segment_map(&self) -> Arc<SegmentMap> {
        Arc::clone(&self.segments)
    }

    /// The algorithm in use.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// `device`'s allocator, created on first use.
    #[inline]
    pub fn get(&self, device: i32) -> Result<&dyn DeviceAllocator> {
        match self
            .devices
            .get(device as u32 as usize)
            .and_then(OnceLock::get)
        {
            Some(entry) => Ok(entry.alloc.as_ref()),
            None => self.get_slow(device),
        }
    }

    /// `get` for a bad device or an allocator not made yet.
    #[cold]
    fn get_slow(&self, device: i32) -> Result<&dyn DeviceAllocator> {
        let cell = usize::try_from(device)
            .ok()
            .and_then(|d| self.devices.get(d))
            .ok_or_else(|| Error::invalid_device(device, self.devices.len() as i32))?;
        if let Some(entry) = cell.get() {
            return Ok(entry.alloc.as_ref());
        }
        let made = new_device_allocator_in(
            self.ctx,
            device,
            self.algorithm,
            &self.config,
            Arc::clone(&self.segments),
        )?;
        let made = match &self.wrapper {
            Some(wrap) => wrap(device, made),
            None => made,
        };
        // A racing thread may have made one first; keep whichever won.
        Ok(cell.get_or_init(|| Entry::new(made)).alloc.as_ref())
    }

    /// The device whose allocator reserved the memory holding the byte at
    /// `addr` (live or cached), without a lock; `None` for memory none of
    /// these allocators holds.
    #[inline]
    pub fn device_of(&self, addr: usize) -> Option<i32> {
        self.segments.find(addr).map(|r| r.device)
    }

    /// The live allocation holding the byte at `addr` (its start or inside
    /// it) and its device. No process-wide lock: the segment map (read
    /// without a lock) names the device, whose allocator answers under its
    /// own lock from its block map.
    pub fn find(&self, addr: usize) -> Option<(i32, LiveBlock)> {
        let device = self.device_of(addr)?;
        let block = self.devices[device as usize].get()?.alloc.find(addr)?;
        Some((device, block))
    }

    /// The allocators created so far, by device.
    pub fn created(&self) -> impl Iterator<Item = &dyn DeviceAllocator> {
        self.devices
            .iter()
            .filter_map(|c| c.get().map(|e| e.alloc.as_ref()))
    }

    /// The hit path of `allocate(bytes, stream)` on the stream's device: a
    /// block this thread's cache holds for exactly `bytes` on `stream`,
    /// now allocated (as `allocate` would hand it out); `None` when the
    /// full path must run instead (no such block, zero or huge sizes, an
    /// allocator without thread caches or not made yet, a stream of another
    /// context). Neither the device's lock nor a dynamic call.
    #[inline]
    pub fn allocate_cached(&self, bytes: usize, stream: Stream) -> Option<*mut c_void> {
        ThreadState::with(|ts| self.allocate_cached_in(ts, bytes, stream)).flatten()
    }

    /// [`DeviceAllocators::allocate_cached`] with this thread's state at
    /// hand (one thread-local read for a caller that needs it too).
    #[inline]
    pub fn allocate_cached_in(
        &self,
        ts: &ThreadState,
        bytes: usize,
        stream: Stream,
    ) -> Option<*mut c_void> {
        if bytes == 0
            || bytes > isize::MAX as usize / 2
            || !std::ptr::eq(stream.context(), self.ctx)
        {
            return None;
        }
        let key = self
            .devices
            .get(stream.device() as u32 as usize)?
            .get()?
            .cache_key?;
        crate::front::hit_in(ts, key, stream, bytes).map(|addr| addr as *mut c_void)
    }

    /// The hit path of `free(ptr)`: true when `ptr` is the start of a
    /// block this thread's cache of one of these allocators lent and the
    /// cache took it back (freed, as `free` would). False changes nothing:
    /// the pointer's allocator's `free` then decides (other threads'
    /// blocks, full caches, and every bad pointer take that path).
    #[inline]
    pub fn free_cached(&self, ptr: *mut c_void) -> bool {
        ThreadState::with(|ts| self.free_cached_in(ts, ptr)).unwrap_or(false)
    }

    /// [`DeviceAllocators::free_cached`] with this thread's state at hand.
    #[inline]
    pub fn free_cached_in(&self, ts: &ThreadState, ptr: *mut c_void) -> bool {
        crate::front::free_cached_in(ts, ptr as usize, |key| {
            self.devices
                .iter()
                .any(|d| d.get().is_some_and(|e| e.cache_key == Some(key)))
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn allocators_are_per_device_and_lazy() {
        let config = dipu_vendor_host::HostConfig {
            devices: 5,
            ..Default::default()
        };
        let vendor = Arc::new(dipu_vendor_host::HostVendor::new(config).unwrap());
        let ctx = DeviceContext::new(vendor).unwrap();
        let all = DeviceAllocators::new(ctx, Algorithm::Torch, AllocatorConfig::default());
        assert_eq!(all.created().count(), 0);
        assert_eq!(
            all.get(4).unwrap().device(),
            4,
            "no fixed device limit below the vendor's count"
        );
        assert_eq!(all.get(4).unwrap().algorithm(), Algorithm::Torch);
        assert_eq!(all.created().count(), 1);
        assert_eq!(
            all.get(5).err().map(|e| e.kind()),
            Some(dipu_deviceapi::ErrorKind::InvalidDevice)
        );
        let a: *const dyn DeviceAllocator = all.get(2).unwrap();
        let b: *const dyn DeviceAllocator = all.get(2).unwrap();
        assert!(std::ptr::addr_eq(a, b), "the same allocator every time");
    }
    fn host_allocators(algorithm: Algorithm) -> DeviceAllocators {
        let vendor = Arc::new(
            dipu_vendor_host::HostVendor::new(dipu_vendor_host::HostConfig::default()).unwrap(),
        );
        let ctx = DeviceContext::new(vendor).unwrap();
        DeviceAllocators::new(ctx, algorithm, AllocatorConfig::default())
    }

    #[test]
    fn cached_pair_is_the_allocators_own_hit() {
        let all = host_allocators(Algorithm::BestFit);
        let s = all.ctx.current_stream(0).unwrap();
        assert_eq!(all.allocate_cached(4096, s), None, "no allocator yet");
        let a = all.get(0).unwrap().allocate(4096, s).unwrap();
        assert!(all.free_cached(a.ptr), "a block this thread was lent");
        let stats = all.get(0).unwrap().stats();
        assert_eq!(stats.allocated_bytes.current, 0, "freed as `free` would");
        assert!(!all.free_cached(a.ptr), "a second free is not a hit");
        let e = all.get(0).unwrap().free(a.ptr).unwrap_err();
        assert_eq!(e.kind(), dipu_deviceapi::ErrorKind::InvalidArgument);
        let b = all.allocate_cached(4096, s).expect("the cached block");
        assert_eq!(b, a.ptr);
        assert_eq!(all.get(0).unwrap().stats().allocated_bytes.current, 4096);
        assert_eq!(all.allocate_cached(4096, s), None, "one block was cached");
        assert_eq!(all.allocate_cached(4095, s), None, "another size");
        assert_eq!(all.allocate_cached(0, s), None);
        assert_eq!(all.allocate_cached(usize::MAX, s), None);
        let other = all.ctx.stream_from_pool(0, false).unwrap();
        assert_ne!(other, s);
        assert_eq!(all.allocate_cached(4096, other), None, "another stream");
        let interior = b.cast::<u8>().wrapping_add(1).cast();
        assert!(
            !all.free_cached(interior),
            "an interior pointer is not a hit"
        );
        assert!(!all.free_cached(0x10 as *mut c_void), "nor an unknown one");
        assert!(all.free_cached(b));
        assert_eq!(all.get(0).unwrap().stats().allocated_bytes.current, 0);
    }

    #[test]
    fn cached_free_takes_only_this_threads_blocks_of_these_allocators() {
        let all = host_allocators(Algorithm::BestFit);
        let s = all.ctx.current_stream(0).unwrap();
        let a = all.get(0).unwrap().allocate(1000, s).unwrap();
        let ptr = a.ptr as usize;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let ptr = ptr as *mut c_void;
                assert!(!all.free_cached(ptr), "lent to another thread");
                all.get(0).unwrap().free(ptr).unwrap();
            });
        });
        assert_eq!(all.get(0).unwrap().stats().allocated_bytes.current, 0);
        assert_eq!(
            all.allocate_cached(1000, s),
            None,
            "freed by the other thread"
        );
        // Another set of allocators on the same context: its caches are
        // not these.
        let mine = all.get(0).unwrap().allocate(1000, s).unwrap();
        let others = DeviceAllocators::new(all.ctx, Algorithm::BestFit, AllocatorConfig::default());
        let theirs = others.get(0).unwrap().allocate(1000, s).unwrap();
        assert!(!others.free_cached(mine.ptr));
        assert!(!all.free_cached(theirs.ptr));
        assert!(others.free_cached(theirs.ptr));
        assert!(all.free_cached(mine.ptr));
    }

    #[test]
    fn allocators_without_thread_caches_take_the_full_path() {
        for algorithm in [Algorithm::Torch, Algorithm::Raw] {
            let all = host_allocators(algorithm);
            let s = all.ctx.current_stream(0).unwrap();
            let a = all.get(0).unwrap().allocate(4096, s).unwrap();
            assert!(!all.free_cached(a.ptr), "{algorithm}");
            all.get(0).unwrap().free(a.ptr).unwrap();
            assert_eq!(all.allocate_cached(4096, s), None, "{algorithm}");
        }
    }
}
