//! A decorator that logs every vendor call at `trace` level (DIPU's
//! `DIPU_TRACK_ACL`, for any vendor): `DIPU_LOG=dipu::vendor_call=trace`.

use std::ffi::c_void;
use std::fmt::Debug;
use std::sync::Arc;

use crate::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, EventHandle,
    HostCallback, MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result, StreamHandle,
};

/// The `tracing` target of per-call vendor traces.
pub const TRACE_TARGET: &str = "dipu::vendor_call";

/// Wraps `api` in [`Traced`] when per-call tracing is enabled, so that it
/// costs nothing otherwise.
pub(crate) fn maybe_traced(api: Arc<dyn DeviceApi>) -> Arc<dyn DeviceApi> {
    if tracing::enabled!(target: TRACE_TARGET, tracing::Level::TRACE) {
        Arc::new(Traced { inner: api })
    } else {
        api
    }
}

/// A vendor whose every call is logged with its arguments and result.
struct Traced {
    inner: Arc<dyn DeviceApi>,
}

impl Traced {
    fn log<T: Debug>(&self, call: std::fmt::Arguments<'_>, result: Result<T>) -> Result<T> {
        match &result {
            Ok(v) => {
                tracing::trace!(target: TRACE_TARGET, vendor = self.inner.name(), "{call} -> {v:?}")
            }
            Err(e) => {
                tracing::trace!(target: TRACE_TARGET, vendor = self.inner.name(), "{call} -> error: {e}")
            }
        }
        result
    }
}

/// Forwards `$method(args)` to the inner vendor and logs it.
macro_rules! fwd {
    ($self:ident, $method:ident($($arg:expr),*)) => {{
        // SAFETY: every argument is forwarded unchanged, so the caller's
        // `DeviceApi` safety contract carries over to the inner vendor.
        #[allow(unused_unsafe)]
        let result = unsafe { $self.inner.$method($($arg),*) };
        $self.log(format_args!(concat!(stringify!($method), "{:?}"), ($(&$arg,)*)), result)
    }};
}

