//! The export side of the plugin ABI: builds a [`DipuVendorVTable`] whose
//! functions call an `impl DeviceApi`, catching panics so none crosses the
//! boundary. Used through [`export_vendor!`](crate::export_vendor).

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::abi::*;
use crate::{
    CommHandle, CopyKind, DataType, DeviceApi, Error, ErrorKind, EventHandle, PhysicalMemHandle,
    ReduceOp, Result, StreamHandle,
};

/// Turns `impl DeviceApi` into the plugin entry points a loader looks for.
///
/// The argument is an expression of type `Result<T, dipu_deviceapi::Error>`
/// (usually a constructor call), evaluated when the loader creates the
/// vendor; an `Err` becomes the loader's "vendor init failed" error.
///
/// ```text
/// dipu_deviceapi::export_vendor!(MyVendor::new());
/// ```
#[macro_export]
macro_rules! export_vendor {
    ($create:expr) => {
        /// The plugin ABI major version this vendor was built for.
        #[no_mangle]
        pub extern "C" fn dipu_vendor_abi_version() -> u32 {
            $crate::plugin::DIPU_VENDOR_ABI_MAJOR
        }

        /// Creates the vendor; null (with `err` filled) when it cannot start.
        ///
        /// # Safety
        /// `err` is null or points to a writable `DipuVendorError`.
        #[no_mangle]
        pub unsafe extern "C" fn dipu_vendor_create(
            err: *mut $crate::plugin::DipuVendorError,
        ) -> *const $crate::plugin::DipuVendorVTable {
            $crate::plugin::export::create_vtable(err, || $create)
        }
    };
}

/// Runs `create` and returns a leaked vtable for its vendor, or null with
/// `err` filled. Called by the code [`export_vendor!`](crate::export_vendor) generates.
pub fn create_vtable<T: DeviceApi>(
    err: *mut DipuVendorError,
    create: impl FnOnce() -> Result<T>,
) -> *const DipuVendorVTable {
    let mut table = None;
    let status = guard(err, || {
        let vendor = create()?;
        table = Some(Box::leak(Box::new(vtable_for(vendor))) as *const DipuVendorVTable);
        Ok(())
    });
    match table {
        Some(t) if status == 0 => t,
        _ => std::ptr::null(),
    }
}

/// Runs `f`, converting its error or panic into a status code and `err`.
fn guard(err: *mut DipuVendorError, f: impl FnOnce() -> Result<()>) -> i32 {
    let error = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".to_owned());
            Error::new(ErrorKind::Internal, format!("vendor panicked: {what}"))
        }
    };
    // SAFETY: the loader passes null or a pointer to its own live
    // `DipuVendorError`; nothing else aliases it during the call.
    if let Some(out) = unsafe { err.as_mut() } {
        out.kind = error.kind().code();
        out.has_vendor_code = error.vendor_code().is_some() as i32;
        out.vendor_code = error.vendor_code().unwrap_or(0);
        write_c_str(&mut out.message, error.message());
    }
    error.kind().code()
}

