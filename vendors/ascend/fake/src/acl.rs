//! The exported functions, with the prototypes of the CANN headers
//! (`acl_rt.h`, `acl_base.h`, `hccl.h`). Those the torch-npu 2.1.0 headers
//! lack are left out of the `old-cann` build.

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

use crate::entry::{code, fail, out, recent_message, run};
use crate::hccl::{self, what};
use crate::p2p::{self, Item};
use crate::types::*;
use crate::{callbacks, events, memory, state, streams, vmm};

/// ACL functions: `fn name(args) { body returning R }`.
macro_rules! acl {
    (table $table:ident; $( $(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block )*) => {
        $(
            $(#[$m])*
            #[no_mangle]
            extern "C" fn $name($($a: $t),*) -> aclError {
                run(stringify!($name), code::RT_INTERNAL_ERROR, || $body)
            }
        )*
        signatures!($table, $($name($($t),*) -> aclError)*);
    };
}

/// The table of a block of exported functions, as declared (the new build's
/// functions: an entry stays when `old-cann` leaves its function out).
macro_rules! signatures {
    ($table:ident, $($name:ident($($t:ty),*) -> $ret:ty)*) => {
        pub(crate) const $table: &[Signature] = &[$(
            Signature {
                name: stringify!($name),
                ret: stringify!($ret),
                args: &[$(stringify!($t)),*],
                fn_type: || std::any::TypeId::of::<unsafe extern "C" fn($($t),*) -> $ret>(),
            },
        )*];
    };
}

/// Runs an HCCL function's body; an ACL failure becomes `HCCL_E_RUNTIME`.
fn hccl_run(symbol: &'static str, body: impl FnOnce() -> crate::entry::R) -> i32 {
    run(symbol, hccl::E_INTERNAL, || body().map_err(hccl::from_acl))
}

/// HCCL functions, whose ACL failures become `HCCL_E_RUNTIME`.
macro_rules! hccl_fns {
    (table $table:ident; $( $(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block )*) => {
        $(
            $(#[$m])*
            #[no_mangle]
            extern "C" fn $name($($a: $t),*) -> HcclResult {
                hccl_run(stringify!($name), || $body)
            }
        )*
        signatures!($table, $($name($($t),*) -> HcclResult)*);
    };
}

acl! {
    table ACL;
    fn aclInit(_config_path: *const c_char) {
        if let Some(e) = crate::config::problem() {
            return fail(code::INVALID_PARAM, format!("the fake's settings are invalid: {e}"));
        }
        dipu_fakekit::thread::mark_initialised();
        // "重复调用aclInit接口会返回ACL_ERROR_REPEAT_INITIALIZE错误码，您可以忽略该错误"
        // (aclInit.md).
        if state::INITIALIZED.swap(true, Ordering::AcqRel) {
            return fail(code::REPEAT_INITIALIZE, "aclInit was already called");
        }
        Ok(())
    }
    fn aclrtGetVersion(major: *mut i32, minor: *mut i32, patch: *mut i32) {
        // The fake calls itself 1.17 (torch-npu 2.14.0's ACL), or 1.0 when
        // built as an old CANN.
        let (a, b) = if cfg!(feature = "old-cann") { (1, 0) } else { (1, 17) };
        out(major, a, "major")?;
        out(minor, b, "minor")?;
        out(patch, 0, "patch")
    }
    fn aclrtGetDeviceCount(count: *mut u32) {
        state::require_init()?;
        out(count, state::devices().len() as u32, "count")
    }
    fn aclrtSetDevice(device: i32) {
        state::set_current(device)
    }
    fn aclrtGetDevice(device: *mut i32) {
        out(device, state::current()?, "deviceId")
    }
    fn aclrtSynchronizeDevice() {
        for s in streams::of_device(state::current()?) {
            s.synchronize();
        }
        memory::drain_graveyard();
        Ok(())
    }
    fn aclGetDeviceCapability(device: u32, info: aclDeviceInfo, value: *mut i64) {
        state::device(device as i32)?;
        match info {
            0 => out(value, 24, "value"),
            _ => fail(code::INVALID_PARAM, format!("device info {info} is not modelled")),
        }
    }
    #[cfg(not(feature = "old-cann"))]
    fn aclrtGetDeviceInfo(device: u32, attr: aclrtDevAttr, value: *mut i64) {
        state::device(device as i32)?;
        match attr {
            101 => out(value, 24, "value"),
            301 => out(value, crate::config::get().memory as i64, "value"),
            _ => fail(code::INVALID_PARAM, format!("attribute {attr} is not modelled")),
        }
    }
    fn aclrtGetMemInfo(_attr: aclrtMemAttr, free: *mut usize, total: *mut usize) {
        memory::mem_info(free, total)
    }
    fn aclrtMalloc(ptr: *mut *mut c_void, size: usize, _policy: aclrtMemMallocPolicy) {
        memory::malloc(ptr, size, true)
    }
    fn aclrtMallocAlign32(ptr: *mut *mut c_void, size: usize, _policy: aclrtMemMallocPolicy) {
        memory::malloc(ptr, size, false)
    }
    fn aclrtFree(ptr: *mut c_void) {
        memory::free(ptr)
    }
    #[cfg(not(feature = "old-cann"))]
    fn aclrtFreeWithDevSync(ptr: *mut c_void) {
        for s in streams::of_device(state::current()?) {
            s.synchronize();
        }
        memory::free(ptr)
    }
    fn aclrtMallocHost(ptr: *mut *mut c_void, size: usize) {
        memory::malloc_host(ptr, size)
    }
    fn aclrtFreeHost(ptr: *mut c_void) {
        memory::free_host(ptr)
    }
    fn aclrtMemset(ptr: *mut c_void, max: usize, value: i32, count: usize) {
        memory::memset(ptr, max, value, count)
    }
    fn aclrtMemsetAsync(ptr: *mut c_void, max: usize, value: i32, count: usize, stream: aclrtStream) {
        memory::memset_async(ptr, max, value, count, stream)
    }
    fn aclrtMemcpy(dst: *mut c_void, max: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) {
        memory::memcpy(dst, max, src, count, kind)
    }
    fn aclrtMemcpyAsync(dst: *mut c_void, max: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind, stream: aclrtStream) {
        memory::memcpy_async(dst, max, src, count, kind, stream)
    }
    fn aclrtDeviceCanAccessPeer(can: *mut i32, device: i32, peer: i32) {
        memory::can_access_peer(can, device, peer)
    }
    fn aclrtDeviceEnablePeerAccess(peer: i32, flags: u32) {
        memory::enable_peer(peer, flags)
    }
    #[cfg(not(feature = "old-cann"))]
    fn aclrtDeviceGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        // The fake's own choice: 3 (least urgent) to 0.
        state::current()?;
        out(least, 3, "leastPriority")?;
        out(greatest, 0, "greatestPriority")
    }
    fn aclrtCreateStream(stream: *mut aclrtStream) {
        streams::create(stream)
    }
    fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, _priority: u32, _flag: u32) {
        streams::create(stream)
    }
    fn aclrtDestroyStream(stream: aclrtStream) {
        streams::destroy(stream)
    }
    fn aclrtSynchronizeStream(stream: aclrtStream) {
        streams::resolve(stream)?.synchronize();
        memory::drain_graveyard();
        Ok(())
    }
    fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) {
        let s = streams::resolve(stream)?;
        out(status, i32::from(!s.idle()), "status")
    }
    fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) {
        events::stream_wait(stream, event)
    }
    #[cfg(not(feature = "old-cann"))]
    fn aclrtLaunchHostFunc(stream: aclrtStream, f: aclrtCallback, args: *mut c_void) {
        callbacks::launch_host_func(stream, f, args)
    }
    fn aclrtSubscribeReport(thread: u64, stream: aclrtStream) {
        callbacks::subscribe(thread, stream)
    }
    fn aclrtUnSubscribeReport(thread: u64, stream: aclrtStream) {
        callbacks::unsubscribe(thread, stream)
    }
    fn aclrtLaunchCallback(f: aclrtCallback, data: *mut c_void, block: aclrtCallbackBlockType, stream: aclrtStream) {
        callbacks::launch_callback(f, data, block, stream)
    }
    fn aclrtProcessReport(timeout: i32) {
        callbacks::process(timeout)
    }
    fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) {
        events::create(event, flag)
    }
    fn aclrtDestroyEvent(event: aclrtEvent) {
        events::destroy(event)
    }
    fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) {
        events::record(event, stream)
    }
    fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) {
        events::query(event, status)
    }
    fn aclrtSynchronizeEvent(event: aclrtEvent) {
        events::synchronize(event)
    }
    fn aclrtEventElapsedTime(ms: *mut f32, start: aclrtEvent, end: aclrtEvent) {
        events::elapsed(ms, start, end)
    }
    #[cfg(not(feature = "old-cann"))]
    fn aclrtMemGetAllocationGranularity(prop: *mut aclrtPhysicalMemProp, _option: aclrtMemGranularityOptions, granularity: *mut usize) {
        vmm::granularity(prop, granularity)
    }
    fn aclrtReserveMemAddress(ptr: *mut *mut c_void, size: usize, alignment: usize, expect: *mut c_void, flags: u64) {
        vmm::reserve(ptr, size, alignment, expect, flags)
    }
    fn aclrtReleaseMemAddress(ptr: *mut c_void) {
        vmm::release(ptr)
    }
    fn aclrtMallocPhysical(handle: *mut aclrtDrvMemHandle, size: usize, prop: *const aclrtPhysicalMemProp, flags: u64) {
        vmm::malloc_physical(handle, size, prop, flags)
    }
    fn aclrtFreePhysical(handle: aclrtDrvMemHandle) {
        vmm::free_physical(handle)
    }
    fn aclrtMapMem(ptr: *mut c_void, size: usize, offset: usize, handle: aclrtDrvMemHandle, flags: u64) {
        vmm::map(ptr, size, offset, handle, flags)
    }
    fn aclrtUnmapMem(ptr: *mut c_void) {
        vmm::unmap(ptr)
    }
}

