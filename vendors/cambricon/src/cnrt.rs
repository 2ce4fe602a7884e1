//! Bindings to CNRT (`libcnrt.so`, CNRT 6.x): the functions, types and
//! constants this vendor uses, named as in Cambricon's `cnrt.h` and declared
//! from the published API (the CNRT developer guide and public copies of
//! `cnrt.h` 6.0.2 and 6.14.1). The pin test (`tests/pins.rs`) names the
//! version every constant was taken from; the header test checks each
//! signature against the project's own header of those prototypes.

#![expect(
    non_camel_case_types,
    non_upper_case_globals,
    reason = "C names from cnrt.h, so the tests can check them"
)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::bind::{c_consts, c_types, library};

c_types! {
    /// `cnrtRet_t`.
    cnrtRet_t = c_int;
    /// `cnrtQueue_t` (null: the calling thread's default queue).
    cnrtQueue_t = *mut c_void;
    /// `cnrtNotifier_t`.
    cnrtNotifier_t = *mut c_void;
    /// `cnrtMemTransDir_t`.
    cnrtMemTransDir_t = c_int;
    /// `cnrtDeviceAttr_t`.
    cnrtDeviceAttr_t = c_int;
    /// `cnrtDeviceProp_t`: never read beyond its leading `name`, since it
    /// grew from `{ char name[256]; }` (6.0.2) to a large struct (6.14).
    cnrtDeviceProp_t = c_void;
    /// `cnrtHostFn_t`: `void (*)(void *userData)`.
    cnrtHostFn_t = Option<unsafe extern "C" fn(*mut c_void)>;
}

c_consts! {
    /// No error.
    cnrtSuccess: cnrtRet_t = 0;
    /// Work is still pending (queries).
    cnrtErrorNotReady: cnrtRet_t = 1;
    /// A bad argument.
    cnrtErrorArgsInvalid: cnrtRet_t = 100006;
    /// Out of memory.
    cnrtErrorNoMem: cnrtRet_t = 100100;
    /// The device is busy (documented for queries; pending, like NotReady).
    cnrtErrorBusy: cnrtRet_t = 632014;
    /// An unknown error.
    cnrtErrorUnknown: cnrtRet_t = 999991;

    /// Host to device.
    cnrtMemcpyHostToDev: cnrtMemTransDir_t = 0;
    /// Device to device (same device).
    cnrtMemcpyDevToDev: cnrtMemTransDir_t = 1;
    /// Device to host.
    cnrtMemcpyDevToHost: cnrtMemTransDir_t = 2;
    /// Host to host.
    cnrtMemcpyHostToHost: cnrtMemTransDir_t = 3;

    /// A notifier that records timestamps.
    CNRT_NOTIFIER_DEFAULT: c_uint = 0x0;
    /// A notifier that records no timestamps at all (cheaper).
    CNRT_NOTIFIER_DISABLE_TIMING_ALL: c_uint = 0x4;

    /// Compute capability major.
    cnrtAttrComputeCapabilityMajor: cnrtDeviceAttr_t = 0x01;
    /// Compute capability minor.
    cnrtAttrComputeCapabilityMinor: cnrtDeviceAttr_t = 0x02;
    /// Clusters.
    cnrtAttrClusterCount: cnrtDeviceAttr_t = 0x205;
    /// Cores per cluster.
    cnrtAttrMcorePerCluster: cnrtDeviceAttr_t = 0x206;
    /// Total memory, in MiB.
    cnrtAttrTotalMemSize: cnrtDeviceAttr_t = 0x405;
}

