//! Caching device allocators and a pinned-host allocator.
//!
//! Every algorithm implements [`DeviceAllocator`]: allocate (bytes, stream)
//! → [`Allocation`], free, `record_stream`, `empty_cache`, statistics,
//! snapshots and a memory fraction. `TORCH` follows PyTorch's caching
//! policy, `BF` is best fit over binned free lists with an occupancy
//! bitmap, `BS` caches whole blocks in size bins, `RAW` does not cache.
//! A block used on other streams (`record_stream`) is reused only after
//! events recorded on those streams at free time have completed.
//!
//! ```
//! use std::sync::Arc;
//! use dipu_allocator::{Algorithm, AllocatorConfig, DeviceAllocator};
//! use dipu_stream::DeviceContext;
//! # use dipu_vendor_host::{HostConfig, HostVendor};
//! # let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
//! let ctx = DeviceContext::new(vendor)?;
//! let alloc = dipu_allocator::new_device_allocator(ctx, 0, Algorithm::BestFit, &AllocatorConfig::default())?;
//! let stream = ctx.current_stream(0)?;
//! let a = alloc.allocate(1000, stream)?;
//! alloc.free(a.ptr)?;
//! let b = alloc.allocate(1000, stream)?;
//! assert_eq!(a.ptr, b.ptr, "the cached block is reused");
//! assert_eq!(alloc.stats().num_device_alloc, 1);
//! # alloc.free(b.ptr)?;
//! # Ok::<(), dipu_deviceapi::Error>(())
//! ```

mod arena;
mod bf;
mod bs;
mod caching;
mod config;
mod deferred;
mod devices;
mod expandable;
mod front;
pub mod history;
mod host;
mod policy;
mod raw;
pub mod reference;
pub mod replay;
mod segments;
mod snapshot;
mod source;
mod stats;
mod thread;
mod torch;
mod trace;

use std::ffi::c_void;

use dipu_deviceapi::Result;
use dipu_stream::{DeviceContext, Stream};

pub use config::{Algorithm, AllocatorConfig, ENV_ALGORITHM, ENV_CONF, ENV_CONF_ALIAS};
pub use devices::{AllocatorWrapper, DeviceAllocators};
pub use host::{HostAlgorithm, HostAllocator, ENV_HOST_ALGORITHM};
pub use segments::{SegmentMap, SegmentRange};
pub use snapshot::{BlockInfo, BlockState, SegmentInfo, Snapshot};
pub use stats::{DeviceStats, Pool, PoolStats, Stat};
pub use thread::{ThreadState, ThreadView};

/// Memory handed out by a device allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Device address (null for zero bytes).
    pub ptr: *mut c_void,
    /// Bytes requested.
    pub size: usize,
    /// The device.
    pub device: i32,
    /// The stream the memory was allocated for.
    pub stream: Stream,
}

/// A live allocation as its device allocator sees it: handed out and not
/// given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LiveBlock {
    /// The start address (what `allocate` returned).
    pub addr: usize,
    /// The bytes requested (the valid range is `addr..addr + requested`).
    pub requested: usize,
}

// SAFETY: an `Allocation` is a device address and plain values; it grants no
// access to host memory and may be passed between threads like an integer.
unsafe impl Send for Allocation {}
// SAFETY: as above; it has no interior mutability.
unsafe impl Sync for Allocation {}

/// One device's allocator. Every method is thread-safe.
pub trait DeviceAllocator: Send + Sync {
    /// The device it allocates on.
    fn device(&self) -> i32;

    /// Its algorithm.
    fn algorithm(&self) -> Algorithm;

    /// Memory of at least `bytes` for use on `stream` (a stream of this
    /// device); zero bytes gives a null pointer.
    fn allocate(&self, bytes: usize, stream: Stream) -> Result<Allocation>;

    /// Gives back memory from [`DeviceAllocator::allocate`]; an unknown
    /// pointer or a second free is an `InvalidArgument` error.
    fn free(&self, ptr: *mut c_void) -> Result<()>;

