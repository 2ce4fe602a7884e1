//! `impl DeviceApi for HostVendor`: argument checks and dispatch to the
//! memory, stream, event and virtual-memory modules.

use std::ffi::c_void;

use dipu_deviceapi::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, Error, ErrorKind,
    EventHandle, HostCallback, MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result,
    StreamHandle,
};

use crate::comm::{self, Call};
use crate::memory::Kind;
use crate::ops::{Checked, Describe};
use crate::stream::{Op, Ran};
use crate::wait::Waiter;
use crate::{describe, device, event, ops, vmm, HostVendor};

/// Stream priorities, as on recent CUDA GPUs.
const PRIORITIES: PriorityRange = PriorityRange {
    least: 0,
    greatest: -5,
};

impl DeviceApi for HostVendor {
    fn name(&self) -> &str {
        "host"
    }

    fn version(&self) -> String {
        describe(self)
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::VIRTUAL_MEMORY;
        caps.set(
            Capabilities::HOST_ACCESSIBLE_MEMORY,
            self.config.host_accessible,
        );
        caps.set(Capabilities::COLLECTIVES, self.config.collectives);
        caps
    }

    fn device_count(&self) -> Result<i32> {
        Ok(self.config.devices)
    }

    fn current_device(&self) -> Result<i32> {
        Ok(self.device())
    }

    fn set_device(&self, device: i32) -> Result<()> {
        self.check_device(device)?;
        device::set_current(self.id, device);
        Ok(())
    }

    fn synchronize_device(&self) -> Result<()> {
        for stream in self.streams.all(Some(self.device())) {
            stream.synchronize();
        }
        self.errors.check()
    }

    fn device_properties(&self, device: i32) -> Result<DeviceProperties> {
        self.check_device(device)?;
        Ok(DeviceProperties {
            name: format!("dipu host device {device}"),
            total_memory: self.memory.capacity(),
            major: 1,
            minor: 0,
            multiprocessor_count: self.cores,
        })
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        let total = self.memory.capacity();
        Ok(MemoryInfo {
            free: total.saturating_sub(self.memory.used(self.device())),
            total,
        })
    }

    // ---- memory ---------------------------------------------------------

    fn malloc(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let device = self.device();
        let size = bytes as u64;
        if let Some(message) = self.faults.on_malloc(size, device) {
            return Err(Error::new(ErrorKind::OutOfMemory, message));
        }
        self.memory
            .alloc_device(device, bytes)
            .inspect_err(|_| self.faults.undo(size))
    }

    unsafe fn free(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let region = self.memory.check_free(ptr as usize, false)?;
        // Like cudaFree, wait for the device's streams first, so work queued
        // on the memory finishes before it goes.
        let device = match region.kind {
            Kind::Device { device } => Some(device),
            _ => None,
        };
        for stream in self.streams.all(device) {
            stream.synchronize();
        }
        self.memory.dealloc(ptr as usize, false)
    }