impl DeviceApi for Traced {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn version(&self) -> String {
        self.inner.version()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn device_count(&self) -> Result<i32> {
        fwd!(self, device_count())
    }
    fn current_device(&self) -> Result<i32> {
        fwd!(self, current_device())
    }
    fn set_device(&self, device: i32) -> Result<()> {
        fwd!(self, set_device(device))
    }
    fn synchronize_device(&self) -> Result<()> {
        fwd!(self, synchronize_device())
    }
    fn device_properties(&self, device: i32) -> Result<DeviceProperties> {
        fwd!(self, device_properties(device))
    }
    fn memory_info(&self) -> Result<MemoryInfo> {
        fwd!(self, memory_info())
    }
    fn malloc(&self, bytes: usize) -> Result<*mut c_void> {
        fwd!(self, malloc(bytes))
    }
    unsafe fn free(&self, ptr: *mut c_void) -> Result<()> {
        fwd!(self, free(ptr))
    }
    fn malloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        fwd!(self, malloc_host(bytes))
    }
    unsafe fn free_host(&self, ptr: *mut c_void) -> Result<()> {
        fwd!(self, free_host(ptr))
    }
    unsafe fn memset(&self, ptr: *mut c_void, value: u8, bytes: usize) -> Result<()> {
        fwd!(self, memset(ptr, value, bytes))
    }
    unsafe fn memset_async(
        &self,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        fwd!(self, memset_async(ptr, value, bytes, stream))
    }
    unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
    ) -> Result<()> {
        fwd!(self, memcpy(dst, src, bytes, kind))
    }
    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: StreamHandle,
    ) -> Result<()> {
        fwd!(self, memcpy_async(dst, src, bytes, kind, stream))
    }
    unsafe fn memcpy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
    ) -> Result<()> {
        fwd!(self, memcpy_peer(dst, dst_device, src, src_device, bytes))
    }
    unsafe fn memcpy_peer_async(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        fwd!(
            self,
            memcpy_peer_async(dst, dst_device, src, src_device, bytes, stream)
        )
    }
    fn stream_priority_range(&self) -> Result<PriorityRange> {
        fwd!(self, stream_priority_range())
    }
    fn stream_create(&self, priority: i32) -> Result<StreamHandle> {
        fwd!(self, stream_create(priority))
    }
    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<()> {
        fwd!(self, stream_destroy(stream))
    }
    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> Result<()> {
        fwd!(self, stream_synchronize(stream))
    }
    unsafe fn stream_query(&self, stream: StreamHandle) -> Result<bool> {
        fwd!(self, stream_query(stream))
    }
    unsafe fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        fwd!(self, stream_wait_event(stream, event))
    }
    unsafe fn launch_host_func(&self, stream: StreamHandle, callback: HostCallback) -> Result<()> {
        // SAFETY: forwarded unchanged; the caller's contract carries over.
        let result = unsafe { self.inner.launch_host_func(stream, callback) };
        self.log(format_args!("launch_host_func({stream:?})"), result)
    }
    fn event_create(&self, timing: bool) -> Result<EventHandle> {
        fwd!(self, event_create(timing))
    }
    unsafe fn event_destroy(&self, event: EventHandle) -> Result<()> {
        fwd!(self, event_destroy(event))
    }
    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        fwd!(self, event_record(event, stream))
    }
    unsafe fn event_query(&self, event: EventHandle) -> Result<bool> {
        fwd!(self, event_query(event))
    }
    unsafe fn event_synchronize(&self, event: EventHandle) -> Result<()> {
        fwd!(self, event_synchronize(event))
    }
    unsafe fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        fwd!(self, event_elapsed_ms(start, end))
    }
    fn comm_unique_id_size(&self) -> usize {
        self.inner.comm_unique_id_size()
    }
    fn comm_get_unique_id(&self) -> Result<Vec<u8>> {
        let result = self.inner.comm_get_unique_id();
        self.log(
            format_args!("comm_get_unique_id()"),
            result.as_ref().map(Vec::len).map_err(Clone::clone),
        )?;
        result
    }
    fn comm_init_rank(&self, world_size: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle> {
        let result = self.inner.comm_init_rank(world_size, unique_id, rank);
        self.log(
            format_args!("comm_init_rank(world {world_size}, rank {rank})"),
            result,
        )
    }
    unsafe fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
        fwd!(self, comm_destroy(comm))
    }
    unsafe fn comm_abort(&self, comm: CommHandle) -> Result<()> {
        fwd!(self, comm_abort(comm))
    }
    unsafe fn comm_async_error(&self, comm: CommHandle) -> Result<()> {
        fwd!(self, comm_async_error(comm))
    }
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
        fwd!(self, all_reduce(send, recv, count, dtype, op, comm, stream))
    }
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
        fwd!(
            self,
            broadcast(send, recv, count, dtype, root, comm, stream)
        )
    }
    unsafe fn all_gather(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DataType,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        fwd!(
            self,
            all_gather(send, recv, send_count, dtype, comm, stream)
        )
    }
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
        fwd!(
            self,
            reduce_scatter(send, recv, recv_count, dtype, op, comm, stream)
        )
    }
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
        fwd!(
            self,
            reduce(send, recv, count, dtype, op, root, comm, stream)
        )
    }
    unsafe fn send(
        &self,
        buf: *const c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        fwd!(self, send(buf, count, dtype, peer, comm, stream))
    }
    unsafe fn recv(
        &self,
        buf: *mut c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        fwd!(self, recv(buf, count, dtype, peer, comm, stream))
    }
    fn group_start(&self) -> Result<()> {
        fwd!(self, group_start())
    }
    fn group_end(&self) -> Result<()> {
        fwd!(self, group_end())
    }
    fn vmm_granularity(&self) -> Result<usize> {
        fwd!(self, vmm_granularity())
    }
    fn vmm_reserve(&self, bytes: usize) -> Result<*mut c_void> {
        fwd!(self, vmm_reserve(bytes))
    }
    unsafe fn vmm_free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        fwd!(self, vmm_free_reservation(ptr, bytes))
    }
    fn vmm_create(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        fwd!(self, vmm_create(bytes))
    }
    unsafe fn vmm_release(&self, handle: PhysicalMemHandle) -> Result<()> {
        fwd!(self, vmm_release(handle))
    }
    unsafe fn vmm_map(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        fwd!(self, vmm_map(ptr, bytes, handle))
    }
    unsafe fn vmm_unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        fwd!(self, vmm_unmap(ptr, bytes))
    }
}