/// Functions that return no error code, so bypass the fault and trace
/// wrapper: `fn name(args) -> ret { body }`.
macro_rules! plain {
    (table $table:ident; $( $(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $ret:ty $body:block )*) => {
        $(
            $(#[$m])*
            #[no_mangle]
            extern "C" fn $name($($a: $t),*) -> $ret $body
        )*
        signatures!($table, $($name($($t),*) -> $ret)*);
    };
}

plain! {
    table OTHERS;
    /// `aclGetRecentErrMsg`: this thread's last message.
    fn aclGetRecentErrMsg() -> *const c_char {
        recent_message()
    }
    /// `aclrtGetSocName`.
    fn aclrtGetSocName() -> *const c_char {
        c"Ascend910B-fake".as_ptr()
    }
    /// `HcclGetErrorString`.
    #[cfg(not(feature = "old-cann"))]
    fn HcclGetErrorString(code: HcclResult) -> *const c_char {
        hccl::error_string(code).as_ptr()
    }
}

/// One send or receive as the batch functions take it.
fn item(send: bool, buf: *mut c_void, count: u64, dtype: i32, peer: u32) -> Item {
    Item {
        send_recv_type: i32::from(!send),
        buf,
        count,
        data_type: dtype,
        remote_rank: peer,
    }
}

hccl_fns! {
    table HCCL;
    fn HcclGetRootInfo(info: *mut HcclRootInfo) {
        hccl::root_info(info.cast())
    }
    fn HcclCommInitRootInfo(n: u32, info: *const HcclRootInfo, rank: u32, comm: *mut HcclComm) {
        hccl::init(n, info.cast(), rank, comm)
    }
    fn HcclCommDestroy(comm: HcclComm) {
        hccl::destroy(comm)
    }
    fn HcclGetCommAsyncError(comm: HcclComm, error: *mut HcclResult) {
        hccl::async_error(comm, error)
    }
    #[cfg(not(feature = "old-cann"))]
    fn HcclGetRankSize(comm: HcclComm, size: *mut u32) {
        hccl::rank_size(comm, size)
    }
    fn HcclAllReduce(send: *mut c_void, recv: *mut c_void, count: u64, dtype: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) {
        hccl::collective(what::ALL_REDUCE, send, recv, count, dtype, op, 0, comm, stream)
    }
    fn HcclBroadcast(buf: *mut c_void, count: u64, dtype: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream) {
        hccl::collective(what::BROADCAST, std::ptr::null_mut(), buf, count, dtype, 0, root, comm, stream)
    }
    fn HcclAllGather(send: *mut c_void, recv: *mut c_void, count: u64, dtype: HcclDataType, comm: HcclComm, stream: aclrtStream) {
        hccl::collective(what::ALL_GATHER, send, recv, count, dtype, 0, 0, comm, stream)
    }
    fn HcclReduceScatter(send: *mut c_void, recv: *mut c_void, count: u64, dtype: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) {
        hccl::collective(what::REDUCE_SCATTER, send, recv, count, dtype, op, 0, comm, stream)
    }
    fn HcclReduce(send: *mut c_void, recv: *mut c_void, count: u64, dtype: HcclDataType, op: HcclReduceOp, root: u32, comm: HcclComm, stream: aclrtStream) {
        hccl::collective(what::REDUCE, send, recv, count, dtype, op, root, comm, stream)
    }
    fn HcclSend(buf: *mut c_void, count: u64, dtype: HcclDataType, peer: u32, comm: HcclComm, stream: aclrtStream) {
        p2p::batch(&[item(true, buf, count, dtype, peer)], comm, stream)
    }
    fn HcclRecv(buf: *mut c_void, count: u64, dtype: HcclDataType, peer: u32, comm: HcclComm, stream: aclrtStream) {
        p2p::batch(&[item(false, buf, count, dtype, peer)], comm, stream)
    }
    fn HcclBatchSendRecv(items: *mut HcclSendRecvItem, n: u32, comm: HcclComm, stream: aclrtStream) {
        if items.is_null() && n > 0 {
            return fail(hccl::E_PTR, "null items");
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: `n` items, by the prototype.
            unsafe { std::slice::from_raw_parts(items, n as usize) }
        };
        p2p::batch(list, comm, stream)
    }
    #[cfg(not(feature = "old-cann"))]
    fn HcclGroupStart() {
        p2p::group_start()
    }
    #[cfg(not(feature = "old-cann"))]
    fn HcclGroupEnd() {
        p2p::group_end()
    }
}