    fn malloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.memory.alloc_pinned(bytes)
    }

    unsafe fn free_host(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        self.memory.check_free(ptr as usize, true)?;
        // Like cudaFreeHost, wait for every stream first.
        for stream in self.streams.all(None) {
            stream.synchronize();
        }
        self.memory.dealloc(ptr as usize, true)
    }

    unsafe fn memset(&self, ptr: *mut c_void, value: u8, bytes: usize) -> Result<()> {
        let at = ptr as usize;
        let call = move || format!("memset({at:#x}, {value:#04x}, {bytes})");
        self.run_sync(ops::memset(&self.memory, call, ptr, value, bytes))
    }

    unsafe fn memset_async(
        &self,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        let at = ptr as usize;
        let call = move || format!("memset_async({at:#x}, {value:#04x}, {bytes}, {stream:?})");
        self.run_async(stream, ops::memset(&self.memory, call, ptr, value, bytes))
    }

    unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
    ) -> Result<()> {
        let (to, from) = (dst as usize, src as usize);
        let call = move || format!("memcpy({to:#x}, {from:#x}, {bytes}, {kind:?})");
        self.run_sync(ops::memcpy(&self.memory, call, dst, src, bytes, kind)?)
    }

    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: StreamHandle,
    ) -> Result<()> {
        let (to, from) = (dst as usize, src as usize);
        let call =
            move || format!("memcpy_async({to:#x}, {from:#x}, {bytes}, {kind:?}, {stream:?})");
        let Some(op) = ops::memcpy(&self.memory, call, dst, src, bytes, kind)? else {
            self.stream(stream)?;
            return Ok(());
        };
        // A copy between a device and pageable host memory on an idle
        // stream is done on the calling thread: finished early, which an
        // asynchronous copy may be, and which CUDA's is for pageable memory
        // ("API synchronization behavior": to pageable memory, "the function
        // will return only once the copy has completed"). On a busy stream
        // it is queued, so the host does not wait. A range found invalid
        // when it runs here is this call's error; once queued, the
        // stream's next synchronisation reports it.
        let host_side = match kind {
            CopyKind::DeviceToHost => Some(dst as usize),
            CopyKind::HostToDevice => Some(src as usize),
            _ => None,
        };
        let pageable = |addr: usize| !matches!(self.memory.read().containing(addr), Some((_, r)) if r.kind == Kind::Pinned);
        let target = self.stream(stream)?;
        // The idleness, an atomic, before the pinned lookup, which locks.
        let op = if host_side.is_some_and(|addr| target.is_idle() && pageable(addr)) {
            match target.run_if_idle(op, Checked::run_here)? {
                Ran::Here(done) => return done,
                Ran::Busy(op) => op,
            }
        } else {
            op
        };
        target.submit(op.into_op()?).map(drop)
    }

    unsafe fn memcpy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
    ) -> Result<()> {
        let op = self.peer_op(dst, dst_device, src, src_device, bytes, None)?;
        self.run_sync(op)
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
        let op = self.peer_op(dst, dst_device, src, src_device, bytes, Some(stream))?;
        self.run_async(stream, op)
    }

    // ---- streams --------------------------------------------------------

    fn stream_priority_range(&self) -> Result<PriorityRange> {
        Ok(PRIORITIES)
    }

    fn stream_create(&self, priority: i32) -> Result<StreamHandle> {
        self.streams
            .create(self.device(), PRIORITIES.clamp(priority))
    }

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<()> {
        self.streams.destroy(stream)
    }

    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> Result<()> {
        self.stream(stream)?.synchronize();
        self.errors.check()
    }

    unsafe fn stream_query(&self, stream: StreamHandle) -> Result<bool> {
        let idle = self.streams.with(stream, self.device(), |s| s.is_idle())?;
        self.errors.check().map(|()| idle)
    }

    unsafe fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let stream = self.stream(stream)?;
        let event = self.events.get(event)?;
        let Some(mark) = event.mark() else {
            return Ok(()); // never recorded: already done
        };
        let phases = self.config.schedule.phases(Waiter::Worker);
        let op: Op = Box::new(move || {
            mark.wait(phases);
            Ok(())
        });
        stream.submit(op).map(drop)
    }

    unsafe fn launch_host_func(&self, stream: StreamHandle, callback: HostCallback) -> Result<()> {
        let op: Op = Box::new(move || {
            callback();
            Ok(())
        });
        self.stream(stream)?.submit(op).map(drop)
    }

    // ---- events ---------------------------------------------------------

    fn event_create(&self, timing: bool) -> Result<EventHandle> {
        Ok(self.events.create(self.device(), timing))
    }

    unsafe fn event_destroy(&self, event: EventHandle) -> Result<()> {
        self.events.destroy(event)
    }

    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        let stream = self.stream(stream)?;
        self.events.get(event)?.record(event, &stream)
    }

    unsafe fn event_query(&self, event: EventHandle) -> Result<bool> {
        let done = self.events.get(event)?.is_complete();
        self.errors.check().map(|()| done)
    }

    unsafe fn event_synchronize(&self, event: EventHandle) -> Result<()> {
        if let Some(mark) = self.events.get(event)?.mark() {
            mark.wait(self.config.schedule.phases(Waiter::Caller));
        }
        self.errors.check()
    }

    unsafe fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let (a, b) = (self.events.get(start)?, self.events.get(end)?);
        event::elapsed_ms((&a, start), (&b, end))
    }

    // ---- collectives (see the `comm` module) ----------------------------

    fn comm_unique_id_size(&self) -> usize {
        if self.config.collectives {
            comm::UNIQUE_ID_SIZE
        } else {
            0
        }
    }

    fn comm_get_unique_id(&self) -> Result<Vec<u8>> {
        self.collectives_on("comm_get_unique_id")?;
        comm::new_unique_id()
    }

    fn comm_init_rank(&self, world_size: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle> {
        self.collectives_on("comm_init_rank")?;
        self.comm_init(world_size, unique_id, rank)
    }

    unsafe fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
        self.collectives_on("comm_destroy")?;
        self.comm_remove(comm)
    }

    unsafe fn comm_abort(&self, comm: CommHandle) -> Result<()> {
        self.collectives_on("comm_abort")?;
        self.comm_kill(comm)
    }

    unsafe fn comm_async_error(&self, comm: CommHandle) -> Result<()> {
        self.collectives_on("comm_async_error")?;
        self.comm_error(comm)
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
        self.collectives_on("all_reduce")?;
        let kind = comm::Kind::AllReduce;
        let call = Call {
            kind,
            send,
            recv,
            count,
            dtype,
            op: Some(op),
            root: 0,
        };
        self.comm_collective(call, comm, stream)
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
        self.collectives_on("broadcast")?;
        let kind = comm::Kind::Broadcast;
        let call = Call {
            kind,
            send,
            recv,
            count,
            dtype,
            op: None,
            root,
        };
        self.comm_collective(call, comm, stream)
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
        self.collectives_on("all_gather")?;
        let (kind, count) = (comm::Kind::AllGather, send_count);
        let call = Call {
            kind,
            send,
            recv,
            count,
            dtype,
            op: None,
            root: 0,
        };
        self.comm_collective(call, comm, stream)
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
        self.collectives_on("reduce_scatter")?;
        let (kind, count) = (comm::Kind::ReduceScatter, recv_count);
        let call = Call {
            kind,
            send,
            recv,
            count,
            dtype,
            op: Some(op),
            root: 0,
        };
        self.comm_collective(call, comm, stream)
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
        self.collectives_on("reduce")?;
        let kind = comm::Kind::Reduce;
        let call = Call {
            kind,
            send,
            recv,
            count,
            dtype,
            op: Some(op),
            root,
        };
        self.comm_collective(call, comm, stream)
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
        self.collectives_on("send")?;
        self.comm_p2p(true, buf as usize, (count, dtype), peer, (comm, stream))
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
        self.collectives_on("recv")?;
        self.comm_p2p(false, buf as usize, (count, dtype), peer, (comm, stream))
    }

    fn group_start(&self) -> Result<()> {
        self.collectives_on("group_start")?;
        self.comm_group_start();
        Ok(())
    }

    fn group_end(&self) -> Result<()> {
        self.collectives_on("group_end")?;
        self.comm_group_end()
    }

    // ---- virtual memory -------------------------------------------------

    fn vmm_granularity(&self) -> Result<usize> {
        Ok(vmm::GRANULARITY)
    }

    fn vmm_reserve(&self, bytes: usize) -> Result<*mut c_void> {
        self.vmm.reserve(bytes)
    }

    unsafe fn vmm_free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        self.vmm.free_reservation(&self.memory, ptr as usize, bytes)
    }

    fn vmm_create(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        if let Some(message) = self.faults.on_vmm_create() {
            return Err(Error::new(ErrorKind::OutOfMemory, message));
        }
        self.vmm.create(&self.memory, self.device(), bytes)
    }

    unsafe fn vmm_release(&self, handle: PhysicalMemHandle) -> Result<()> {
        self.vmm.release(&self.memory, handle)
    }

    unsafe fn vmm_map(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        self.vmm.map(&self.memory, ptr as usize, bytes, handle)
    }

    unsafe fn vmm_unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        if let Some(message) = self.faults.on_vmm_unmap() {
            return Err(Error::new(ErrorKind::VendorError, message));
        }
        self.vmm.unmap(&self.memory, ptr as usize, bytes)
    }
}