/// Writes `value` through an out-pointer, rejecting null.
///
/// # Safety
/// `out` is null or valid for a write of `V`.
unsafe fn put<V>(out: *mut V, value: V) -> Result<()> {
    if out.is_null() {
        return Err(Error::invalid_argument("null out-pointer passed to vendor"));
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

fn copy_kind(code: i32) -> Result<CopyKind> {
    CopyKind::from_code(code)
        .ok_or_else(|| Error::invalid_argument(format!("unknown copy kind code {code}")))
}

fn data_type(code: i32) -> Result<DataType> {
    DataType::from_code(code)
        .ok_or_else(|| Error::invalid_argument(format!("unknown data type code {code}")))
}

fn reduce_op(code: i32) -> Result<ReduceOp> {
    ReduceOp::from_code(code)
        .ok_or_else(|| Error::invalid_argument(format!("unknown reduce op code {code}")))
}

/// A host function and its data, moved to the thread that runs it.
struct HostFn(DipuHostFn, *mut c_void);
// SAFETY: the ABI requires `user_data` to be usable from any thread, since
// vendors run host functions on their own threads (as CUDA does).
unsafe impl Send for HostFn {}

/// The callback that calls a C host function once.
fn host_callback(call: HostFn) -> crate::HostCallback {
    Box::new(move || {
        let call = call;
        // SAFETY: the plugin ABI promises `func(user_data)` is called exactly
        // once; this closure is the only place that calls it, and runs once.
        unsafe { (call.0)(call.1) }
    })
}

/// Defines `extern "C"` thunks over `&T`: `name(args) |vendor| body`.
macro_rules! thunks {
    ($($name:ident($($arg:ident: $ty:ty),*) |$v:ident| $body:expr;)*) => {$(
        unsafe extern "C" fn $name<T: DeviceApi>(pd: *mut c_void, $($arg: $ty,)* err: DipuErr) -> i32 {
            guard(err, || {
                // SAFETY: the loader passes back this table's `private_data`,
                // a live `T` released only by `release`; pointer, handle and
                // out-pointer arguments are valid per the ABI contract.
                unsafe {
                    let $v: &T = &*pd.cast::<T>();
                    $body
                }
            })
        }
    )*};
}

thunks! {
    describe(out: *mut DipuVendorInfo) |v| {
        let mut info = DipuVendorInfo { name: [0; 64], version: [0; 256], capabilities: v.capabilities().bits(), comm_unique_id_size: v.comm_unique_id_size() as u64 };
        write_c_str(&mut info.name, v.name());
        write_c_str(&mut info.version, &v.version());
        put(out, info)
    };
    device_count(out: *mut i32) |v| put(out, v.device_count()?);
    current_device(out: *mut i32) |v| put(out, v.current_device()?);
    set_device(device: i32) |v| v.set_device(device);
    synchronize_device() |v| v.synchronize_device();
    device_properties(device: i32, out: *mut DipuVendorDeviceProperties) |v| {
        let p = v.device_properties(device)?;
        let mut c = DipuVendorDeviceProperties { name: [0; 256], total_memory: p.total_memory, major: p.major, minor: p.minor, multiprocessor_count: p.multiprocessor_count };
        write_c_str(&mut c.name, &p.name);
        put(out, c)
    };
    memory_info(free: *mut u64, total: *mut u64) |v| {
        let m = v.memory_info()?;
        put(free, m.free)?;
        put(total, m.total)
    };
    malloc(bytes: usize, out: *mut *mut c_void) |v| put(out, v.malloc(bytes)?);
    free(ptr: *mut c_void) |v| v.free(ptr);
    malloc_host(bytes: usize, out: *mut *mut c_void) |v| put(out, v.malloc_host(bytes)?);
    free_host(ptr: *mut c_void) |v| v.free_host(ptr);
    memset(ptr: *mut c_void, value: u8, bytes: usize) |v| v.memset(ptr, value, bytes);
    memset_async(ptr: *mut c_void, value: u8, bytes: usize, stream: u64) |v| v.memset_async(ptr, value, bytes, StreamHandle::from_raw(stream));
    memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: i32) |v| v.memcpy(dst, src, bytes, copy_kind(kind)?);
    memcpy_async(dst: *mut c_void, src: *const c_void, bytes: usize, kind: i32, stream: u64) |v|
        v.memcpy_async(dst, src, bytes, copy_kind(kind)?, StreamHandle::from_raw(stream));
    memcpy_peer(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize) |v|
        v.memcpy_peer(dst, dst_device, src, src_device, bytes);
    memcpy_peer_async(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize, stream: u64) |v|
        v.memcpy_peer_async(dst, dst_device, src, src_device, bytes, StreamHandle::from_raw(stream));
    stream_priority_range(least: *mut i32, greatest: *mut i32) |v| {
        let r = v.stream_priority_range()?;
        put(least, r.least)?;
        put(greatest, r.greatest)
    };
    stream_create(priority: i32, out: *mut u64) |v| put(out, v.stream_create(priority)?.as_raw());
    stream_destroy(stream: u64) |v| v.stream_destroy(StreamHandle::from_raw(stream));
    stream_synchronize(stream: u64) |v| v.stream_synchronize(StreamHandle::from_raw(stream));
    stream_query(stream: u64, out: *mut i32) |v| put(out, v.stream_query(StreamHandle::from_raw(stream))? as i32);
    stream_wait_event(stream: u64, event: u64) |v| v.stream_wait_event(StreamHandle::from_raw(stream), EventHandle::from_raw(event));
    launch_host_func(stream: u64, func: DipuHostFn, user_data: *mut c_void) |v| {
        v.launch_host_func(StreamHandle::from_raw(stream), host_callback(HostFn(func, user_data)))
    };
    event_create(timing: i32, out: *mut u64) |v| put(out, v.event_create(timing != 0)?.as_raw());
    event_destroy(event: u64) |v| v.event_destroy(EventHandle::from_raw(event));
    event_record(event: u64, stream: u64) |v| v.event_record(EventHandle::from_raw(event), StreamHandle::from_raw(stream));
    event_query(event: u64, out: *mut i32) |v| put(out, v.event_query(EventHandle::from_raw(event))? as i32);
    event_synchronize(event: u64) |v| v.event_synchronize(EventHandle::from_raw(event));
    event_elapsed_ms(start: u64, end: u64, out: *mut f32) |v|
        put(out, v.event_elapsed_ms(EventHandle::from_raw(start), EventHandle::from_raw(end))?);
    comm_get_unique_id(out: *mut u8, len: usize) |v| {
        let id = v.comm_get_unique_id()?;
        if out.is_null() || len != id.len() {
            return Err(Error::invalid_argument(format!("unique id buffer of {len} bytes, the vendor's id has {}", id.len())));
        }
        std::ptr::copy_nonoverlapping(id.as_ptr(), out, len);
        Ok(())
    };
    comm_init_rank(world_size: i32, unique_id: *const u8, len: usize, rank: i32, out: *mut u64) |v| {
        if unique_id.is_null() {
            return Err(Error::invalid_argument("null unique id"));
        }
        let id = std::slice::from_raw_parts(unique_id, len);
        put(out, v.comm_init_rank(world_size, id, rank)?.as_raw())
    };
    comm_destroy(comm: u64) |v| v.comm_destroy(CommHandle::from_raw(comm));
    comm_abort(comm: u64) |v| v.comm_abort(CommHandle::from_raw(comm));
    comm_async_error(comm: u64) |v| v.comm_async_error(CommHandle::from_raw(comm));
    all_reduce(send: *const c_void, recv: *mut c_void, count: usize, dtype: i32, op: i32, comm: u64, stream: u64) |v|
        v.all_reduce(send, recv, count, data_type(dtype)?, reduce_op(op)?, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    broadcast(send: *const c_void, recv: *mut c_void, count: usize, dtype: i32, root: i32, comm: u64, stream: u64) |v|
        v.broadcast(send, recv, count, data_type(dtype)?, root, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    all_gather(send: *const c_void, recv: *mut c_void, send_count: usize, dtype: i32, comm: u64, stream: u64) |v|
        v.all_gather(send, recv, send_count, data_type(dtype)?, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    reduce_scatter(send: *const c_void, recv: *mut c_void, recv_count: usize, dtype: i32, op: i32, comm: u64, stream: u64) |v|
        v.reduce_scatter(send, recv, recv_count, data_type(dtype)?, reduce_op(op)?, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    reduce(send: *const c_void, recv: *mut c_void, count: usize, dtype: i32, op: i32, root: i32, comm: u64, stream: u64) |v|
        v.reduce(send, recv, count, data_type(dtype)?, reduce_op(op)?, root, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    send(buf: *const c_void, count: usize, dtype: i32, peer: i32, comm: u64, stream: u64) |v|
        v.send(buf, count, data_type(dtype)?, peer, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    recv(buf: *mut c_void, count: usize, dtype: i32, peer: i32, comm: u64, stream: u64) |v|
        v.recv(buf, count, data_type(dtype)?, peer, CommHandle::from_raw(comm), StreamHandle::from_raw(stream));
    group_start() |v| v.group_start();
    group_end() |v| v.group_end();
    vmm_granularity(out: *mut usize) |v| put(out, v.vmm_granularity()?);
    vmm_reserve(bytes: usize, out: *mut *mut c_void) |v| put(out, v.vmm_reserve(bytes)?);
    vmm_free_reservation(ptr: *mut c_void, bytes: usize) |v| v.vmm_free_reservation(ptr, bytes);
    vmm_create(bytes: usize, out: *mut u64) |v| put(out, v.vmm_create(bytes)?.as_raw());
    vmm_release(handle: u64) |v| v.vmm_release(PhysicalMemHandle::from_raw(handle));
    vmm_map(ptr: *mut c_void, bytes: usize, handle: u64) |v| v.vmm_map(ptr, bytes, PhysicalMemHandle::from_raw(handle));
    vmm_unmap(ptr: *mut c_void, bytes: usize) |v| v.vmm_unmap(ptr, bytes);
    version_full(buf: *mut c_char, cap: usize, needed: *mut usize) |v| {
        let version = v.version();
        let bytes = version.as_bytes();
        put(needed, bytes.len() + 1)?;
        if cap > 0 {
            if buf.is_null() {
                return Err(Error::invalid_argument("version_full: null buffer with a capacity"));
            }
            let n = bytes.len().min(cap - 1);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
        Ok(())
    };
}

/// Frees the vendor behind `private_data`.
unsafe extern "C" fn release<T: DeviceApi>(pd: *mut c_void) {
    if pd.is_null() {
        return;
    }
    // SAFETY: `pd` came from `Box::into_raw` in `vtable_for::<T>` and the
    // loader calls `release` once.
    let vendor = unsafe { Box::from_raw(pd.cast::<T>()) };
    // A panic in `T::drop` must not cross the boundary.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(vendor)));
}

/// The full table for `vendor`, which it now owns.
fn vtable_for<T: DeviceApi>(vendor: T) -> DipuVendorVTable {
    DipuVendorVTable {
        abi_major: DIPU_VENDOR_ABI_MAJOR,
        struct_size: std::mem::size_of::<DipuVendorVTable>() as u32,
        private_data: Box::into_raw(Box::new(vendor)).cast(),
        release: Some(release::<T>),
        describe: Some(describe::<T>),
        device_count: Some(device_count::<T>),
        current_device: Some(current_device::<T>),
        set_device: Some(set_device::<T>),
        synchronize_device: Some(synchronize_device::<T>),
        device_properties: Some(device_properties::<T>),
        memory_info: Some(memory_info::<T>),
        malloc: Some(malloc::<T>),
        free: Some(free::<T>),
        malloc_host: Some(malloc_host::<T>),
        free_host: Some(free_host::<T>),
        memset: Some(memset::<T>),
        memset_async: Some(memset_async::<T>),
        memcpy: Some(memcpy::<T>),
        memcpy_async: Some(memcpy_async::<T>),
        memcpy_peer: Some(memcpy_peer::<T>),
        memcpy_peer_async: Some(memcpy_peer_async::<T>),
        stream_priority_range: Some(stream_priority_range::<T>),
        stream_create: Some(stream_create::<T>),
        stream_destroy: Some(stream_destroy::<T>),
        stream_synchronize: Some(stream_synchronize::<T>),
        stream_query: Some(stream_query::<T>),
        stream_wait_event: Some(stream_wait_event::<T>),
        launch_host_func: Some(launch_host_func::<T>),
        event_create: Some(event_create::<T>),
        event_destroy: Some(event_destroy::<T>),
        event_record: Some(event_record::<T>),
        event_query: Some(event_query::<T>),
        event_synchronize: Some(event_synchronize::<T>),
        event_elapsed_ms: Some(event_elapsed_ms::<T>),
        comm_get_unique_id: Some(comm_get_unique_id::<T>),
        comm_init_rank: Some(comm_init_rank::<T>),
        comm_destroy: Some(comm_destroy::<T>),
        comm_abort: Some(comm_abort::<T>),
        comm_async_error: Some(comm_async_error::<T>),
        all_reduce: Some(all_reduce::<T>),
        broadcast: Some(broadcast::<T>),
        all_gather: Some(all_gather::<T>),
        reduce_scatter: Some(reduce_scatter::<T>),
        reduce: Some(reduce::<T>),
        send: Some(send::<T>),
        recv: Some(recv::<T>),
        group_start: Some(group_start::<T>),
        group_end: Some(group_end::<T>),
        vmm_granularity: Some(vmm_granularity::<T>),
        vmm_reserve: Some(vmm_reserve::<T>),
        vmm_free_reservation: Some(vmm_free_reservation::<T>),
        vmm_create: Some(vmm_create::<T>),
        vmm_release: Some(vmm_release::<T>),
        vmm_map: Some(vmm_map::<T>),
        vmm_unmap: Some(vmm_unmap::<T>),
        version_full: Some(version_full::<T>),
    }
}
