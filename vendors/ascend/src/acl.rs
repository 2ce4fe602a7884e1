//! Bindings to the ACL runtime (`libascendcl.so`): the functions, types and
//! constants this vendor uses, named as in `acl_rt.h`, `acl_base.h` and
//! `error_codes/rt_error_codes.h`, and checked against both header versions
//! by the header test.

#![expect(
    non_camel_case_types,
    reason = "C names from the CANN headers, so the header test can check them"
)]

use std::ffi::{c_char, c_int, c_void};

use crate::bind::{c_consts, c_types, library};

c_types! {
    /// `aclError`.
    aclError = c_int;
    /// `aclrtStream` (null: the current device's default stream).
    aclrtStream = *mut c_void;
    /// `aclrtEvent`.
    aclrtEvent = *mut c_void;
    /// `aclrtMemcpyKind`.
    aclrtMemcpyKind = c_int;
    /// `aclrtMemMallocPolicy`.
    aclrtMemMallocPolicy = c_int;
    /// `aclrtMemAttr`.
    aclrtMemAttr = c_int;
    /// `aclrtStreamStatus`.
    aclrtStreamStatus = c_int;
    /// `aclrtEventRecordedStatus`.
    aclrtEventRecordedStatus = c_int;
    /// `aclrtCallbackBlockType`.
    aclrtCallbackBlockType = c_int;
    /// `aclrtDevAttr`.
    aclrtDevAttr = c_int;
    /// `aclDeviceInfo`.
    aclDeviceInfo = c_int;
    /// `aclrtMemGranularityOptions`.
    aclrtMemGranularityOptions = c_int;
    /// `aclrtDrvMemHandle`: a physical chunk.
    aclrtDrvMemHandle = *mut c_void;
    /// `aclrtCallback` (`aclrtLaunchCallback`) and `aclrtHostFunc`
    /// (`aclrtLaunchHostFunc`): `void (*)(void *)`.
    aclrtCallback = Option<unsafe extern "C" fn(*mut c_void)>;
    /// `aclrtPhysicalMemProp`.
    aclrtPhysicalMemProp = AclPhysicalMemProp;
}

/// `aclrtMemLocation`: where physical memory lives.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct AclMemLocation {
    /// The device.
    pub(crate) id: u32,
    /// `aclrtMemLocationType`.
    pub(crate) type_: c_int,
}

/// `aclrtPhysicalMemProp`: what kind of physical memory to create.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct AclPhysicalMemProp {
    /// `aclrtMemHandleType`.
    pub(crate) handle_type: c_int,
    /// `aclrtMemAllocationType`.
    pub(crate) allocation_type: c_int,
    /// `aclrtMemAttr`.
    pub(crate) mem_attr: c_int,
    /// The device.
    pub(crate) location: AclMemLocation,
    /// Reserved, zero.
    pub(crate) reserve: u64,
}

