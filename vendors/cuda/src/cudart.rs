//! Bindings to the CUDA runtime (`libcudart.so.13` or `.so.12`): the
//! functions, types and constants this vendor uses, named as in
//! `cuda_runtime_api.h` and `driver_types.h` and checked against them by
//! the header test.

#![expect(
    non_camel_case_types,
    non_upper_case_globals,
    reason = "C names from the CUDA headers, so the header test can check them"
)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::bind::{c_consts, c_types, library};

c_types! {
    /// `cudaError_t`.
    cudaError_t = c_int;
    /// `cudaStream_t` (null: the legacy default stream).
    cudaStream_t = *mut c_void;
    /// `cudaEvent_t`.
    cudaEvent_t = *mut c_void;
    /// `enum cudaMemcpyKind`.
    cudaMemcpyKind = c_int, "enum cudaMemcpyKind";
    /// `enum cudaDeviceAttr`.
    cudaDeviceAttr = c_int, "enum cudaDeviceAttr";
    /// `struct cudaDeviceProp`: never read beyond its leading `name`, since
    /// its layout differs between CUDA versions.
    cudaDeviceProp = c_void, "struct cudaDeviceProp";
    /// `cudaHostFn_t`: `void (*)(void *userData)`.
    cudaHostFn_t = Option<unsafe extern "C" fn(*mut c_void)>;
    /// `struct cudaPointerAttributes`.
    cudaPointerAttributes = CudaPointerAttributes, "struct cudaPointerAttributes";
}

/// `struct cudaPointerAttributes` (CUDA 11 and later).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CudaPointerAttributes {
    /// `enum cudaMemoryType type`.
    pub(crate) type_: c_int,
    /// `int device`.
    pub(crate) device: c_int,
    /// `void *devicePointer`.
    pub(crate) device_pointer: *mut c_void,
    /// `void *hostPointer`.
    pub(crate) host_pointer: *mut c_void,
    /// CUDA 13's `localityDomainOrdinal` union and `long reserved[7]`
    /// (CUDA 12: `long reserved[8]`): written by the runtime, never read.
    pub(crate) reserved: [std::ffi::c_long; 8],
}

impl CudaPointerAttributes {
    /// All zero.
    pub(crate) fn zeroed() -> Self {
        CudaPointerAttributes {
            type_: 0,
            device: 0,
            device_pointer: std::ptr::null_mut(),
            host_pointer: std::ptr::null_mut(),
            reserved: [0; 8],
        }
    }
}

c_consts! {
    /// No error.
    cudaSuccess: cudaError_t = 0;
    /// A bad argument (also an unknown or already freed pointer).
    cudaErrorInvalidValue: cudaError_t = 1;
    /// Out of device (or pinned host) memory.
    cudaErrorMemoryAllocation: cudaError_t = 2;
    /// The driver could not be initialised.
    cudaErrorInitializationError: cudaError_t = 3;
    /// A pointer that is not host memory of CUDA's (deprecated, still defined).
    cudaErrorInvalidHostPointer: cudaError_t = 16;
    /// A pointer that is not device memory.
    cudaErrorInvalidDevicePointer: cudaError_t = 17;
    /// The driver library is a stub (the toolkit's `stubs/libcuda.so`).
    cudaErrorStubLibrary: cudaError_t = 34;
    /// No driver, or one older than the runtime (what cudart returns when
    /// `libcuda.so.1` is absent).
    cudaErrorInsufficientDriver: cudaError_t = 35;
    /// Every device is busy or unavailable.
    cudaErrorDevicesUnavailable: cudaError_t = 46;
    /// No CUDA-capable device.
    cudaErrorNoDevice: cudaError_t = 100;
    /// A device index out of range.
    cudaErrorInvalidDevice: cudaError_t = 101;
    /// An unknown stream or event, or an event with no usable timing.
    cudaErrorInvalidResourceHandle: cudaError_t = 400;
    /// Work is still pending (queries; elapsed time of a pending event).
    cudaErrorNotReady: cudaError_t = 600;
    /// The operation is not supported on this device or system.
    cudaErrorNotSupported: cudaError_t = 801;
    /// The display driver does not match the CUDA driver.
    cudaErrorSystemDriverMismatch: cudaError_t = 803;

    /// Host to host.
    cudaMemcpyHostToHost: cudaMemcpyKind = 0;
    /// Host to device.
    cudaMemcpyHostToDevice: cudaMemcpyKind = 1;
    /// Device to host.
    cudaMemcpyDeviceToHost: cudaMemcpyKind = 2;
    /// Device to device.
    cudaMemcpyDeviceToDevice: cudaMemcpyKind = 3;

    /// A stream that does not synchronise with the legacy default stream.
    cudaStreamNonBlocking: c_uint = 1;
    /// An event that records timing.
    cudaEventDefault: c_uint = 0;
    /// An event without timing (cheaper).
    cudaEventDisableTiming: c_uint = 2;

    /// Streaming multiprocessors.
    cudaDevAttrMultiProcessorCount: cudaDeviceAttr = 16;
    /// Compute capability major.
    cudaDevAttrComputeCapabilityMajor: cudaDeviceAttr = 75;
    /// Compute capability minor.
    cudaDevAttrComputeCapabilityMinor: cudaDeviceAttr = 76;

    /// Memory CUDA does not know (pageable host memory).
    cudaMemoryTypeUnregistered: c_int = 0;
    /// Page-locked host memory.
    cudaMemoryTypeHost: c_int = 1;
    /// Device memory.
    cudaMemoryTypeDevice: c_int = 2;
    /// Managed memory.
    cudaMemoryTypeManaged: c_int = 3;
    /// Peer access was enabled before.
    cudaErrorPeerAccessAlreadyEnabled: cudaError_t = 704;
}