impl HostVendor {
    /// `Unsupported` for collective call `call` when the collectives are
    /// hidden (`DIPU_HOST_COLLECTIVES=0`), as a vendor without them answers.
    fn collectives_on(&self, call: &str) -> Result<()> {
        if self.config.collectives {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{call}: the host vendor's collectives are hidden ({}=0)",
                crate::ENV_COLLECTIVES
            ),
        ))
    }

    /// Checks both devices and builds a peer copy.
    fn peer_op(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
        stream: Option<StreamHandle>,
    ) -> Result<Option<Checked<'_, impl Describe, impl FnOnce() + Send + 'static>>> {
        let (to, from) = (dst as usize, src as usize);
        let call = move || {
            match stream {
            Some(s) => format!(
                "memcpy_peer_async({to:#x} on {dst_device}, {from:#x} on {src_device}, {bytes}, {s:?})"
            ),
            None => {
                format!("memcpy_peer({to:#x} on {dst_device}, {from:#x} on {src_device}, {bytes})")
            }
        }
        };
        self.check_device(dst_device)
            .map_err(|e| e.context(call()))?;
        self.check_device(src_device)
            .map_err(|e| e.context(call()))?;
        ops::memcpy_peer(
            &self.memory,
            call,
            (dst, dst_device),
            (src, src_device),
            bytes,
        )
    }
}
