//! The pinned-host allocator (`DIPU_HOST_MEMCACHING_ALGORITHM`): page-locked
//! host memory for copies between host and devices, as PyTorch's
//! `CachingHostAllocator`.
//!
//! `BS` caches whole blocks in size bins (a quarter of a power of two, at
//! least 512 bytes; never split or merged; an empty bin takes a cached
//! block of up to twice its size); `RAW` gives every block straight
//! back to the vendor. A block that copies queued on streams still use
//! ([`HostAllocator::record_event`]) is reused, or given back, only after
//! events recorded on those streams when it was freed have completed.
//! Vendor calls that may be slow (`malloc_host`, `free_host`, waiting for
//! events) are made without holding the allocator's lock.

use rustc_hash::FxHashMap as HashMap;
use std::env::VarError;
use std::ffi::c_void;
use std::fmt;
use std::str::FromStr;

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, PooledEvent, Stream};
use parking_lot::Mutex;

use crate::bs::{bin_size_in, HOST_STEPS};
use crate::source::human;
use crate::{DeviceStats, Pool};

/// Environment variable choosing the pinned-host allocator algorithm
/// (`BS` or `RAW`; default `BS`).
pub const ENV_HOST_ALGORITHM: &str = "DIPU_HOST_MEMCACHING_ALGORITHM";

/// A pinned-host allocator algorithm, by DIPU's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostAlgorithm {
    /// Whole blocks cached in size bins (`BS`).
    BinSize,
    /// No caching: every allocation and free goes to the vendor (`RAW`).
    Raw,
}

impl HostAlgorithm {
    /// Every algorithm.
    pub const ALL: [HostAlgorithm; 2] = [HostAlgorithm::BinSize, HostAlgorithm::Raw];

    /// The default algorithm.
    pub const DEFAULT: HostAlgorithm = HostAlgorithm::BinSize;

    /// DIPU's name: `BS` or `RAW`.
    pub fn name(self) -> &'static str {
        match self {
            HostAlgorithm::BinSize => "BS",
            HostAlgorithm::Raw => "RAW",
        }
    }

    /// The algorithm named by `DIPU_HOST_MEMCACHING_ALGORITHM`, or the
    /// default when it is unset or empty; any other value is an
    /// `InvalidConfig` error naming the variable and the accepted values.
    pub fn from_env() -> Result<HostAlgorithm> {
        match std::env::var(ENV_HOST_ALGORITHM) {
            Ok(v) if !v.trim().is_empty() => {
                v.parse().map_err(|e: Error| e.context(ENV_HOST_ALGORITHM))
            }
            Ok(_) | Err(VarError::NotPresent) => Ok(HostAlgorithm::DEFAULT),
            Err(VarError::NotUnicode(raw)) => Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("{ENV_HOST_ALGORITHM}: {raw:?} is not valid UTF-8: use BS or RAW"),
            )),
        }
    }

    fn caches(self) -> bool {
        self == HostAlgorithm::BinSize
    }

    /// The block size for a request of `bytes` (nonzero).
    fn round(self, bytes: usize) -> usize {
        // Past `isize::MAX` no allocation can succeed and `bin_size_in` could
        // overflow: let the vendor report the failure for the request as is.
        if self.caches() && bytes <= isize::MAX as usize {
            bin_size_in(bytes, HOST_STEPS)
        } else {
            bytes
        }
    }
}

impl FromStr for HostAlgorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<HostAlgorithm> {
        HostAlgorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("unknown pinned-host allocator algorithm {s:?}: use BS or RAW"),
                )
            })
    }
}

impl fmt::Display for HostAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A block handed out and not yet freed.
struct Live {
    size: usize,
    requested: usize,
    /// Streams with copies queued that use the block.
    streams: Vec<Stream>,
}

/// A freed block waiting for the events recorded on the streams that used it.
struct PendingFree {
    addr: usize,
    size: usize,
    events: Vec<PooledEvent>,
}

/// Vendor blocks to give back, as (address, size).
type Blocks = Vec<(usize, usize)>;

#[derive(Default)]
struct State {
    /// Blocks handed out, by address.
    live: HashMap<usize, Live>,
    /// Reusable blocks by size (`BS` only).
    cached: HashMap<usize, Vec<usize>>,
    /// Freed blocks still used by queued copies.
    pending: Vec<PendingFree>,
    stats: DeviceStats,
}

