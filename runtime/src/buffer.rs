//! Owning buffers: `DeviceBuffer` (device memory from a device allocator)
//! and `HostBuffer` (pinned host memory).

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use dipu_allocator::{Allocation, ThreadState};
use dipu_deviceapi::{CopyKind, Error, Result};
use dipu_memcheck::Location;
use dipu_stream::Stream;

use crate::Runtime;

impl Runtime {
    /// At least `bytes` of device memory for use on `stream`, from the
    /// allocator of the stream's device (zero bytes: an empty buffer with a
    /// null pointer).
    pub fn allocate(self: &Arc<Self>, bytes: usize, stream: Stream) -> Result<DeviceBuffer> {
        Ok(DeviceBuffer {
            alloc: self.allocate_with::<true>(bytes, stream)?,
            rt: Arc::clone(self),
            owned: true,
        })
    }

    /// [`Runtime::allocate`] without an owner: the pointer (null for zero
    /// bytes), to free with [`Runtime::free_raw`]. What `dipu_malloc`
    /// calls: unlike a [`DeviceBuffer`], it does not touch the runtime's
    /// reference count, which all threads share.
    pub fn allocate_raw(&self, bytes: usize, stream: Stream) -> Result<*mut c_void> {
        Ok(self.allocate_with::<true>(bytes, stream)?.ptr)
    }

    /// The hit path of [`Runtime::allocate_raw`]: a block this thread's
    /// allocator cache holds for exactly `bytes` on `stream`, now allocated;
    /// `None` when the full path must run (no such block, the memory
    /// checker, the trace or the memory history on, an allocator without thread caches, a stream of another
    /// runtime). What `dipu_malloc` tries first: no lock, no dynamic call.
    #[inline]
    pub fn allocate_cached(&self, bytes: usize, stream: Stream) -> Option<*mut c_void> {
        if self.observed() {
            return None;
        }
        self.allocators.allocate_cached(bytes, stream)
    }

    /// [`Runtime::allocate_cached`] with this thread's allocation-path
    /// state at hand (from [`crate::with_current`]).
    #[inline]
    pub fn allocate_cached_in(
        &self,
        ts: &ThreadState,
        bytes: usize,
        stream: Stream,
    ) -> Option<*mut c_void> {
        if self.observed() {
            return None;
        }
        self.allocators.allocate_cached_in(ts, bytes, stream)
    }

    /// The hit path of [`Runtime::free_raw`] for a pointer of any device:
    /// true when this thread's allocator cache lent `ptr` (the start of a
    /// live allocation of this runtime) and took it back. False changes
    /// nothing; the full path then frees or explains the pointer. What
    /// `dipu_free` tries first.
    #[inline]
    pub fn free_cached(&self, ptr: *mut c_void) -> bool {
        !self.observed() && self.allocators.free_cached(ptr)
    }

    /// [`Runtime::free_cached`] with this thread's allocation-path state at
    /// hand (from [`crate::with_current`]).
    #[inline]
    pub fn free_cached_in(&self, ts: &ThreadState, ptr: *mut c_void) -> bool {
        !self.observed() && self.allocators.free_cached_in(ts, ptr)
    }

    /// Whether something must see every allocate and free (the memory
    /// checker, the runtime trace or this runtime's memory history), so
    /// that the hit paths, which bypass them, step aside: one load of the
    /// flag they keep ([`dipu_deviceapi::observe`]).
    #[inline(always)]
    pub(crate) fn observed(&self) -> bool {
        !cfg!(feature = "observers-compiled-out") && self.observers.any_on()
    }

    /// [`Runtime::allocate_raw`] with the memory checker's branch compiled
    /// out: the baseline of `runtime/benches/memcheck.rs`, which measures
    /// what the checker costs when off. Not for use outside benchmarks.
    #[doc(hidden)]
    pub fn bench_allocate_without_checker(
        &self,
        bytes: usize,
        stream: Stream,
    ) -> Result<*mut c_void> {
        Ok(self.allocate_with::<false>(bytes, stream)?.ptr)
    }

