//! The `DeviceApi` trait: the one thing a vendor implements.

use std::ffi::c_void;

use crate::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceProperties, Error, EventHandle, MemoryInfo,
    PhysicalMemHandle, PriorityRange, ReduceOp, Result, StreamHandle,
};

/// Work run on the host once everything queued before it on a stream is done.
pub type HostCallback = Box<dyn FnOnce() + Send + 'static>;

/// A vendor's device runtime, with the semantics of CUDA's runtime API.
///
/// Devices are indexed `0..device_count()`. Like `cudaSetDevice`, the current
/// device is per host thread and starts at 0; calls that take no device act
/// on the current one. [`StreamHandle::DEFAULT`] names the current device's
/// default stream. Streams behave like CUDA's non-blocking streams: work on
/// one stream runs in order, and streams are ordered against each other only
/// through events.
///
/// Methods that take a raw pointer or a handle are `unsafe`: the caller
/// promises the pointer or handle came from this vendor (or is valid host
/// memory where a host pointer is expected) and is still alive. Vendors
/// should still reject what they can detect with [`crate::ErrorKind::InvalidArgument`].
///
/// Optional capabilities (collectives, virtual memory) have default methods
/// that return [`crate::ErrorKind::Unsupported`]; [`DeviceApi::capabilities`]
/// says which ones the vendor really implements, and whether its device
/// memory is host-accessible (a property, with no methods of its own).
///
/// # Safety
///
/// For every `unsafe fn` below, the caller guarantees: every pointer and handle
/// argument was returned by this same vendor and has not been freed or
/// destroyed (host pointers may also be ordinary host memory valid for the
/// given number of bytes); asynchronous operations keep their buffers alive
/// until the stream has passed them.
pub trait DeviceApi: Send + Sync + 'static {
    // ---- identity -------------------------------------------------------

    /// The vendor's short name (`"host"`, `"cuda"`, `"cambricon"`, `"ascend"`).
    fn name(&self) -> &str;

    /// The vendor runtime's version in words (e.g. `"CUDA runtime 13.0"`).
    fn version(&self) -> String;

    /// Which optional capabilities this vendor implements.
    fn capabilities(&self) -> Capabilities {
        Capabilities::empty()
    }

    // ---- devices --------------------------------------------------------

    /// Number of devices; a machine without devices gives `NoDevice`.
    fn device_count(&self) -> Result<i32>;

    /// The calling thread's current device.
    fn current_device(&self) -> Result<i32>;

    /// Makes `device` current for the calling thread.
    fn set_device(&self, device: i32) -> Result<()>;

    /// Waits until all work on every stream of the current device is done.
    fn synchronize_device(&self) -> Result<()>;

    /// Name, memory, version and core count of `device`.
    fn device_properties(&self, device: i32) -> Result<DeviceProperties>;

    /// Free and total memory of the current device.
    fn memory_info(&self) -> Result<MemoryInfo>;

    // ---- memory ---------------------------------------------------------

    /// Allocates `bytes` of device memory on the current device. Zero bytes
    /// gives a null pointer and no error, as `cudaMalloc` does.
    fn malloc(&self, bytes: usize) -> Result<*mut c_void>;

    /// Frees device memory from [`DeviceApi::malloc`]. Null is a no-op. Like
    /// `cudaFree`, it may first wait for the device's queued work.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn free(&self, ptr: *mut c_void) -> Result<()>;

    /// Allocates `bytes` of page-locked host memory (zero bytes: null, no error).
    fn malloc_host(&self, bytes: usize) -> Result<*mut c_void>;

    /// Frees memory from [`DeviceApi::malloc_host`]. Null is a no-op. Like
    /// `cudaFreeHost`, it may first wait for queued work.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn free_host(&self, ptr: *mut c_void) -> Result<()>;

    /// Sets `bytes` bytes of device memory to `value`, synchronously.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn memset(&self, ptr: *mut c_void, value: u8, bytes: usize) -> Result<()>;

    /// Sets `bytes` bytes of device memory to `value`, in order on `stream`.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn memset_async(
        &self,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;

    /// Copies `bytes` bytes in direction `kind` and returns when done. Device
    /// memory may belong to any device (unified addressing), as in CUDA.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
    ) -> Result<()>;

    /// Copies `bytes` bytes in direction `kind`, in order on `stream`.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: StreamHandle,
    ) -> Result<()>;

    /// Copies between memory of two devices and returns when done.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn memcpy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
    ) -> Result<()>;

    /// Copies between memory of two devices, in order on `stream`.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn memcpy_peer_async(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;

    // ---- streams --------------------------------------------------------

    /// The priorities [`DeviceApi::stream_create`] accepts on the current
    /// device, on CUDA's scale (`least` is 0, `greatest` is ≤ 0).
    fn stream_priority_range(&self) -> Result<PriorityRange>;

    /// Creates a stream on the current device; never returns
    /// [`StreamHandle::DEFAULT`]. Priorities are CUDA's: 0 is
    /// the normal priority and negative values are more urgent, down to
    /// [`DeviceApi::stream_priority_range`]'s `greatest`; values outside the
    /// range are clamped. A vendor with another native scale (CNRT: 7 lowest
    /// to 0 highest) translates it.
    fn stream_create(&self, priority: i32) -> Result<StreamHandle>;

    /// Destroys a stream once its queued work is done. The default stream
    /// cannot be destroyed.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<()>;

    /// Waits until all work queued on `stream` is done.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> Result<()>;

    /// Whether all work queued on `stream` is done (`true`) or still pending.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn stream_query(&self, stream: StreamHandle) -> Result<bool>;

    /// Makes later work on `stream` wait until `event`'s last record is done;
    /// the host does not wait. An event never recorded is already done.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()>;

    /// Runs `callback` on a host thread after all earlier work on `stream`;
    /// later work on `stream` waits for it. It must not call the vendor.
    /// Host functions of different streams may run on one and the same
    /// thread, one after another (CUDA: they "execute in undefined order and
    /// may be serialized"), so a callback must not wait for another stream's
    /// callback.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn launch_host_func(&self, stream: StreamHandle, callback: HostCallback) -> Result<()>;

    // ---- events ---------------------------------------------------------

    /// Creates an event on the current device; `timing` enables
    /// [`DeviceApi::event_elapsed_ms`] (timing-free events are cheaper).
    fn event_create(&self, timing: bool) -> Result<EventHandle>;

    /// Destroys an event (pending records still complete).
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn event_destroy(&self, event: EventHandle) -> Result<()>;

    /// Captures the work queued on `stream` so far; the event completes when
    /// that work is done. Re-recording replaces the earlier capture. The
    /// stream must belong to the event's device (the one current at
    /// [`DeviceApi::event_create`]).
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<()>;

    /// Whether the event's last record is done (`true` if never recorded).
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn event_query(&self, event: EventHandle) -> Result<bool>;

    /// Waits on the host until the event's last record is done.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn event_synchronize(&self, event: EventHandle) -> Result<()>;

    /// Milliseconds from `start` to `end` for two completed timing events
    /// (negative when `end` completed first). A pending event gives
    /// `NotReady`; a timing-free or never-recorded one `InvalidArgument`.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32>;

    // ---- collectives (optional) -----------------------------------------

    /// Bytes in this vendor's communicator unique id (128 for NCCL, 136 for
    /// CNCL, 4108 for HCCL).
    fn comm_unique_id_size(&self) -> usize {
        0
    }

    /// A fresh unique id, made on one rank and shared with the others;
    /// its length is [`DeviceApi::comm_unique_id_size`].
    fn comm_get_unique_id(&self) -> Result<Vec<u8>> {
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Joins communicator `unique_id` as `rank` of `world_size` on the
    /// current device (collective: every rank must call it). A communicator
    /// must not be used by two threads at once (NCCL, HCCL and CNCL do not
    /// allow it); callers serialise its use.
    fn comm_init_rank(&self, world_size: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle> {
        let _ = (world_size, unique_id, rank);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Destroys a communicator after its pending work.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
        let _ = comm;
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Aborts a communicator at once, failing its pending work.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn comm_abort(&self, comm: CommHandle) -> Result<()> {
        let _ = comm;
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// The communicator's asynchronous error, if one happened (`Ok` if healthy).
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn comm_async_error(&self, comm: CommHandle) -> Result<()> {
        let _ = comm;
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Reduces `count` elements from every rank into `recv` on every rank.
    ///
    /// # Safety
    /// See the trait's safety section.
    #[allow(clippy::too_many_arguments)]
    unsafe fn all_reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (send, recv, count, dtype, op, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Copies `count` elements from `send` on `root` into `recv` on every rank
    /// (`send == recv` is allowed, in place).
    ///
    /// # Safety
    /// See the trait's safety section.
    #[allow(clippy::too_many_arguments)]
    unsafe fn broadcast(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        root: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (send, recv, count, dtype, root, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Gathers `send_count` elements from each rank into `recv`, rank order.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn all_gather(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DataType,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (send, recv, send_count, dtype, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Reduces `recv_count * world` elements and leaves each rank its
    /// `recv_count`-element block.
    ///
    /// # Safety
    /// See the trait's safety section.
    #[allow(clippy::too_many_arguments)]
    unsafe fn reduce_scatter(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        dtype: DataType,
        op: ReduceOp,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (send, recv, recv_count, dtype, op, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Reduces `count` elements from every rank into `recv` on `root`.
    ///
    /// # Safety
    /// See the trait's safety section.
    #[allow(clippy::too_many_arguments)]
    unsafe fn reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (send, recv, count, dtype, op, root, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Sends `count` elements to rank `peer`.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn send(
        &self,
        buf: *const c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (buf, count, dtype, peer, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Receives `count` elements from rank `peer`.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn recv(
        &self,
        buf: *mut c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (buf, count, dtype, peer, comm, stream);
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Starts a group: collectives issued until [`DeviceApi::group_end`] by
    /// this thread are launched together.
    fn group_start(&self) -> Result<()> {
        Err(Error::unsupported(self.name(), "collectives"))
    }

    /// Ends a group started by [`DeviceApi::group_start`].
    fn group_end(&self) -> Result<()> {
        Err(Error::unsupported(self.name(), "collectives"))
    }

    // ---- virtual memory (optional) --------------------------------------

    /// The size and alignment unit of physical chunks and mappings on the
    /// current device.
    fn vmm_granularity(&self) -> Result<usize> {
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    /// Reserves `bytes` (a multiple of the granularity) of device address
    /// space, aligned to the granularity, with no memory behind it yet.
    fn vmm_reserve(&self, bytes: usize) -> Result<*mut c_void> {
        let _ = bytes;
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    /// Returns a reservation from [`DeviceApi::vmm_reserve`]; nothing may be
    /// mapped in it any more.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn vmm_free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let _ = (ptr, bytes);
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    /// Creates a physical chunk of `bytes` (a multiple of the granularity) on
    /// the current device; it counts against the device's memory.
    fn vmm_create(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        let _ = bytes;
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    /// Releases a physical chunk; memory returns once it is also unmapped.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn vmm_release(&self, handle: PhysicalMemHandle) -> Result<()> {
        let _ = handle;
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    /// Maps the whole of `handle` at `ptr` (inside a reservation, aligned
    /// to the granularity) with read-write access for the current device.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn vmm_map(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        let _ = (ptr, bytes, handle);
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    /// Unmaps `bytes` at `ptr`, leaving the address range reserved. Like
    /// `cuMemUnmap`, it does not wait for queued work that uses the range.
    ///
    /// # Safety
    /// See the trait's safety section.
    unsafe fn vmm_unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let _ = (ptr, bytes);
        Err(Error::unsupported(self.name(), "virtual memory"))
    }

    // ---- kernel libraries -------------------------------------------------

    /// The handle a kernel library enqueues its work on for `stream` (what
    /// `diopiGetStream` gives it), under the current device. The default:
    /// the raw value, which is what CUDA and ACL take (NULL is their
    /// default stream). A vendor whose API cannot name the default stream
    /// by NULL (OpenCL) answers `StreamHandle::DEFAULT` with the current
    /// device's default queue.
    fn native_stream(&self, stream: StreamHandle) -> Result<u64> {
        Ok(stream.as_raw())
    }
}
