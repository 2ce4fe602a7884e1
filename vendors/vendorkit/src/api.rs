//! The `impl DeviceApi` every run-time-loaded vendor writes the same way:
//! each trait method calls an inherent method of the vendor.

/// Trait methods that call an inherent method with the same arguments (and
/// optionally more): `fn trait_method(args) -> Ret = inherent, extra...;`.
/// For use inside an `impl DeviceApi` block.
#[macro_export]
macro_rules! forward {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $target:ident $(, $extra:expr)*;)*) => {$(
        fn $name(&self, $($arg: $ty),*) -> $ret {
            self.$target($($arg,)* $($extra),*)
        }
    )*};
}

/// As [`forward!`], for the trait's `unsafe` methods.
#[macro_export]
macro_rules! forward_unsafe {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $target:ident $(, $extra:expr)*;)*) => {$(
        unsafe fn $name(&self, $($arg: $ty),*) -> $ret {
            // SAFETY: the inherent method has the trait method's contract.
            unsafe { self.$target($($arg,)* $($extra),*) }
        }
    )*};
}

/// `device_api!(Vendor, "name");` implements `DeviceApi` for `Vendor`,
/// named `"name"`, by calling its inherent methods:
///
/// - `version_text() -> &str`, `caps() -> Capabilities` and
///   `comm_id_bytes() -> usize` (0 without the collective library);
/// - `count`, `current`, `set_current`, `synchronize`, `properties`,
///   `mem_info`; `alloc`, `alloc_host`, `dealloc`, `dealloc_host`;
///   `fill(ptr, value, bytes, Option<StreamHandle>)`,
///   `copy(dst, src, bytes, kind, Option<StreamHandle>)`,
///   `copy_peer(dst, dst_device, src, src_device, bytes, Option<StreamHandle>)`;
/// - `priorities`, `create_stream`, `destroy_stream`, `sync_stream`,
///   `query_stream`, `wait_event`, `host_func`; `create_event`,
///   `destroy_event`, `record`, `query_event`, `sync_event`, `elapsed`;
/// - `unique_id`, `init_rank`, `group(start: bool)`,
///   `end_comm(comm, abort: bool)`, `async_error` and
///   `collective(Collective, Buffers, comm, stream)` for every collective;
/// - `granularity`, `reserve`, `free_reservation`, `create_chunk`,
///   `release_chunk`, `map`, `unmap`.
///
/// The `unsafe` ones are `unsafe fn`s with the trait method's contract.
#[macro_export]
macro_rules! device_api {
    ($vendor:ty, $name:literal) => {
        const _: () = {
            use ::std::ffi::c_void;

            use $crate::__private::dipu_deviceapi::{
                Capabilities, CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties,
                EventHandle, HostCallback, MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp,
                Result, StreamHandle,
            };
            use $crate::{Buffers, Collective};

            impl DeviceApi for $vendor {
                fn name(&self) -> &str {
                    $name
                }

                fn version(&self) -> String {
                    self.version_text().to_owned()
                }

                fn capabilities(&self) -> Capabilities {
                    self.caps()
                }

                fn comm_unique_id_size(&self) -> usize {
                    self.comm_id_bytes()
                }

                $crate::forward! {
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
                    fn comm_get_unique_id() -> Result<Vec<u8>> = unique_id;
                    fn comm_init_rank(world_size: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle>
                        = init_rank;
                    fn group_start() -> Result<()> = group, true;
                    fn group_end() -> Result<()> = group, false;
                    fn vmm_granularity() -> Result<usize> = granularity;
                    fn vmm_reserve(bytes: usize) -> Result<*mut c_void> = reserve;
                    fn vmm_create(bytes: usize) -> Result<PhysicalMemHandle> = create_chunk;
                }

                $crate::forward_unsafe! {
                    fn free(ptr: *mut c_void) -> Result<()> = dealloc;
                    fn free_host(ptr: *mut c_void) -> Result<()> = dealloc_host;
                    fn memset(ptr: *mut c_void, value: u8, bytes: usize) -> Result<()> = fill, None;
                    fn memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: CopyKind)
                        -> Result<()> = copy, None;
                    fn stream_destroy(stream: StreamHandle) -> Result<()> = destroy_stream;
                    fn stream_synchronize(stream: StreamHandle) -> Result<()> = sync_stream;
                    fn stream_query(stream: StreamHandle) -> Result<bool> = query_stream;
                    fn stream_wait_event(stream: StreamHandle, event: EventHandle) -> Result<()>
                        = wait_event;
                    fn launch_host_func(stream: StreamHandle, callback: HostCallback) -> Result<()>
                        = host_func;
                    fn event_destroy(event: EventHandle) -> Result<()> = destroy_event;
                    fn event_record(event: EventHandle, stream: StreamHandle) -> Result<()> = record;
                    fn event_query(event: EventHandle) -> Result<bool> = query_event;
                    fn event_synchronize(event: EventHandle) -> Result<()> = sync_event;
                    fn event_elapsed_ms(start: EventHandle, end: EventHandle) -> Result<f32> = elapsed;
                    fn comm_destroy(comm: CommHandle) -> Result<()> = end_comm, false;
                    fn comm_abort(comm: CommHandle) -> Result<()> = end_comm, true;
                    fn comm_async_error(comm: CommHandle) -> Result<()> = async_error;
                    fn vmm_free_reservation(ptr: *mut c_void, bytes: usize) -> Result<()>
                        = free_reservation;
                    fn vmm_release(handle: PhysicalMemHandle) -> Result<()> = release_chunk;
                    fn vmm_map(ptr: *mut c_void, bytes: usize, handle: PhysicalMemHandle) -> Result<()>
                        = map;
                    fn vmm_unmap(ptr: *mut c_void, bytes: usize) -> Result<()> = unmap;
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

                unsafe fn memcpy_peer(
                    &self,
                    dst: *mut c_void,
                    dst_device: i32,
                    src: *const c_void,
                    src_device: i32,
                    bytes: usize,
                ) -> Result<()> {
                    // SAFETY: forwarded from the trait's contract.
                    unsafe { self.copy_peer(dst, dst_device, src, src_device, bytes, None) }
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

                $crate::collectives! {
                    fn all_reduce(op: ReduceOp) = AllReduce(op);
                    fn broadcast(root: i32) = Broadcast(root);
                    fn all_gather() = AllGather;
                    fn reduce_scatter(op: ReduceOp) = ReduceScatter(op);
                    fn reduce(op: ReduceOp, root: i32) = Reduce(op, root);
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
                    let b = Buffers { send: buf, recv: ::std::ptr::null_mut(), count, dtype };
                    // SAFETY: forwarded from the trait's contract.
                    unsafe { self.collective(Collective::Send(peer), b, comm, stream) }
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
                    let b = Buffers { send: ::std::ptr::null(), recv: buf, count, dtype };
                    // SAFETY: forwarded from the trait's contract.
                    unsafe { self.collective(Collective::Recv(peer), b, comm, stream) }
                }
            }
        };
    };
}

/// The trait's collectives over a send and a receive buffer, each building
/// its [`Buffers`](crate::Buffers) and calling the vendor's
/// `collective(Collective::X, buffers, comm, stream)`. For use inside
/// [`device_api!`].
#[doc(hidden)]
#[macro_export]
macro_rules! collectives {
    ($(
        fn $name:ident($($arg:ident: $ty:ty),*) = $op:ident $(($($op_arg:ident),*))?;
    )*) => {$(
        unsafe fn $name(
            &self,
            send: *const c_void,
            recv: *mut c_void,
            count: usize,
            dtype: DataType,
            $($arg: $ty,)*
            comm: CommHandle,
            stream: StreamHandle,
        ) -> Result<()> {
            let b = Buffers { send, recv, count, dtype };
            // SAFETY: forwarded from the trait's contract.
            unsafe { self.collective(Collective::$op $(($($op_arg),*))?, b, comm, stream) }
        }
    )*};
}