    /// `allocate`, telling the checker (when on) if `CHECK`.
    #[inline(always)]
    fn allocate_with<const CHECK: bool>(&self, bytes: usize, stream: Stream) -> Result<Allocation> {
        self.check_stream(&stream, "allocate")?;
        let alloc = self.allocators.get(stream.device())?;
        // Loaded before the call: the hot path keeps one bit across it, and
        // the allocator's result goes through as it is.
        if CHECK && self.observed() {
            return self.observe_allocate(alloc.allocate(bytes, stream));
        }
        alloc.allocate(bytes, stream)
    }

    /// Tells the trace and the memory checker, those that are on, of the
    /// allocation in `result`, and returns it.
    #[cold]
    #[inline(never)]
    fn observe_allocate(&self, result: Result<Allocation>) -> Result<Allocation> {
        let Ok(alloc) = result else {
            return result;
        };
        if dipu_profiler::enabled() {
            crate::trace::allocate(&alloc);
        }
        if dipu_memcheck::enabled() {
            dipu_memcheck::on_alloc(
                alloc.ptr as usize,
                alloc.size,
                Location::Device(alloc.device),
                Some(alloc.stream.id()),
            );
        }
        result
    }

    /// At least `bytes` of pinned host memory, zero-filled (zero bytes: an
    /// empty buffer with a null pointer).
    pub fn allocate_host(self: &Arc<Self>, bytes: usize) -> Result<HostBuffer> {
        let ptr = self.host.allocate(bytes)?;
        if !ptr.is_null() {
            // SAFETY: the pinned allocator just handed out `ptr` with room
            // for at least `bytes` bytes of host-accessible memory, and
            // nobody else has it yet.
            unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        }
        if dipu_memcheck::enabled() {
            dipu_memcheck::on_alloc(ptr as usize, bytes, Location::Host, None);
        }
        Ok(HostBuffer {
            rt: Arc::clone(self),
            ptr,
            len: bytes,
            owned: true,
        })
    }
}

/// Device memory owned by Rust: freed through its device's allocator when
/// dropped (a failure is logged, not raised). It keeps its runtime alive.
pub struct DeviceBuffer {
    rt: Arc<Runtime>,
    alloc: Allocation,
    owned: bool,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.alloc.ptr)
            .field("len", &self.alloc.size)
            .field("device", &self.alloc.device)
            .field("stream", &self.alloc.stream)
            .finish()
    }
}

impl DeviceBuffer {
    /// The device address (null when empty).
    pub fn as_ptr(&self) -> *mut c_void {
        self.alloc.ptr
    }

    /// The bytes requested.
    pub fn len(&self) -> usize {
        self.alloc.size
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.alloc.size == 0
    }

    /// The device the memory is on.
    pub fn device(&self) -> i32 {
        self.alloc.device
    }

    /// The stream the memory was allocated for.
    pub fn stream(&self) -> Stream {
        self.alloc.stream
    }

    /// The runtime it came from.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// Declares that work on `stream` (another stream than the allocation
    /// stream) uses this memory: after the buffer is dropped the memory is
    /// reused only once that work is done.
    pub fn record_stream(&self, stream: Stream) -> Result<()> {
        self.rt.record_stream_raw(self.alloc.ptr, stream)
    }

    /// Gives up ownership and returns the pointer; free it later with
    /// [`Runtime::free_raw`]`(self.device(), ptr)`. Until then it is live
    /// (and reported as a leak by [`crate::shutdown`]).
    pub fn into_raw(mut self) -> *mut c_void {
        self.owned = false;
        self.alloc.ptr
    }

    /// The stream to copy on: `stream`, else the allocation stream.
    fn copy_stream(&self, stream: Option<Stream>) -> Stream {
        stream.unwrap_or(self.alloc.stream)
    }

