//! `Profiled`: the `DeviceApi` decorator itself.

use std::ffi::c_void;
use std::sync::Arc;

use dipu_deviceapi::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, EventHandle,
    HostCallback, MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result, StreamHandle,
};

use super::device::DeviceTimes;
use crate::{enabled, now_ns, Arg, Args, Category, Event, Phase, Track};

/// A vendor whose calls are recorded while the trace is on.
pub(super) struct Profiled {
    pub(super) inner: Arc<dyn DeviceApi>,
    pub(super) device: Arc<DeviceTimes>,
}

/// Records the host slice of a vendor call that started at `t0`.
fn host_slice<T>(name: &'static str, cat: Category, t0: u64, args: Args, result: &Result<T>) {
    let args = match result {
        Ok(_) => args,
        Err(e) => args.with_priority("error", Arg::Str(e.kind().as_str())),
    };
    crate::complete(name, cat, Track::current_thread(), t0, now_ns() - t0, args);
}

/// A call with only a host time: `host!(self, method(args..), Args)`.
macro_rules! host {
    ($self:ident, $method:ident($($arg:expr),*), $args:expr) => {{
        if enabled() {
            let t0 = now_ns();
            // SAFETY: every argument is forwarded unchanged, so the
            // caller's `DeviceApi` contract carries over to the vendor.
            #[allow(unused_unsafe)]
            let result = unsafe { $self.inner.$method($($arg),*) };
            host_slice(stringify!($method), Category::Vendor, t0, $args, &result);
            result
        } else {
            // SAFETY: as above.
            #[allow(unused_unsafe)]
            unsafe { $self.inner.$method($($arg),*) }
        }
    }};
}

/// A call that queues work on `stream`: its host time, and its device
/// time on the stream's track.
macro_rules! queued {
    ($self:ident, $cat:expr, $method:ident($($arg:expr),*), $stream:expr, $args:expr) => {{
        if enabled() {
            let t0 = now_ns();
            let begun = $self.device.begin($stream);
            // SAFETY: every argument is forwarded unchanged, so the
            // caller's `DeviceApi` contract carries over to the vendor.
            let result = unsafe { $self.inner.$method($($arg),*) };
            let args: Args = $args;
            host_slice(stringify!($method), $cat, t0, args, &result);
            if let Some(b) = begun {
                $self.device.end(b, stringify!($method), $cat, args, None);
            }
            result
        } else {
            // SAFETY: as above.
            unsafe { $self.inner.$method($($arg),*) }
        }
    }};
}

fn ptr(p: *const c_void) -> u64 {
    p as usize as u64
}

fn copy_kind(kind: CopyKind) -> &'static str {
    match kind {
        CopyKind::HostToDevice => "HtoD",
        CopyKind::DeviceToHost => "DtoH",
        CopyKind::DeviceToDevice => "DtoD",
        CopyKind::HostToHost => "HtoH",
    }
}

fn collective(count: usize, dtype: DataType, comm: CommHandle) -> Args {
    Args::new()
        .u64("count", count as u64)
        .u64("bytes", (count * dtype.size_in_bytes()) as u64)
        .hex("comm", comm.as_raw())
}