library! {
    /// CNRT and its functions.
    struct Cnrt("CNRT library") {
        fn cnrtGetErrorName(error: cnrtRet_t) -> *const c_char;
        fn cnrtGetErrorStr(error: cnrtRet_t) -> *const c_char;
        fn cnrtGetLastError() -> cnrtRet_t;
        fn cnrtGetLibVersion(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> cnrtRet_t;
        fn cnrtGetDeviceCount(pCount: *mut c_uint) -> cnrtRet_t;
        fn cnrtGetDevice(pOrdinal: *mut c_int) -> cnrtRet_t;
        fn cnrtSetDevice(ordinal: c_int) -> cnrtRet_t;
        fn cnrtSyncDevice() -> cnrtRet_t;
        fn cnrtDeviceGetAttribute(pValue: *mut c_int, attr: cnrtDeviceAttr_t, device: c_int) -> cnrtRet_t;
        fn cnrtGetDeviceProperties_V3["cnrtGetDeviceProperties_V3", "cnrtGetDeviceProperties"](prop: *mut cnrtDeviceProp_t, device: c_int) -> cnrtRet_t;
        fn cnrtMemGetInfo(free: *mut usize, total: *mut usize) -> cnrtRet_t;
        fn cnrtMalloc(pPtr: *mut *mut c_void, bytes: usize) -> cnrtRet_t;
        fn cnrtFree(ptr: *mut c_void) -> cnrtRet_t;
        fn cnrtHostMalloc(pPtr: *mut *mut c_void, bytes: usize) -> cnrtRet_t;
        fn cnrtFreeHost(ptr: *mut c_void) -> cnrtRet_t;
        fn cnrtMemset(ptr: *mut c_void, value: c_int, bytes: usize) -> cnrtRet_t;
        fn cnrtMemsetAsync(ptr: *mut c_void, value: c_int, bytes: usize, queue: cnrtQueue_t) -> cnrtRet_t;
        fn cnrtMemcpy(dst: *mut c_void, src: *mut c_void, bytes: usize, dir: cnrtMemTransDir_t) -> cnrtRet_t;
        fn cnrtMemcpyAsync_V2["cnrtMemcpyAsync_V2", "cnrtMemcpyAsync"](
            dst: *mut c_void,
            src: *mut c_void,
            bytes: usize,
            queue: cnrtQueue_t,
            dir: cnrtMemTransDir_t,
        ) -> cnrtRet_t;
        fn cnrtMemcpyPeer(dst: *mut c_void, dstDev: c_int, src: *mut c_void, srcDev: c_int, bytes: usize) -> cnrtRet_t;
        fn cnrtMemcpyPeerAsync(
            dst: *mut c_void,
            dstDev: c_int,
            src: *mut c_void,
            srcDev: c_int,
            bytes: usize,
            queue: cnrtQueue_t,
        ) -> cnrtRet_t;
        fn cnrtDeviceGetQueuePriorityRange(pMinPriority: *mut c_int, pMaxPriority: *mut c_int) -> cnrtRet_t;
        fn cnrtQueueCreateWithPriority(pQueue: *mut cnrtQueue_t, flags: c_uint, priority: c_int) -> cnrtRet_t;
        fn cnrtQueueDestroy(queue: cnrtQueue_t) -> cnrtRet_t;
        fn cnrtQueueSync(queue: cnrtQueue_t) -> cnrtRet_t;
        fn cnrtQueueQuery(queue: cnrtQueue_t) -> cnrtRet_t;
        fn cnrtQueueWaitNotifier(notifier: cnrtNotifier_t, queue: cnrtQueue_t, flag: c_uint) -> cnrtRet_t;
        fn cnrtInvokeHostFunc(queue: cnrtQueue_t, fn_: cnrtHostFn_t, userData: *mut c_void) -> cnrtRet_t;
        fn cnrtNotifierCreateWithFlags(pNotifier: *mut cnrtNotifier_t, flags: c_uint) -> cnrtRet_t;
        fn cnrtNotifierDestroy(notifier: cnrtNotifier_t) -> cnrtRet_t;
        fn cnrtPlaceNotifier(notifier: cnrtNotifier_t, queue: cnrtQueue_t) -> cnrtRet_t;
        fn cnrtQueryNotifier(notifier: cnrtNotifier_t) -> cnrtRet_t;
        fn cnrtWaitNotifier(notifier: cnrtNotifier_t) -> cnrtRet_t;
        fn cnrtNotifierElapsedTime(start: cnrtNotifier_t, end: cnrtNotifier_t, ms: *mut f32) -> cnrtRet_t;
    }
}