impl State {
    /// Moves the pending frees whose events have all completed out of the
    /// pending list: into the cache when `cache`, otherwise into the
    /// returned list for the vendor (already counted as released).
    fn process_pending(&mut self, cache: bool) -> Result<Blocks> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        // Query everything first, so an error leaves the state untouched.
        let ready = self
            .pending
            .iter()
            .map(|p| {
                p.events
                    .iter()
                    .try_fold(true, |all, e| Ok::<_, Error>(all && e.query()?))
            })
            .collect::<Result<Vec<bool>>>()?;
        let mut release = Vec::new();
        for (p, ready) in std::mem::take(&mut self.pending).into_iter().zip(ready) {
            if !ready {
                self.pending.push(p);
                continue;
            }
            self.stats.on_inactive(p.size, Pool::for_request(p.size));
            if cache {
                self.cached.entry(p.size).or_default().push(p.addr);
            } else {
                self.stats
                    .on_segment_released(p.size, Pool::for_request(p.size));
                release.push((p.addr, p.size));
            }
        }
        Ok(release)
    }

    /// A cached block for a request of bin `size`, as (address, block
    /// size): one of its own bin, else the smallest of up to twice `size`
    /// (pinning new memory is slow; a larger block is at hand).
    fn take_cached_for(&mut self, size: usize) -> Option<(usize, usize)> {
        if let Some(addr) = self.cached.get_mut(&size).and_then(Vec::pop) {
            return Some((addr, size));
        }
        let limit = size.checked_mul(2).filter(|l| *l <= isize::MAX as usize)?;
        let mut bin = size;
        // The bins above `size` up to twice it: at most one power of two's.
        for _ in 0..HOST_STEPS {
            bin = bin_size_in(bin + 1, HOST_STEPS);
            if bin > limit {
                break;
            }
            if let Some(addr) = self.cached.get_mut(&bin).and_then(Vec::pop) {
                return Some((addr, bin));
            }
        }
        None
    }

    /// Takes every cached block out, counted as released.
    fn take_cached(&mut self) -> Blocks {
        let mut release = Vec::new();
        for (size, addrs) in self.cached.drain() {
            for addr in addrs {
                self.stats
                    .on_segment_released(size, Pool::for_request(size));
                release.push((addr, size));
            }
        }
        release
    }

    /// The error for freeing `ptr`, which is not a live block.
    fn bad_free(&self, ptr: *mut c_void) -> Error {
        let addr = ptr as usize;
        let freed = self.pending.iter().any(|p| p.addr == addr)
            || self.cached.values().any(|bin| bin.contains(&addr));
        if freed {
            Error::invalid_argument(format!(
                "pinned host allocator: double free of {ptr:p} (it was already freed)"
            ))
        } else {
            Error::invalid_argument(format!(
                "pinned host allocator: {ptr:p} was not allocated by this allocator, \
                 or was already freed"
            ))
        }
    }
}

/// The pinned (page-locked) host memory allocator of one [`DeviceContext`]:
/// pinned memory belongs to no device, so there is one per vendor.
///
/// Every method is thread-safe.
///
/// ```
/// use std::sync::Arc;
/// use dipu_allocator::{HostAlgorithm, HostAllocator};
/// use dipu_stream::DeviceContext;
/// # use dipu_vendor_host::{HostConfig, HostVendor};
/// # let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
/// let ctx = DeviceContext::new(vendor)?;
/// let pinned = HostAllocator::new(ctx, HostAlgorithm::BinSize);
/// let a = pinned.allocate(1000)?;
/// // ... queue a copy from `a` on `stream`, then:
/// let stream = ctx.current_stream(0)?;
/// pinned.record_event(a, stream)?;
/// pinned.free(a)?; // reused once the copies queued on `stream` so far are done
/// stream.synchronize()?;
/// let b = pinned.allocate(900)?;
/// assert_eq!(a, b, "same size bin: the cached block is reused");
/// assert_eq!(pinned.stats().num_device_alloc, 1);
/// # pinned.free(b)?;
/// # Ok::<(), dipu_deviceapi::Error>(())
/// ```
pub struct HostAllocator {
    ctx: &'static DeviceContext,
    algorithm: HostAlgorithm,
    state: Mutex<State>,
}

