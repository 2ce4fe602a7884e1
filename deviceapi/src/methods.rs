//! The one list of the forwarded [`DeviceApi`](crate::DeviceApi) methods,
//! from which the plugin vtable, both of its sides and the decorators
//! (per-call tracing here, the profiler's in `dipu-profiler`) are generated.
//!
//! Adding a method to the trait means adding one entry here (at the end, so
//! that the vtable only grows); every generated piece then has it, and a
//! piece that cannot say what to do with it fails to compile.
//!
//! Left out are the facts a vendor describes once (`name`, `version`,
//! `capabilities`, `comm_unique_id_size`): the plugin ABI carries them in
//! `describe`, and `device_api_decorator!` takes them from the inner vendor.

/// Calls `$callback! { entries }` with every forwarded [`DeviceApi`](crate::DeviceApi)
/// method, in vtable order. Each entry reads:
///
/// ```text
/// /// the vtable field's doc (it goes to include/dipu_vendor.h)
/// KIND (PROFILE) [unsafe?] fn NAME(ARG: RustType, ..) -> RustReturn;
///     c(ARG: CType, ..) -> OUT: *mut CType;      // `-> OUT` when it returns a value
/// ```
///
/// KIND is `plain` when each Rust argument is one C argument of the same
/// name (converted by `plugin::convert`) and the value comes back through
/// the one out-pointer; `special` when the two sides are written by hand
/// (`plugin::special`): a struct, two outs, a slice or a callback;
/// `vtable_only` for a table function that is no trait method (only the
/// vtable and its two sides have it). New entries go at the end. PROFILE
/// is read by the profiler only: `host` (a host slice), `queued CATEGORY
/// STREAM` (also the stream's device time), `custom` (written by hand),
/// each with `: key = value, ..` to record.
///
/// `for_each_device_method!(each CALLBACK)` calls `CALLBACK! { entry }`
/// once a method instead (without the docs), where items may stand: in an
/// `impl` or a trait.
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_device_method {
    (each $callback:ident) => {
        $crate::for_each_device_method!($crate::__device_method_each[$callback]);
    };
    ($($callback:tt)::+ $([$($extra:tt)*])?) => {
        $($callback)::+! {
            $([$($extra)*])?
            /// `device_count`.
            plain (host) [] fn device_count() -> i32;
                c() -> out: *mut i32;
            /// `current_device`.
            plain (host) [] fn current_device() -> i32;
                c() -> out: *mut i32;
            /// `set_device`.
            plain (host: device = device) [] fn set_device(device: i32) -> ();
                c(device: i32);
            /// `synchronize_device`.
            plain (host) [] fn synchronize_device() -> ();
                c();
            /// `device_properties`.
            special (host: device = device) [] fn device_properties(device: i32) -> DeviceProperties;
                c(device: i32, out: *mut DipuVendorDeviceProperties);
            /// `memory_info`.
            special (host) [] fn memory_info() -> MemoryInfo;
                c(free: *mut u64, total: *mut u64);

            /// `malloc`.
            plain (host: bytes = bytes) [] fn malloc(bytes: usize) -> *mut c_void;
                c(bytes: usize) -> out: *mut *mut c_void;
            /// `free`.
            plain (host: ptr = ptr) [unsafe] fn free(ptr: *mut c_void) -> ();
                c(ptr: *mut c_void);
            /// `malloc_host`.
            plain (host: bytes = bytes) [] fn malloc_host(bytes: usize) -> *mut c_void;
                c(bytes: usize) -> out: *mut *mut c_void;
            /// `free_host`.
            plain (host: ptr = ptr) [unsafe] fn free_host(ptr: *mut c_void) -> ();
                c(ptr: *mut c_void);
            /// `memset`.
            plain (host: ptr = ptr, bytes = bytes)
                [unsafe] fn memset(ptr: *mut c_void, value: u8, bytes: usize) -> ();
                c(ptr: *mut c_void, value: u8, bytes: usize);
            /// `memset_async`.
            plain (queued Vendor stream: ptr = ptr, bytes = bytes)
                [unsafe] fn memset_async(ptr: *mut c_void, value: u8, bytes: usize, stream: StreamHandle) -> ();
                c(ptr: *mut c_void, value: u8, bytes: usize, stream: u64);
            /// `memcpy`; `kind` is a `CopyKind` code.
            plain (host: bytes = bytes, kind = kind)
                [unsafe] fn memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: CopyKind) -> ();
                c(dst: *mut c_void, src: *const c_void, bytes: usize, kind: i32);
            /// `memcpy_async`; `kind` is a `CopyKind` code.
            plain (queued Vendor stream: bytes = bytes, kind = kind, dst = dst, src = src)
                [unsafe] fn memcpy_async(dst: *mut c_void, src: *const c_void, bytes: usize, kind: CopyKind, stream: StreamHandle) -> ();
                c(dst: *mut c_void, src: *const c_void, bytes: usize, kind: i32, stream: u64);
            /// `memcpy_peer`.
            plain (host: bytes = bytes, dst_device = dst_device, src_device = src_device)
                [unsafe] fn memcpy_peer(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize) -> ();
                c(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize);
            /// `memcpy_peer_async`.
            plain (queued Vendor stream: bytes = bytes, dst_device = dst_device, src_device = src_device)
                [unsafe] fn memcpy_peer_async(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize, stream: StreamHandle) -> ();
                c(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize, stream: u64);

            /// `stream_priority_range`.
            special (host) [] fn stream_priority_range() -> PriorityRange;
                c(least: *mut i32, greatest: *mut i32);
            /// `stream_create`.
            plain (custom) [] fn stream_create(priority: i32) -> StreamHandle;
                c(priority: i32) -> out: *mut u64;
            /// `stream_destroy`.
            plain (custom) [unsafe] fn stream_destroy(stream: StreamHandle) -> ();
                c(stream: u64);
            /// `stream_synchronize`.
            plain (host: stream = stream) [unsafe] fn stream_synchronize(stream: StreamHandle) -> ();
                c(stream: u64);
            /// `stream_query`; `out` is 1 when done, 0 when pending.
            plain (host: stream = stream) [unsafe] fn stream_query(stream: StreamHandle) -> bool;
                c(stream: u64) -> out: *mut i32;
            /// `stream_wait_event`.
            plain (custom) [unsafe] fn stream_wait_event(stream: StreamHandle, event: EventHandle) -> ();
                c(stream: u64, event: u64);
            /// `launch_host_func`: on success the vendor calls `func(user_data)`
            /// exactly once; on failure never.
            special (custom) [unsafe] fn launch_host_func(stream: StreamHandle, callback: HostCallback) -> ();
                c(stream: u64, func: DipuHostFn, user_data: *mut c_void);

            /// `event_create`; `timing` is 0 or 1.
            plain (host: timing = timing) [] fn event_create(timing: bool) -> EventHandle;
                c(timing: i32) -> out: *mut u64;
            /// `event_destroy`.
            plain (custom) [unsafe] fn event_destroy(event: EventHandle) -> ();
                c(event: u64);
            /// `event_record`.
            plain (custom) [unsafe] fn event_record(event: EventHandle, stream: StreamHandle) -> ();
                c(event: u64, stream: u64);
            /// `event_query`; `out` is 1 when done, 0 when pending.
            plain (host: event = event) [unsafe] fn event_query(event: EventHandle) -> bool;
                c(event: u64) -> out: *mut i32;
            /// `event_synchronize`.
            plain (custom) [unsafe] fn event_synchronize(event: EventHandle) -> ();
                c(event: u64);
            /// `event_elapsed_ms`.
            plain (host) [unsafe] fn event_elapsed_ms(start: EventHandle, end: EventHandle) -> f32;
                c(start: u64, end: u64) -> out: *mut f32;

            /// `comm_get_unique_id`; `len` equals the described unique-id size.
            special (host) [] fn comm_get_unique_id() -> Vec<u8>;
                c(out: *mut u8, len: usize);
            /// `comm_init_rank`.
            special (custom) [] fn comm_init_rank(world_size: i32, unique_id: &[u8], rank: i32) -> CommHandle;
                c(world_size: i32, unique_id: *const u8, len: usize, rank: i32, out: *mut u64);
            /// `comm_destroy`.
            plain (host: comm = comm) [unsafe] fn comm_destroy(comm: CommHandle) -> ();
                c(comm: u64);
            /// `comm_abort`.
            plain (host: comm = comm) [unsafe] fn comm_abort(comm: CommHandle) -> ();
                c(comm: u64);
            /// `comm_async_error`.
            plain (host: comm = comm) [unsafe] fn comm_async_error(comm: CommHandle) -> ();
                c(comm: u64);
            /// `all_reduce`; `dtype` and `op` are `DataType` and `ReduceOp` codes.
            plain (queued Comm stream: count = count, bytes = (count, dtype), comm = comm)
                [unsafe] fn all_reduce(send: *const c_void, recv: *mut c_void, count: usize, dtype: DataType, op: ReduceOp, comm: CommHandle, stream: StreamHandle) -> ();
                c(send: *const c_void, recv: *mut c_void, count: usize, dtype: i32, op: i32, comm: u64, stream: u64);
            /// `broadcast`.
            plain (queued Comm stream: count = count, bytes = (count, dtype), comm = comm, root = root)
                [unsafe] fn broadcast(send: *const c_void, recv: *mut c_void, count: usize, dtype: DataType, root: i32, comm: CommHandle, stream: StreamHandle) -> ();
                c(send: *const c_void, recv: *mut c_void, count: usize, dtype: i32, root: i32, comm: u64, stream: u64);
            /// `all_gather`.
            plain (queued Comm stream: count = send_count, bytes = (send_count, dtype), comm = comm)
                [unsafe] fn all_gather(send: *const c_void, recv: *mut c_void, send_count: usize, dtype: DataType, comm: CommHandle, stream: StreamHandle) -> ();
                c(send: *const c_void, recv: *mut c_void, send_count: usize, dtype: i32, comm: u64, stream: u64);
            /// `reduce_scatter`.
            plain (queued Comm stream: count = recv_count, bytes = (recv_count, dtype), comm = comm)
                [unsafe] fn reduce_scatter(send: *const c_void, recv: *mut c_void, recv_count: usize, dtype: DataType, op: ReduceOp, comm: CommHandle, stream: StreamHandle) -> ();
                c(send: *const c_void, recv: *mut c_void, recv_count: usize, dtype: i32, op: i32, comm: u64, stream: u64);
            /// `reduce`.
            plain (queued Comm stream: count = count, bytes = (count, dtype), comm = comm, root = root)
                [unsafe] fn reduce(send: *const c_void, recv: *mut c_void, count: usize, dtype: DataType, op: ReduceOp, root: i32, comm: CommHandle, stream: StreamHandle) -> ();
                c(send: *const c_void, recv: *mut c_void, count: usize, dtype: i32, op: i32, root: i32, comm: u64, stream: u64);
            /// `send`.
            plain (queued Comm stream: count = count, bytes = (count, dtype), comm = comm, peer = peer)
                [unsafe] fn send(buf: *const c_void, count: usize, dtype: DataType, peer: i32, comm: CommHandle, stream: StreamHandle) -> ();
                c(buf: *const c_void, count: usize, dtype: i32, peer: i32, comm: u64, stream: u64);
            /// `recv`.
            plain (queued Comm stream: count = count, bytes = (count, dtype), comm = comm, peer = peer)
                [unsafe] fn recv(buf: *mut c_void, count: usize, dtype: DataType, peer: i32, comm: CommHandle, stream: StreamHandle) -> ();
                c(buf: *mut c_void, count: usize, dtype: i32, peer: i32, comm: u64, stream: u64);
            /// `group_start`.
            plain (host) [] fn group_start() -> ();
                c();
            /// `group_end`.
            plain (host) [] fn group_end() -> ();
                c();

            /// `vmm_granularity`.
            plain (host) [] fn vmm_granularity() -> usize;
                c() -> out: *mut usize;
            /// `vmm_reserve`.
            plain (host: bytes = bytes) [] fn vmm_reserve(bytes: usize) -> *mut c_void;
                c(bytes: usize) -> out: *mut *mut c_void;
            /// `vmm_free_reservation`.
            plain (host: ptr = ptr, bytes = bytes)
                [unsafe] fn vmm_free_reservation(ptr: *mut c_void, bytes: usize) -> ();
                c(ptr: *mut c_void, bytes: usize);
            /// `vmm_create`.
            plain (host: bytes = bytes) [] fn vmm_create(bytes: usize) -> PhysicalMemHandle;
                c(bytes: usize) -> out: *mut u64;
            /// `vmm_release`.
            plain (host: handle = handle) [unsafe] fn vmm_release(handle: PhysicalMemHandle) -> ();
                c(handle: u64);
            /// `vmm_map`.
            plain (host: ptr = ptr, bytes = bytes)
                [unsafe] fn vmm_map(ptr: *mut c_void, bytes: usize, handle: PhysicalMemHandle) -> ();
                c(ptr: *mut c_void, bytes: usize, handle: u64);
            /// `vmm_unmap`.
            plain (host: ptr = ptr, bytes = bytes)
                [unsafe] fn vmm_unmap(ptr: *mut c_void, bytes: usize) -> ();
                c(ptr: *mut c_void, bytes: usize);

            /// The vendor's whole version (`DipuVendorInfo::version` holds at most
            /// 255 bytes of it): writes to `needed` the bytes it takes with its
            /// terminating NUL, and, when `cap` > 0, at most `cap` bytes of it,
            /// NUL-terminated, to `buf`. The loader asks with `cap` 0 first, then
            /// with room for it all. Optional: without it the loader keeps the cut
            /// version of `describe`.
            vtable_only (none) [] fn version_full() -> ();
                c(buf: *mut c_char, cap: usize, needed: *mut usize);

            /// The handle a kernel library enqueues on for `stream`, under the
            /// current device: the raw value for a created stream, and for the
            /// default stream (0) the vendor's own queue object where it has one
            /// to name (OpenCL's default `cl_command_queue`). Optional: without
            /// it the loader answers the raw value.
            special (host) [] fn native_stream(stream: StreamHandle) -> u64;
                c(stream: u64, out: *mut u64);
        }
    };
}