library! {
    /// The CUDA runtime library and its functions.
    struct Cudart("CUDA runtime library") {
        fn cudaGetErrorName(error: cudaError_t) -> *const c_char;
        fn cudaGetErrorString(error: cudaError_t) -> *const c_char;
        fn cudaGetLastError() -> cudaError_t;
        fn cudaRuntimeGetVersion(runtimeVersion: *mut c_int) -> cudaError_t;
        fn cudaGetDeviceCount(count: *mut c_int) -> cudaError_t;
        fn cudaGetDevice(device: *mut c_int) -> cudaError_t;
        fn cudaSetDevice(device: c_int) -> cudaError_t;
        fn cudaDeviceSynchronize() -> cudaError_t;
        fn cudaDeviceGetAttribute(value: *mut c_int, attr: cudaDeviceAttr, device: c_int) -> cudaError_t;
        fn cudaGetDeviceProperties["cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"](prop: *mut cudaDeviceProp, device: c_int) -> cudaError_t;
        fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> cudaError_t;
        fn cudaMalloc(devPtr: *mut *mut c_void, size: usize) -> cudaError_t;
        fn cudaFree(devPtr: *mut c_void) -> cudaError_t;
        fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> cudaError_t;
        fn cudaFreeHost(ptr: *mut c_void) -> cudaError_t;
        fn cudaMemset(devPtr: *mut c_void, value: c_int, count: usize) -> cudaError_t;
        fn cudaMemsetAsync(devPtr: *mut c_void, value: c_int, count: usize, stream: cudaStream_t) -> cudaError_t;
        fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind) -> cudaError_t;
        fn cudaMemcpyAsync(
            dst: *mut c_void,
            src: *const c_void,
            count: usize,
            kind: cudaMemcpyKind,
            stream: cudaStream_t,
        ) -> cudaError_t;
        fn cudaMemcpyPeer(
            dst: *mut c_void,
            dstDevice: c_int,
            src: *const c_void,
            srcDevice: c_int,
            count: usize,
        ) -> cudaError_t;
        fn cudaMemcpyPeerAsync(
            dst: *mut c_void,
            dstDevice: c_int,
            src: *const c_void,
            srcDevice: c_int,
            count: usize,
            stream: cudaStream_t,
        ) -> cudaError_t;
        fn cudaDeviceGetStreamPriorityRange(leastPriority: *mut c_int, greatestPriority: *mut c_int) -> cudaError_t;
        fn cudaStreamCreateWithPriority(pStream: *mut cudaStream_t, flags: c_uint, priority: c_int) -> cudaError_t;
        fn cudaStreamDestroy(stream: cudaStream_t) -> cudaError_t;
        fn cudaStreamSynchronize(stream: cudaStream_t) -> cudaError_t;
        fn cudaStreamQuery(stream: cudaStream_t) -> cudaError_t;
        fn cudaStreamWaitEvent(stream: cudaStream_t, event: cudaEvent_t, flags: c_uint) -> cudaError_t;
        fn cudaLaunchHostFunc(stream: cudaStream_t, func: cudaHostFn_t, userData: *mut c_void) -> cudaError_t;
        fn cudaEventCreateWithFlags(event: *mut cudaEvent_t, flags: c_uint) -> cudaError_t;
        fn cudaEventDestroy(event: cudaEvent_t) -> cudaError_t;
        fn cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t) -> cudaError_t;
        fn cudaEventQuery(event: cudaEvent_t) -> cudaError_t;
        fn cudaEventSynchronize(event: cudaEvent_t) -> cudaError_t;
        fn cudaEventElapsedTime(ms: *mut f32, start: cudaEvent_t, end: cudaEvent_t) -> cudaError_t;
        fn cudaPointerGetAttributes(attributes: *mut cudaPointerAttributes, ptr: *const c_void) -> cudaError_t;
        fn cudaDeviceCanAccessPeer(canAccessPeer: *mut c_int, device: c_int, peerDevice: c_int) -> cudaError_t;
        fn cudaDeviceEnablePeerAccess(peerDevice: c_int, flags: c_uint) -> cudaError_t;
    }
}