impl fmt::Debug for HostAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostAllocator")
            .field("algorithm", &self.algorithm)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl HostAllocator {
    /// A pinned-host allocator over `ctx`'s vendor with `algorithm`.
    pub fn new(ctx: &'static DeviceContext, algorithm: HostAlgorithm) -> HostAllocator {
        HostAllocator {
            ctx,
            algorithm,
            state: Mutex::new(State::default()),
        }
    }

    /// A pinned-host allocator with the algorithm of
    /// `DIPU_HOST_MEMCACHING_ALGORITHM` (see [`HostAlgorithm::from_env`]).
    pub fn from_env(ctx: &'static DeviceContext) -> Result<HostAllocator> {
        Ok(HostAllocator::new(ctx, HostAlgorithm::from_env()?))
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> HostAlgorithm {
        self.algorithm
    }

    /// The context whose vendor provides the memory.
    pub fn context(&self) -> &'static DeviceContext {
        self.ctx
    }

    /// Pinned host memory of at least `bytes` (zero bytes: null). `BS`
    /// reuses a cached block of the same size bin when there is one, else
    /// the smallest cached block of up to twice the bin's size. When
    /// the vendor is out of pinned memory, the allocator waits for every
    /// pending free, gives every cached block back and tries once more
    /// (counted in `num_sync_all_streams`, then `num_alloc_retries` or
    /// `num_ooms`).
    pub fn allocate(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let size = self.algorithm.round(bytes);
        let (stale, hit) = {
            let mut st = self.state.lock();
            let stale = st.process_pending(self.algorithm.caches())?;
            let hit = st.take_cached_for(size);
            if let Some((addr, block)) = hit {
                st.live.insert(
                    addr,
                    Live {
                        size: block,
                        requested: bytes,
                        streams: Vec::new(),
                    },
                );
                st.stats.on_allocate(block, bytes, Pool::for_request(block));
            }
            (stale, hit)
        };
        if let Err(e) = self.give_back(stale) {
            tracing::warn!("pinned host allocator: giving back a freed block failed: {e}");
        }
        if let Some((addr, _)) = hit {
            return Ok(addr as *mut c_void);
        }
        let ptr = match self.ctx.api().malloc_host(size) {
            Ok(ptr) => ptr,
            Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                self.retry_after_oom(size, bytes, &e)?
            }
            Err(e) => return Err(e),
        };
        if ptr.is_null() {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("the vendor's malloc_host({size}) returned null without an error"),
            ));
        }
        let mut st = self.state.lock();
        st.stats.on_segment_created(size, Pool::for_request(size));
        st.stats.on_allocate(size, bytes, Pool::for_request(size));
        st.live.insert(
            ptr as usize,
            Live {
                size,
                requested: bytes,
                streams: Vec::new(),
            },
        );
        Ok(ptr)
    }

    /// Waits for every pending free, gives every cached block back, and
    /// tries `malloc_host(size)` once more.
    fn retry_after_oom(&self, size: usize, bytes: usize, cause: &Error) -> Result<*mut c_void> {
        let (pending, mut release) = {
            let mut st = self.state.lock();
            st.stats.num_sync_all_streams += 1;
            let pending = std::mem::take(&mut st.pending);
            (pending, st.take_cached())
        };
        let mut waited = Vec::with_capacity(pending.len());
        let mut unfinished = Vec::new();
        let mut wait_error = None;
        for p in pending {
            match p.events.iter().try_for_each(PooledEvent::synchronize) {
                Ok(()) => waited.push(p),
                Err(e) => {
                    wait_error.get_or_insert(e);
                    unfinished.push(p);
                }
            }
        }
        {
            let mut st = self.state.lock();
            for p in &waited {
                st.stats.on_inactive(p.size, Pool::for_request(p.size));
                st.stats
                    .on_segment_released(p.size, Pool::for_request(p.size));
            }
            st.pending.extend(unfinished);
        }
        release.extend(waited.into_iter().map(|p| (p.addr, p.size)));
        if let Err(e) = self.give_back(release) {
            tracing::warn!("pinned host allocator: giving back a cached block failed: {e}");
        }
        if let Some(e) = wait_error {
            return Err(e);
        }
        match self.ctx.api().malloc_host(size) {
            Ok(ptr) => {
                self.state.lock().stats.num_alloc_retries += 1;
                Ok(ptr)
            }
            Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                let mut st = self.state.lock();
                st.stats.num_ooms += 1;
                Err(Error::new(
                    ErrorKind::OutOfMemory,
                    format!(
                        "out of pinned host memory: tried to allocate {} (a {} block) after \
                         waiting for every pending copy and giving every cached block back; \
                         this allocator still holds {}, {} of it allocated. The vendor \
                         said: {}; the first attempt: {}",
                        human(bytes as u64),
                        human(size as u64),
                        human(st.stats.reserved_bytes.current),
                        human(st.stats.allocated_bytes.current),
                        e.message(),
                        cause.message()
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// Gives back memory from [`HostAllocator::allocate`] (null: nothing to
    /// do). Without recorded streams it is reusable at once (`BS`) or goes
    /// straight back to the vendor (`RAW`); otherwise it waits for an event
    /// recorded now on each recorded stream. An unknown pointer or a second
    /// free is an `InvalidArgument` error that changes nothing.
    pub fn free(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let addr = ptr as usize;
        let mut st = self.state.lock();
        let Some(live) = st.live.remove(&addr) else {
            return Err(st.bad_free(ptr));
        };
        let mut events = Vec::with_capacity(live.streams.len());
        for stream in &live.streams {
            let recorded = stream
                .context()
                .pooled_event(stream.device())
                .and_then(|event| event.record(stream).map(|()| event));
            match recorded {
                Ok(event) => events.push(event),
                Err(e) => {
                    st.live.insert(addr, live);
                    return Err(e);
                }
            }
        }
        let size = live.size;
        st.stats
            .on_free(size, live.requested, Pool::for_request(size));
        if events.is_empty() {
            st.stats.on_inactive(size, Pool::for_request(size));
            if self.algorithm.caches() {
                st.cached.entry(size).or_default().push(addr);
                return Ok(());
            }
            st.stats.on_segment_released(size, Pool::for_request(size));
            drop(st);
            return self.give_back(vec![(addr, size)]);
        }
        st.pending.push(PendingFree { addr, size, events });
        if self.algorithm.caches() {
            return Ok(());
        }
        // RAW keeps nothing it can give back: return what is done already.
        // The free itself succeeded, so later failures are only logged.
        let done = st.process_pending(false).unwrap_or_else(|e| {
            tracing::warn!("pinned host allocator: querying pending frees failed: {e}");
            Vec::new()
        });
        drop(st);
        if let Err(e) = self.give_back(done) {
            tracing::warn!("pinned host allocator: giving back a freed block failed: {e}");
        }
        Ok(())
    }

    /// Declares that a copy using the block at `ptr` (a live allocation)
    /// was queued on `stream`, as PyTorch's `recordEvent`: once freed, the
    /// block is reused only after the work queued on `stream` up to the
    /// free is done.
    pub fn record_event(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        if !std::ptr::eq(stream.context(), self.ctx) {
            return Err(Error::invalid_argument(
                "record_event: the stream belongs to another DeviceContext than the pinned \
                 host allocator",
            ));
        }
        let mut st = self.state.lock();
        let live = st.live.get_mut(&(ptr as usize)).ok_or_else(|| {
            Error::invalid_argument(format!(
                "record_event: {ptr:p} is not a live allocation of the pinned host allocator"
            ))
        })?;
        if !live.streams.contains(&stream) {
            live.streams.push(stream);
        }
        Ok(())
    }

    /// Gives every cached block, and every freed block whose copies are
    /// done, back to the vendor. Blocks in use or still waiting for queued
    /// copies are kept.
    pub fn empty_cache(&self) -> Result<()> {
        let release = {
            let mut st = self.state.lock();
            let mut release = st.process_pending(false)?;
            release.extend(st.take_cached());
            release
        };
        self.give_back(release)
    }

    /// The statistics (with [`DeviceStats`]' meaning; *segment* and
    /// *reserved_bytes* count the vendor's pinned blocks, which here are
    /// the blocks themselves).
    pub fn stats(&self) -> DeviceStats {
        self.state.lock().stats
    }

    /// The block handed out and not yet freed that contains the byte at
    /// `ptr`, as (start address, bytes requested), if any. Scans the live
    /// blocks (pinned blocks are few).
    pub fn find(&self, ptr: *const c_void) -> Option<(usize, usize)> {
        let addr = ptr as usize;
        let st = self.state.lock();
        st.live
            .iter()
            .find(|(&start, live)| addr >= start && addr < start + live.size.max(1))
            .map(|(&start, live)| (start, live.requested))
    }

    /// Restarts every peak statistic at its current value.
    pub fn reset_peak_stats(&self) {
        self.state.lock().stats.reset_peaks();
    }

    /// `free_host`s every block of `blocks` (already taken out of the
    /// state), returning the first error after trying them all.
    fn give_back(&self, blocks: Blocks) -> Result<()> {
        let mut first = None;
        for (addr, _) in blocks {
            // SAFETY: `addr` came from this vendor's `malloc_host`; it was
            // taken out of every table of the allocator, so it is freed once
            // and nothing hands it out again; its user freed it, and the
            // copies recorded on streams have completed (its events did).
            let freed = unsafe { self.ctx.api().free_host(addr as *mut c_void) };
            if let Err(e) = freed {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for HostAllocator {
    /// Gives cached blocks and finished frees back; blocks still in use or
    /// still waiting for copies are left to the vendor.
    fn drop(&mut self) {
        let st = self.state.get_mut();
        let mut release = st.process_pending(false).unwrap_or_else(|e| {
            tracing::warn!("pinned host allocator: querying pending frees failed: {e}");
            Vec::new()
        });
        release.extend(st.take_cached());
        let kept = st.live.len() + st.pending.len();
        if kept > 0 {
            tracing::debug!(
                "pinned host allocator dropped with {kept} blocks in use or waiting for copies; \
                 they are not freed"
            );
        }
        if let Err(e) = self.give_back(release) {
            tracing::warn!("pinned host allocator: giving back cached blocks failed: {e}");
        }
    }
}