impl DeviceApi for Profiled {
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
        host!(self, device_count(), Args::new())
    }
    fn current_device(&self) -> Result<i32> {
        host!(self, current_device(), Args::new())
    }
    fn set_device(&self, device: i32) -> Result<()> {
        host!(
            self,
            set_device(device),
            Args::new().i64("device", device.into())
        )
    }
    fn synchronize_device(&self) -> Result<()> {
        host!(self, synchronize_device(), Args::new())
    }
    fn device_properties(&self, device: i32) -> Result<DeviceProperties> {
        host!(
            self,
            device_properties(device),
            Args::new().i64("device", device.into())
        )
    }
    fn memory_info(&self) -> Result<MemoryInfo> {
        host!(self, memory_info(), Args::new())
    }
    fn malloc(&self, bytes: usize) -> Result<*mut c_void> {
        host!(self, malloc(bytes), Args::new().u64("bytes", bytes as u64))
    }
    unsafe fn free(&self, p: *mut c_void) -> Result<()> {
        host!(self, free(p), Args::new().hex("ptr", ptr(p)))
    }
    fn malloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        host!(
            self,
            malloc_host(bytes),
            Args::new().u64("bytes", bytes as u64)
        )
    }
    unsafe fn free_host(&self, p: *mut c_void) -> Result<()> {
        host!(self, free_host(p), Args::new().hex("ptr", ptr(p)))
    }
    unsafe fn memset(&self, p: *mut c_void, value: u8, bytes: usize) -> Result<()> {
        host!(
            self,
            memset(p, value, bytes),
            Args::new().hex("ptr", ptr(p)).u64("bytes", bytes as u64)
        )
    }
    unsafe fn memset_async(
        &self,
        p: *mut c_void,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        queued!(
            self,
            Category::Vendor,
            memset_async(p, value, bytes, stream),
            stream,
            Args::new().hex("ptr", ptr(p)).u64("bytes", bytes as u64)
        )
    }
    unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
    ) -> Result<()> {
        host!(
            self,
            memcpy(dst, src, bytes, kind),
            Args::new()
                .u64("bytes", bytes as u64)
                .str("kind", copy_kind(kind))
        )
    }
    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: StreamHandle,
    ) -> Result<()> {
        queued!(
            self,
            Category::Vendor,
            memcpy_async(dst, src, bytes, kind, stream),
            stream,
            Args::new()
                .u64("bytes", bytes as u64)
                .str("kind", copy_kind(kind))
                .hex("dst", ptr(dst))
                .hex("src", ptr(src))
        )
    }
    unsafe fn memcpy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
    ) -> Result<()> {
        host!(
            self,
            memcpy_peer(dst, dst_device, src, src_device, bytes),
            Args::new()
                .u64("bytes", bytes as u64)
                .i64("dst_device", dst_device.into())
                .i64("src_device", src_device.into())
        )
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
        queued!(
            self,
            Category::Vendor,
            memcpy_peer_async(dst, dst_device, src, src_device, bytes, stream),
            stream,
            Args::new()
                .u64("bytes", bytes as u64)
                .i64("dst_device", dst_device.into())
                .i64("src_device", src_device.into())
        )
    }
    fn stream_priority_range(&self) -> Result<PriorityRange> {
        host!(self, stream_priority_range(), Args::new())
    }
    fn stream_create(&self, priority: i32) -> Result<StreamHandle> {
        let stream = host!(
            self,
            stream_create(priority),
            Args::new().i64("priority", priority.into())
        )?;
        if let Ok(device) = self.inner.current_device() {
            self.device.stream_created(stream, device);
        }
        Ok(stream)
    }
    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<()> {
        self.device.stream_destroyed(stream);
        host!(
            self,
            stream_destroy(stream),
            Args::new().hex("stream", stream.as_raw())
        )
    }
    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> Result<()> {
        host!(
            self,
            stream_synchronize(stream),
            Args::new().hex("stream", stream.as_raw())
        )
    }
    unsafe fn stream_query(&self, stream: StreamHandle) -> Result<bool> {
        host!(
            self,
            stream_query(stream),
            Args::new().hex("stream", stream.as_raw())
        )
    }
    unsafe fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { self.inner.stream_wait_event(stream, event) };
        }
        let t0 = now_ns();
        let begun = self.device.begin(stream);
        // SAFETY: as above.
        let result = unsafe { self.inner.stream_wait_event(stream, event) };
        let args = Args::new()
            .hex("stream", stream.as_raw())
            .hex("event", event.as_raw());
        host_slice("stream_wait_event", Category::Stream, t0, args, &result);
        let flow = self.device.flow_of(event).map(Phase::FlowEnd);
        if let Some(b) = begun {
            self.device
                .end(b, "stream_wait_event", Category::Stream, args, flow);
        }
        result
    }
    unsafe fn launch_host_func(&self, stream: StreamHandle, callback: HostCallback) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { self.inner.launch_host_func(stream, callback) };
        }
        let t0 = now_ns();
        let queued_at = t0;
        let timed: HostCallback = Box::new(move || {
            let t = now_ns();
            callback();
            crate::complete(
                "host_callback",
                Category::Callback,
                Track::current_thread(),
                t,
                now_ns() - t,
                Args::new().u64("queued_us_ago", (t - queued_at) / 1000),
            );
        });
        // SAFETY: as above.
        let result = unsafe { self.inner.launch_host_func(stream, timed) };
        let args = Args::new().hex("stream", stream.as_raw());
        host_slice("launch_host_func", Category::Callback, t0, args, &result);
        result
    }
    fn event_create(&self, timing: bool) -> Result<EventHandle> {
        host!(
            self,
            event_create(timing),
            Args::new().u64("timing", timing.into())
        )
    }
    unsafe fn event_destroy(&self, event: EventHandle) -> Result<()> {
        self.device.event_destroyed(event);
        host!(
            self,
            event_destroy(event),
            Args::new().hex("event", event.as_raw())
        )
    }
    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { self.inner.event_record(event, stream) };
        }
        let t0 = now_ns();
        let begun = self.device.begin(stream);
        // SAFETY: as above.
        let result = unsafe { self.inner.event_record(event, stream) };
        let args = Args::new()
            .hex("stream", stream.as_raw())
            .hex("event", event.as_raw());
        host_slice("event_record", Category::Stream, t0, args, &result);
        if let Some(b) = begun {
            let flow = result
                .is_ok()
                .then(|| Phase::FlowStart(self.device.flow_for_record(event)));
            self.device
                .end(b, "event_record", Category::Stream, args, flow);
        }
        result
    }
    unsafe fn event_query(&self, event: EventHandle) -> Result<bool> {
        host!(
            self,
            event_query(event),
            Args::new().hex("event", event.as_raw())
        )
    }
    unsafe fn event_synchronize(&self, event: EventHandle) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { self.inner.event_synchronize(event) };
        }
        let t0 = now_ns();
        // SAFETY: as above.
        let result = unsafe { self.inner.event_synchronize(event) };
        let args = Args::new().hex("event", event.as_raw());
        host_slice("event_synchronize", Category::Stream, t0, args, &result);
        if let Some(id) = self.device.flow_of(event) {
            crate::record(Event {
                name: "event",
                cat: Category::Stream,
                phase: Phase::FlowEnd(id),
                track: Track::current_thread(),
                ts_ns: t0,
                args: Args::new(),
            });
        }
        result
    }
    unsafe fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        host!(self, event_elapsed_ms(start, end), Args::new())
    }
    fn comm_unique_id_size(&self) -> usize {
        self.inner.comm_unique_id_size()
    }
    fn comm_get_unique_id(&self) -> Result<Vec<u8>> {
        host!(self, comm_get_unique_id(), Args::new())
    }
    fn comm_init_rank(&self, world_size: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle> {
        let args = Args::new()
            .i64("world_size", world_size.into())
            .i64("rank", rank.into());
        if !enabled() {
            return self.inner.comm_init_rank(world_size, unique_id, rank);
        }
        let t0 = now_ns();
        let result = self.inner.comm_init_rank(world_size, unique_id, rank);
        host_slice("comm_init_rank", Category::Comm, t0, args, &result);
        result
    }
    unsafe fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
        host!(
            self,
            comm_destroy(comm),
            Args::new().hex("comm", comm.as_raw())
        )
    }
    unsafe fn comm_abort(&self, comm: CommHandle) -> Result<()> {
        host!(
            self,
            comm_abort(comm),
            Args::new().hex("comm", comm.as_raw())
        )
    }
    unsafe fn comm_async_error(&self, comm: CommHandle) -> Result<()> {
        host!(
            self,
            comm_async_error(comm),
            Args::new().hex("comm", comm.as_raw())
        )
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
        queued!(
            self,
            Category::Comm,
            all_reduce(send, recv, count, dtype, op, comm, stream),
            stream,
            collective(count, dtype, comm)
        )
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
        queued!(
            self,
            Category::Comm,
            broadcast(send, recv, count, dtype, root, comm, stream),
            stream,
            collective(count, dtype, comm).i64("root", root.into())
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
        queued!(
            self,
            Category::Comm,
            all_gather(send, recv, send_count, dtype, comm, stream),
            stream,
            collective(send_count, dtype, comm)
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
        queued!(
            self,
            Category::Comm,
            reduce_scatter(send, recv, recv_count, dtype, op, comm, stream),
            stream,
            collective(recv_count, dtype, comm)
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
        queued!(
            self,
            Category::Comm,
            reduce(send, recv, count, dtype, op, root, comm, stream),
            stream,
            collective(count, dtype, comm).i64("root", root.into())
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
        queued!(
            self,
            Category::Comm,
            send(buf, count, dtype, peer, comm, stream),
            stream,
            collective(count, dtype, comm).i64("peer", peer.into())
        )
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
        queued!(
            self,
            Category::Comm,
            recv(buf, count, dtype, peer, comm, stream),
            stream,
            collective(count, dtype, comm).i64("peer", peer.into())
        )
    }
    fn group_start(&self) -> Result<()> {
        host!(self, group_start(), Args::new())
    }
    fn group_end(&self) -> Result<()> {
        host!(self, group_end(), Args::new())
    }
    fn vmm_granularity(&self) -> Result<usize> {
        host!(self, vmm_granularity(), Args::new())
    }
    fn vmm_reserve(&self, bytes: usize) -> Result<*mut c_void> {
        host!(
            self,
            vmm_reserve(bytes),
            Args::new().u64("bytes", bytes as u64)
        )
    }
    unsafe fn vmm_free_reservation(&self, p: *mut c_void, bytes: usize) -> Result<()> {
        host!(
            self,
            vmm_free_reservation(p, bytes),
            Args::new().hex("ptr", ptr(p)).u64("bytes", bytes as u64)
        )
    }
    fn vmm_create(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        host!(
            self,
            vmm_create(bytes),
            Args::new().u64("bytes", bytes as u64)
        )
    }
    unsafe fn vmm_release(&self, handle: PhysicalMemHandle) -> Result<()> {
        host!(
            self,
            vmm_release(handle),
            Args::new().hex("handle", handle.as_raw())
        )
    }
    unsafe fn vmm_map(
        &self,
        p: *mut c_void,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        host!(
            self,
            vmm_map(p, bytes, handle),
            Args::new().hex("ptr", ptr(p)).u64("bytes", bytes as u64)
        )
    }
    unsafe fn vmm_unmap(&self, p: *mut c_void, bytes: usize) -> Result<()> {
        host!(
            self,
            vmm_unmap(p, bytes),
            Args::new().hex("ptr", ptr(p)).u64("bytes", bytes as u64)
        )
    }
}
