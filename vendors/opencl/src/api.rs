//! `impl DeviceApi for OpenClVendor`: dispatch to the device, memory,
//! stream and event modules. Collectives and virtual memory are the
//! trait's defaults (`Unsupported`): OpenCL has neither.

use std::ffi::c_void;

use dipu_deviceapi::{
    Capabilities, CopyKind, DeviceApi, DeviceProperties, EventHandle, HostCallback, MemoryInfo,
    PriorityRange, Result, StreamHandle,
};

use crate::OpenClVendor;

impl DeviceApi for OpenClVendor {
    fn name(&self) -> &str {
        "opencl"
    }

    fn version(&self) -> String {
        self.version_text().to_owned()
    }

    fn capabilities(&self) -> Capabilities {
        self.caps()
    }

    dipu_vendorkit::forward! {
        fn device_count() -> Result<i32> = count;
        fn current_device() -> Result<i32> = current;
        fn set_device(device: i32) -> Result<()> = set_current;
        fn synchronize_device() -> Result<()> = synchronize;
        fn device_properties(device: i32) -> Result<DeviceProperties> = properties;
        fn memory_info() -> Result<MemoryInfo> = mem_info;
        fn malloc(bytes: usize) -> Result<*mut c_void> = alloc;
        fn malloc_host(bytes: usize) -> Result<*mut c_void> = alloc_host;
        fn stream_priority_range() -> Result<PriorityRange> = priorities;
        fn stream_create(priority: i32) -> Result<StreamHandle> = create_stream;
        fn event_create(timing: bool) -> Result<EventHandle> = create_event;
        fn native_stream(stream: StreamHandle) -> Result<u64> = native_queue;
    }

    dipu_vendorkit::forward_unsafe! {
        fn free(ptr: *mut c_void) -> Result<()> = dealloc;
        fn free_host(ptr: *mut c_void) -> Result<()> = dealloc_host;
        fn memset(ptr: *mut c_void, value: u8, bytes: usize) -> Result<()> = fill, None;
        fn memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: CopyKind)
            -> Result<()> = copy, None;
        fn memcpy_peer(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize)
            -> Result<()> = copy_peer, None;
        fn stream_destroy(stream: StreamHandle) -> Result<()> = destroy_stream;
        fn stream_synchronize(stream: StreamHandle) -> Result<()> = sync_stream;
        fn stream_query(stream: StreamHandle) -> Result<bool> = query_stream;
        fn stream_wait_event(stream: StreamHandle, event: EventHandle) -> Result<()> = wait_event;
        fn launch_host_func(stream: StreamHandle, callback: HostCallback) -> Result<()> = host_func;
        fn event_destroy(event: EventHandle) -> Result<()> = destroy_event;
        fn event_record(event: EventHandle, stream: StreamHandle) -> Result<()> = record;
        fn event_query(event: EventHandle) -> Result<bool> = query_event;
        fn event_synchronize(event: EventHandle) -> Result<()> = sync_event;
        fn event_elapsed_ms(start: EventHandle, end: EventHandle) -> Result<f32> = elapsed;
    }

    unsafe fn memset_async(
        &self,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        // SAFETY: forwarded from the trait's contract.
        unsafe { self.fill(ptr, value, bytes, Some(stream)) }
    }

    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: StreamHandle,
    ) -> Result<()> {
        // SAFETY: forwarded from the trait's contract.
        unsafe { self.copy(dst, src, bytes, kind, Some(stream)) }
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
        // SAFETY: forwarded from the trait's contract.
        unsafe { self.copy_peer(dst, dst_device, src, src_device, bytes, Some(stream)) }
    }
}
