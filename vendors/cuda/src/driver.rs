//! Bindings to the CUDA driver API (`libcuda.so.1`), used for device names
//! and memory sizes and for the virtual-memory capability: the functions,
//! types, structs and constants, named as in `cuda.h` and checked against it
//! by the header test (layouts included).

#![expect(
    non_camel_case_types,
    reason = "C names from cuda.h, so the header test can check them"
)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

use crate::bind::{c_consts, c_types, library};

/// `CUmemLocation`: `{ CUmemLocationType type; int id; }` (in CUDA 13 `id`
/// shares a 4-byte union with a device/locality pair).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CuMemLocation {
    /// `type`: `CU_MEM_LOCATION_TYPE_DEVICE` here.
    pub(crate) type_: c_int,
    /// `id`: the device ordinal.
    pub(crate) id: c_int,
}

/// `allocFlags` of `CUmemAllocationProp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CuMemAllocFlags {
    /// `compressionType`.
    pub(crate) compression_type: u8,
    /// `gpuDirectRDMACapable`.
    pub(crate) gpu_direct_rdma_capable: u8,
    /// `usage`.
    pub(crate) usage: u16,
    /// `reserved`.
    pub(crate) reserved: [u8; 4],
}

/// `CUmemAllocationProp` (32 bytes); zero-initialise it and set what is used.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CuMemAllocationProp {
    /// `type`: `CU_MEM_ALLOCATION_TYPE_PINNED`.
    pub(crate) type_: c_int,
    /// `requestedHandleTypes`: `CU_MEM_HANDLE_TYPE_NONE`.
    pub(crate) requested_handle_types: c_int,
    /// `location`: the device.
    pub(crate) location: CUmemLocation,
    /// `win32HandleMetaData`: null.
    pub(crate) win32_handle_meta_data: *mut c_void,
    /// `allocFlags`: zero.
    pub(crate) alloc_flags: CuMemAllocFlags,
}

/// `CUmemAccessDesc`: `{ CUmemLocation location; CUmemAccess_flags flags; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CuMemAccessDesc {
    /// `location`: the device that gets access.
    pub(crate) location: CUmemLocation,
    /// `flags`: `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
    pub(crate) flags: c_int,
}

c_types! {
    /// `CUresult`.
    CUresult = c_int;
    /// `CUdevice`: a device handle (an ordinal in practice).
    CUdevice = c_int;
    /// `CUcontext`.
    CUcontext = *mut c_void;
    /// `CUdeviceptr`.
    CUdeviceptr = c_ulonglong;
    /// `CUdevice_attribute`.
    CUdevice_attribute = c_int;
    /// `CUmemGenericAllocationHandle`.
    CUmemGenericAllocationHandle = c_ulonglong;
    /// `CUmemAllocationGranularity_flags`.
    CUmemAllocationGranularity_flags = c_int;
    /// `CUmemLocation`.
    CUmemLocation = CuMemLocation;
    /// `CUmemAllocationProp`.
    CUmemAllocationProp = CuMemAllocationProp;
    /// `CUmemAccessDesc`.
    CUmemAccessDesc = CuMemAccessDesc;
}

c_consts! {
    /// No error.
    CUDA_SUCCESS: CUresult = 0;
    /// A bad argument.
    CUDA_ERROR_INVALID_VALUE: CUresult = 1;
    /// Out of device memory.
    CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
    /// `cuInit` was not called or failed.
    CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
    /// The toolkit's stub `libcuda.so`, not a real driver.
    CUDA_ERROR_STUB_LIBRARY: CUresult = 34;
    /// No CUDA-capable device.
    CUDA_ERROR_NO_DEVICE: CUresult = 100;
    /// A device ordinal out of range.
    CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
    /// An unknown handle.
    CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
    /// Work is still pending.
    CUDA_ERROR_NOT_READY: CUresult = 600;
    /// Not supported on this device or system.
    CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;

    /// Whether the device supports the virtual memory management API.
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: CUdevice_attribute = 102;
    /// Pinned device memory.
    CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
    /// No shareable handle.
    CU_MEM_HANDLE_TYPE_NONE: c_int = 0;
    /// The location is a device ordinal.
    CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
    /// The recommended (performance) granularity.
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: CUmemAllocationGranularity_flags = 1;
    /// Read and write access.
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;
}

library! {
    /// The CUDA driver library and its functions.
    struct Driver("CUDA driver library") {
        fn cuInit(Flags: c_uint) -> CUresult;
        fn cuDriverGetVersion(driverVersion: *mut c_int) -> CUresult;
        fn cuGetErrorName(error: CUresult, pStr: *mut *const c_char) -> CUresult;
        fn cuGetErrorString(error: CUresult, pStr: *mut *const c_char) -> CUresult;
        fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult;
        fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult;
        fn cuDeviceGetAttribute(pi: *mut c_int, attrib: CUdevice_attribute, dev: CUdevice) -> CUresult;
        fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult;
        fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult;
        fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult;
        fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult;
        fn cuMemGetAllocationGranularity(
            granularity: *mut usize,
            prop: *const CUmemAllocationProp,
            option: CUmemAllocationGranularity_flags,
        ) -> CUresult;
        fn cuMemAddressReserve(
            ptr: *mut CUdeviceptr,
            size: usize,
            alignment: usize,
            addr: CUdeviceptr,
            flags: c_ulonglong,
        ) -> CUresult;
        fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult;
        fn cuMemCreate(
            handle: *mut CUmemGenericAllocationHandle,
            size: usize,
            prop: *const CUmemAllocationProp,
            flags: c_ulonglong,
        ) -> CUresult;
        fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult;
        fn cuMemMap(
            ptr: CUdeviceptr,
            size: usize,
            offset: usize,
            handle: CUmemGenericAllocationHandle,
            flags: c_ulonglong,
        ) -> CUresult;
        fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) -> CUresult;
        fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult;
    }
}

/// Functions the driver must export for the vendor to report VIRTUAL_MEMORY.
pub(crate) const VMM_REQUIRED: &[&str] = &[
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemSetAccess",
    "cuMemUnmap",
];

impl CuMemAllocationProp {
    /// Pinned memory on `device`, everything else zero.
    pub(crate) fn pinned_on(device: c_int) -> Self {
        CuMemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: CU_MEM_HANDLE_TYPE_NONE,
            location: CuMemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: device,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: CuMemAllocFlags::default(),
        }
    }
}