    /// Declares that the memory at `ptr` is also used by work on `stream`:
    /// after `free` it is reused only once that work is done.
    fn record_stream(&self, ptr: *mut c_void, stream: Stream) -> Result<()>;

    /// The live allocation whose requested bytes hold the byte at `addr`
    /// (its start or inside it); `None` when no live allocation of this
    /// allocator holds it (never handed out, freed, or in a block's rounding
    /// past the bytes requested). Takes the device's lock, not the cache's.
    fn find(&self, addr: usize) -> Option<LiveBlock>;

    /// Gives every cached, unused segment back to the vendor.
    fn empty_cache(&self) -> Result<()>;

    /// The statistics.
    fn stats(&self) -> DeviceStats;

    /// Restarts every peak statistic at its current value.
    fn reset_peak_stats(&self);

    /// Every segment and block.
    fn snapshot(&self) -> Snapshot;

    /// Limits this allocator to `fraction` (0, 1] of the device's memory.
    fn set_memory_fraction(&self, fraction: f64) -> Result<()>;

    /// This allocator's key in thread caches when it keeps them (`BF`
    /// and `BS`), so that [`DeviceAllocators::allocate_cached`] and
    /// [`DeviceAllocators::free_cached`] can reach them directly; `None`
    /// otherwise (and for wrapped allocators that must see every call, which
    /// keep the full path).
    fn thread_cache_key(&self) -> Option<u64> {
        None
    }
}

/// Handles what every algorithm answers the same way: a stream of another
/// device is an error, and zero bytes is a null allocation (`Some`).
#[inline(always)]
pub(crate) fn trivial_request(
    device: i32,
    bytes: usize,
    stream: Stream,
) -> Result<Option<Allocation>> {
    if stream.device() != device {
        return Err(dipu_deviceapi::Error::invalid_argument(format!(
            "a stream of device {} was passed to the allocator of device {device}",
            stream.device()
        )));
    }
    Ok((bytes == 0).then_some(Allocation {
        ptr: std::ptr::null_mut(),
        size: 0,
        device,
        stream,
    }))
}

/// A device allocator of `algorithm` for `device`.
pub fn new_device_allocator(
    ctx: &'static DeviceContext,
    device: i32,
    algorithm: Algorithm,
    config: &AllocatorConfig,
) -> Result<Box<dyn DeviceAllocator>> {
    new_device_allocator_in(ctx, device, algorithm, config, Default::default())
}

/// A device allocator of `algorithm` for `device` that records the ranges
/// it reserves in `segments` (shared with other devices' allocators, so a
/// pointer leads to its device: see [`DeviceAllocators::find`]).
pub fn new_device_allocator_in(
    ctx: &'static DeviceContext,
    device: i32,
    algorithm: Algorithm,
    config: &AllocatorConfig,
    segments: std::sync::Arc<SegmentMap>,
) -> Result<Box<dyn DeviceAllocator>> {
    let source = source::Source::new(ctx, device, config.per_process_memory_fraction, segments)?;
    Ok(match algorithm {
        Algorithm::Raw if config.expandable_segments => {
            return Err(dipu_deviceapi::Error::new(
                dipu_deviceapi::ErrorKind::InvalidConfig,
                "expandable_segments works with the TORCH and BF algorithms, not RAW",
            ))
        }
        Algorithm::Raw => Box::new(raw::RawAllocator::new(source)),
        Algorithm::BinSize => Box::new(caching::CachingAllocator::new(
            bs::BinSize::new(),
            source,
            config,
        )?),
        Algorithm::BestFit => Box::new(caching::CachingAllocator::new(
            bf::BestFit::new(config),
            source,
            config,
        )?),
        Algorithm::Torch => Box::new(caching::CachingAllocator::new(
            torch::TorchPolicy::new(config),
            source,
            config,
        )?),
    })
}