/// The `each` mode of [`for_each_device_method!`]: one `$callback! { .. }`
/// a method.
#[doc(hidden)]
#[macro_export]
macro_rules! __device_method_each {
    ([$callback:ident] $(
        $(#[$doc:meta])*
        $kind:ident $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;
            c($($cn:ident: $ct:ty),*) $(-> $on:ident: $ot:ty)?;
    )*) => {
        $($callback! {
            $kind $prof [$($unsafe)?] fn $name($($arg: $ty),*) -> $ret;
                c($($cn: $ct),*) $(-> $on: $ot)?;
        })*
    };
}

/// `impl DeviceApi for $decorator`, a decorator of the vendor in its field
/// `inner`: the facts a vendor describes once (`name`, `version`,
/// `capabilities`, `comm_unique_id_size`) are the inner vendor's, and each
/// listed method is what the decorator's own `$method! { entry }` writes
/// (the entry as [`for_each_device_method!`] gives it, without the docs).
/// The one place a decorator of every call is generated: per-call tracing
/// here, profiling in `dipu-profiler`, and whatever observes vendor calls
/// next plug their own `$method` into it.
#[doc(hidden)]
#[macro_export]
macro_rules! device_api_decorator {
    ($decorator:ty, $method:ident) => {
        impl $crate::DeviceApi for $decorator {
            fn name(&self) -> &str {
                self.inner.name()
            }
            fn version(&self) -> String {
                self.inner.version()
            }
            fn capabilities(&self) -> $crate::Capabilities {
                self.inner.capabilities()
            }
            fn comm_unique_id_size(&self) -> usize {
                self.inner.comm_unique_id_size()
            }
            $crate::for_each_device_method!(each $method);
        }
    };
}