impl AclPhysicalMemProp {
    /// Pinned huge-page HBM on `device`, no shareable handle.
    pub(crate) fn huge_on(device: u32) -> Self {
        AclPhysicalMemProp {
            handle_type: ACL_MEM_HANDLE_TYPE_NONE,
            allocation_type: ACL_MEM_ALLOCATION_TYPE_PINNED,
            mem_attr: ACL_HBM_MEM_HUGE,
            location: AclMemLocation {
                id: device,
                type_: ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            reserve: 0,
        }
    }
}

c_consts! {
    /// No error.
    ACL_SUCCESS: aclError = 0;
    /// A bad parameter (the ACL layer).
    ACL_ERROR_INVALID_PARAM: aclError = 100000;
    /// `aclInit` called again in a process (harmless).
    ACL_ERROR_REPEAT_INITIALIZE: aclError = 100002;
    /// A bad parameter (the runtime layer).
    ACL_ERROR_RT_PARAM_INVALID: aclError = 107000;
    /// A device index out of range.
    ACL_ERROR_RT_INVALID_DEVICEID: aclError = 107001;
    /// The thread has no current context (no `aclrtSetDevice` yet).
    ACL_ERROR_RT_CONTEXT_NULL: aclError = 107002;
    /// An unknown handle.
    ACL_ERROR_RT_INVALID_HANDLE: aclError = 107017;
    /// The feature is not supported.
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT: aclError = 207000;
    /// Out of device memory.
    ACL_ERROR_RT_MEMORY_ALLOCATION: aclError = 207001;
    /// No device.
    ACL_ERROR_RT_NO_DEVICE: aclError = 207004;
    /// Every event of the device is in use.
    ACL_ERROR_RT_NO_EVENT_RESOURCE: aclError = 207007;
    /// Every stream of the device is in use.
    ACL_ERROR_RT_NO_STREAM_RESOURCE: aclError = 207008;
    /// Out of device memory (the device side).
    ACL_ERROR_RT_DEVICE_OOM: aclError = 207018;
    /// The stream still has work.
    ACL_ERROR_RT_STREAM_NOT_COMPLETE: aclError = 507004;
    /// The event's work is still pending.
    ACL_ERROR_RT_EVENT_NOT_COMPLETE: aclError = 507006;
    /// A stream synchronisation timed out.
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: aclError = 507046;
    /// An event synchronisation timed out.
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: aclError = 507047;

    /// Host to host.
    ACL_MEMCPY_HOST_TO_HOST: aclrtMemcpyKind = 0;
    /// Host to device.
    ACL_MEMCPY_HOST_TO_DEVICE: aclrtMemcpyKind = 1;
    /// Device to host.
    ACL_MEMCPY_DEVICE_TO_HOST: aclrtMemcpyKind = 2;
    /// Device to device.
    ACL_MEMCPY_DEVICE_TO_DEVICE: aclrtMemcpyKind = 3;

    /// Huge pages first, else normal pages.
    ACL_MEM_MALLOC_HUGE_FIRST: aclrtMemMallocPolicy = 0;
    /// High-bandwidth device memory.
    ACL_HBM_MEM: aclrtMemAttr = 1;
    /// High-bandwidth device memory in huge pages.
    ACL_HBM_MEM_HUGE: aclrtMemAttr = 4;

    /// A stream with no pending work.
    ACL_STREAM_STATUS_COMPLETE: aclrtStreamStatus = 0;
    /// A stream with pending work.
    ACL_STREAM_STATUS_NOT_READY: aclrtStreamStatus = 1;
    /// The event's record is pending.
    ACL_EVENT_RECORDED_STATUS_NOT_READY: aclrtEventRecordedStatus = 0;
    /// The event's record is done.
    ACL_EVENT_RECORDED_STATUS_COMPLETE: aclrtEventRecordedStatus = 1;

    /// A callback that later work on the stream waits for.
    ACL_CALLBACK_BLOCK: aclrtCallbackBlockType = 1;

    /// An event that can be waited on (synchronised, queried).
    ACL_EVENT_SYNC: u32 = 1;
    /// An event that records a timestamp.
    ACL_EVENT_TIME_LINE: u32 = 8;

    /// `aclGetDeviceCapability`: AI cores.
    ACL_DEVICE_INFO_AI_CORE_NUM: aclDeviceInfo = 0;
    /// `aclrtGetDeviceInfo`: AI cores.
    ACL_DEV_ATTR_AICORE_CORE_NUM: aclrtDevAttr = 101;
    /// `aclrtGetDeviceInfo`: device memory in bytes.
    ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE: aclrtDevAttr = 301;

    /// No shareable handle.
    ACL_MEM_HANDLE_TYPE_NONE: c_int = 0;
    /// Pinned physical memory.
    ACL_MEM_ALLOCATION_TYPE_PINNED: c_int = 0;
    /// Device memory.
    ACL_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
    /// The recommended granularity.
    ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED: aclrtMemGranularityOptions = 1;
}

/// The functions and constants absent from the older (torch-npu 2.1.0)
/// headers: the vendor works without the functions, and the error codes
/// are ones only newer runtimes return.
pub(crate) const OPTIONAL: &[&str] = &[
    "aclrtLaunchHostFunc",
    "aclrtMemGetAllocationGranularity",
    "aclrtDeviceGetStreamPriorityRange",
    "aclrtGetDeviceInfo",
    "aclrtFreeWithDevSync",
    "ACL_DEV_ATTR_AICORE_CORE_NUM",
    "ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE",
    "ACL_ERROR_RT_DEVICE_OOM",
    "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
    "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT",
    "ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED",
];

/// The functions without which the vendor does not start.
pub(crate) const REQUIRED: &[&str] = &[
    "aclInit",
    "aclrtGetDeviceCount",
    "aclrtSetDevice",
    "aclrtMalloc",
    "aclrtFree",
    "aclrtMemcpy",
    "aclrtCreateStream",
    "aclrtCreateEventWithFlag",
];

/// The virtual memory functions (all of them, else no VIRTUAL_MEMORY).
pub(crate) const VMM_REQUIRED: &[&str] = &[
    "aclrtReserveMemAddress",
    "aclrtReleaseMemAddress",
    "aclrtMallocPhysical",
    "aclrtFreePhysical",
    "aclrtMapMem",
    "aclrtUnmapMem",
];

library! {
    /// The ACL runtime library and its functions.
    struct Acl("ACL runtime library") {
        fn aclInit(configPath: *const c_char) -> aclError;
        fn aclGetRecentErrMsg() -> *const c_char;
        fn aclrtGetVersion(majorVersion: *mut i32, minorVersion: *mut i32, patchVersion: *mut i32) -> aclError;
        fn aclrtGetDeviceCount(count: *mut u32) -> aclError;
        fn aclrtSetDevice(deviceId: i32) -> aclError;
        fn aclrtSynchronizeDevice() -> aclError;
        fn aclrtGetSocName() -> *const c_char;
        fn aclGetDeviceCapability(deviceId: u32, deviceInfo: aclDeviceInfo, value: *mut i64) -> aclError;
        fn aclrtGetDeviceInfo(deviceId: u32, attr: aclrtDevAttr, value: *mut i64) -> aclError;
        fn aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) -> aclError;
        fn aclrtMalloc(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
        fn aclrtMallocAlign32(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
        fn aclrtFree(devPtr: *mut c_void) -> aclError;
        fn aclrtFreeWithDevSync(devPtr: *mut c_void) -> aclError;
        fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError;
        fn aclrtFreeHost(hostPtr: *mut c_void) -> aclError;
        fn aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) -> aclError;
        fn aclrtMemsetAsync(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize, stream: aclrtStream) -> aclError;
        fn aclrtMemcpy(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) -> aclError;
        fn aclrtMemcpyAsync(
            dst: *mut c_void,
            destMax: usize,
            src: *const c_void,
            count: usize,
            kind: aclrtMemcpyKind,
            stream: aclrtStream,
        ) -> aclError;
        fn aclrtDeviceCanAccessPeer(canAccessPeer: *mut i32, deviceId: i32, peerDeviceId: i32) -> aclError;
        fn aclrtDeviceEnablePeerAccess(peerDeviceId: i32, flags: u32) -> aclError;
        fn aclrtDeviceGetStreamPriorityRange(leastPriority: *mut i32, greatestPriority: *mut i32) -> aclError;
        fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, priority: u32, flag: u32) -> aclError;
        fn aclrtDestroyStream(stream: aclrtStream) -> aclError;
        fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError;
        fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) -> aclError;
        fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError;
        fn aclrtLaunchHostFunc(stream: aclrtStream, fn_: aclrtCallback, args: *mut c_void) -> aclError;
        fn aclrtSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError;
        fn aclrtUnSubscribeReport(threadId: u64, stream: aclrtStream) -> aclError;
        fn aclrtLaunchCallback(fn_: aclrtCallback, userData: *mut c_void, blockType: aclrtCallbackBlockType, stream: aclrtStream) -> aclError;
        fn aclrtProcessReport(timeout: i32) -> aclError;
        fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError;
        fn aclrtDestroyEvent(event: aclrtEvent) -> aclError;
        fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
        fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) -> aclError;
        fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError;
        fn aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) -> aclError;
        fn aclrtMemGetAllocationGranularity(
            prop: *mut aclrtPhysicalMemProp,
            option: aclrtMemGranularityOptions,
            granularity: *mut usize,
        ) -> aclError;
        fn aclrtReserveMemAddress(virPtr: *mut *mut c_void, size: usize, alignment: usize, expectPtr: *mut c_void, flags: u64) -> aclError;
        fn aclrtReleaseMemAddress(virPtr: *mut c_void) -> aclError;
        fn aclrtMallocPhysical(handle: *mut aclrtDrvMemHandle, size: usize, prop: *const aclrtPhysicalMemProp, flags: u64) -> aclError;
        fn aclrtFreePhysical(handle: aclrtDrvMemHandle) -> aclError;
        fn aclrtMapMem(virPtr: *mut c_void, size: usize, offset: usize, handle: aclrtDrvMemHandle, flags: u64) -> aclError;
        fn aclrtUnmapMem(virPtr: *mut c_void) -> aclError;
    }
}