    /// `InvalidArgument` unless `n` host bytes fit the buffer.
    fn check_len(&self, n: usize, op: &str) -> Result<()> {
        if n <= self.len() {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "{op}: {n} host bytes do not fit the device buffer of {} bytes",
                self.len()
            )))
        }
    }

    /// Copies `src` to the start of the buffer on `stream` (default: the
    /// allocation stream) and waits for that stream.
    pub fn copy_from_host(&self, src: &[u8], stream: Option<Stream>) -> Result<()> {
        self.check_len(src.len(), "copy_from_host")?;
        let stream = self.copy_stream(stream);
        // SAFETY: `src` is readable for its length and stays borrowed until
        // the stream is synchronized below; the device range is checked.
        unsafe {
            self.rt.memcpy_async(
                self.alloc.ptr,
                src.as_ptr().cast(),
                src.len(),
                CopyKind::HostToDevice,
                stream,
            )?;
        }
        stream.synchronize()
    }

    /// Copies the start of the buffer into `dst` on `stream` (default: the
    /// allocation stream) and waits for that stream.
    pub fn copy_to_host(&self, dst: &mut [u8], stream: Option<Stream>) -> Result<()> {
        self.check_len(dst.len(), "copy_to_host")?;
        let stream = self.copy_stream(stream);
        // SAFETY: `dst` is writable for its length and stays mutably
        // borrowed until the stream is synchronized below.
        unsafe {
            self.rt.memcpy_async(
                dst.as_mut_ptr().cast(),
                self.alloc.ptr,
                dst.len(),
                CopyKind::DeviceToHost,
                stream,
            )?;
        }
        stream.synchronize()
    }

    /// Sets every byte to `value`, queued on `stream` (default: the
    /// allocation stream); the host does not wait.
    pub fn fill(&self, value: u8, stream: Option<Stream>) -> Result<()> {
        let stream = self.copy_stream(stream);
        // SAFETY: the range is the buffer's own device memory, and no host
        // memory is involved.
        unsafe {
            self.rt
                .memset_async(self.alloc.ptr, value, self.len(), stream)
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Err(e) = self.rt.free_raw(self.alloc.device, self.alloc.ptr) {
            tracing::error!(
                ptr = ?self.alloc.ptr,
                bytes = self.alloc.size,
                device = self.alloc.device,
                "dropping a DeviceBuffer failed to free its memory: {e}"
            );
        }
    }
}

/// Pinned host memory owned by Rust, given back to the pinned allocator
/// when dropped (a failure is logged). It keeps its runtime alive.
pub struct HostBuffer {
    rt: Arc<Runtime>,
    ptr: *mut c_void,
    len: usize,
    owned: bool,
}

// SAFETY: a `HostBuffer` owns its block exclusively; shared references
// only read it and `&mut` references are exclusive, as for a `Vec<u8>`.
// The runtime it holds is `Send + Sync`.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl HostBuffer {
    /// The host address (null when empty).
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The bytes requested.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The contents. Do not call while an asynchronous copy queued with
    /// the raw pointer may still write here.
    pub fn as_slice(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: the block is `len` initialised (zero-filled at
        // allocation) bytes owned by `self`; the borrow ties the slice to it.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }

    /// The contents, mutably. Do not call while an asynchronous copy
    /// queued with the raw pointer may still use the block.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), self.len) }
    }

    /// Declares that a copy using this block was queued on `stream`: once
    /// freed, the block is reused only after that work is done.
    pub fn record_event(&self, stream: Stream) -> Result<()> {
        if self.ptr.is_null() {
            return Ok(());
        }
        self.rt.record_host_event_raw(self.ptr, stream)
    }

    /// Gives up ownership and returns the pointer; free it later with
    /// [`Runtime::free_host_raw`].
    pub fn into_raw(mut self) -> *mut c_void {
        self.owned = false;
        self.ptr
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Err(e) = self.rt.free_host_raw(self.ptr) {
            tracing::error!(
                ptr = ?self.ptr,
                bytes = self.len,
                "dropping a HostBuffer failed to free its pinned memory: {e}"
            );
        }
    }
}
