//! Bindings to CNDrv's virtual memory API (`libcndrv.so`, `cn_api.h` as of
//! CNDrv 2.15): the functions, types, structs and constants, named as in
//! `cn_api.h` and declared from the published API (the CNRT developer
//! guide's virtual memory section and a public copy of `cn_api.h`).
//! Addresses (`CNaddr`), allocation handles and devices (`CNdev`) are all
//! 64-bit, unlike CUDA's 32-bit `CUdevice`.

#![expect(
    non_camel_case_types,
    reason = "C names from cn_api.h, so the tests can check them"
)]

use std::ffi::{c_char, c_int, c_uint};

use crate::bind::{c_consts, c_types, library};

/// `CNmemLocation`: `{ CNmemLocationType type; cn_uint32_t id; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CnMemLocation {
    /// `type`: `CN_MEM_LOCATION_TYPE_DEVICE`.
    pub(crate) type_: c_int,
    /// `id`: the device ordinal.
    pub(crate) id: c_uint,
}

/// `allocFlags` of `CNmemAllocationProp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CnMemAllocFlags {
    /// `compressionType`: none.
    pub(crate) compression_type: u8,
    /// `securityType`: none.
    pub(crate) security_type: u8,
}

/// `CNmemAllocationProp` (20 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CnMemAllocationProp {
    /// `type`: `CN_MEM_ALLOCATION_TYPE_DEFAULT`.
    pub(crate) type_: c_int,
    /// `requestedHandleTypes`: `CN_MEM_HANDLE_TYPE_NONE`.
    pub(crate) requested_handle_types: c_int,
    /// `location`: the device.
    pub(crate) location: CnMemLocation,
    /// `allocFlags`: zero.
    pub(crate) alloc_flags: CnMemAllocFlags,
}

/// `CNmemAccessDesc` (20 bytes): the location, then access, caching and
/// pinning flags.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CnMemAccessDesc {
    /// `location`: the device that gets access.
    pub(crate) location: CnMemLocation,
    /// `accessFlags`: `CN_MEM_ACCESS_FLAGS_PROT_READWRITE` (0).
    pub(crate) access_flags: c_int,
    /// `cacheType`: the default (0).
    pub(crate) cache_type: c_int,
    /// `pinnedType`: the default (0).
    pub(crate) pinned_type: c_int,
}

c_types! {
    /// `CNresult`.
    CNresult = c_int;
    /// `CNdev`: a 64-bit device handle.
    CNdev = u64;
    /// `CNaddr`: a 64-bit device address.
    CNaddr = u64;
    /// `CNdevice_attribute`.
    CNdevice_attribute = c_int;
    /// `CNmemGenericAllocationHandle`: 64-bit.
    CNmemGenericAllocationHandle = u64;
    /// `CNmemAllocationGranularity`.
    CNmemAllocationGranularity = c_int;
    /// `CNmemAllocationProp`.
    CNmemAllocationProp = CnMemAllocationProp;
    /// `CNmemAccessDesc`.
    CNmemAccessDesc = CnMemAccessDesc;
}

c_consts! {
    /// No error.
    CN_SUCCESS: CNresult = 0;
    /// Whether the device supports the virtual address management API.
    CN_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED: CNdevice_attribute = 0x30B;
    /// The default (and only) allocation type.
    CN_MEM_ALLOCATION_TYPE_DEFAULT: c_int = 1;
    /// No shareable handle.
    CN_MEM_HANDLE_TYPE_NONE: c_int = 0;
    /// The location is a device ordinal.
    CN_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
    /// The recommended granularity.
    CN_MEM_ALLOC_GRANULARITY_RECOMMENDED: CNmemAllocationGranularity = 1;
    /// Read and write access: 0 here, where CUDA's is 3.
    CN_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 0;
}

library! {
    /// CNDrv and the functions of its virtual memory API.
    struct Cndrv("CNDrv library") {
        fn cnGetErrorName(error: CNresult, pStr: *mut *const c_char) -> CNresult;
        fn cnGetErrorString(error: CNresult, pStr: *mut *const c_char) -> CNresult;
        fn cnDeviceGet(device: *mut CNdev, ordinal: c_int) -> CNresult;
        fn cnDeviceGetAttribute(pi: *mut c_int, attrib: CNdevice_attribute, dev: CNdev) -> CNresult;
        fn cnMemGetAllocationGranularity(
            granularity: *mut usize,
            prop: *const CNmemAllocationProp,
            option: CNmemAllocationGranularity,
        ) -> CNresult;
        fn cnMemAddressReserve(ptr: *mut CNaddr, size: usize, alignment: usize, start: CNaddr, flags: u64) -> CNresult;
        fn cnMemAddressFree(ptr: CNaddr, size: usize) -> CNresult;
        fn cnMemCreate(
            handle: *mut CNmemGenericAllocationHandle,
            size: usize,
            prop: *const CNmemAllocationProp,
            flags: u64,
        ) -> CNresult;
        fn cnMemRelease(handle: CNmemGenericAllocationHandle) -> CNresult;
        fn cnMemMap(ptr: CNaddr, size: usize, offset: usize, handle: CNmemGenericAllocationHandle, flags: u64) -> CNresult;
        fn cnMemSetAccess(ptr: CNaddr, size: usize, desc: *const CNmemAccessDesc, count: usize) -> CNresult;
        fn cnMemUnmap(ptr: CNaddr, size: usize) -> CNresult;
    }
}

/// Functions CNDrv must export for the vendor to report VIRTUAL_MEMORY.
pub(crate) const VMM_REQUIRED: &[&str] = &[
    "cnDeviceGet",
    "cnDeviceGetAttribute",
    "cnMemGetAllocationGranularity",
    "cnMemAddressReserve",
    "cnMemAddressFree",
    "cnMemCreate",
    "cnMemRelease",
    "cnMemMap",
    "cnMemSetAccess",
    "cnMemUnmap",
];

impl CnMemAllocationProp {
    /// Default-type memory on `device`, everything else zero.
    pub(crate) fn on_device(device: c_int) -> Self {
        CnMemAllocationProp {
            type_: CN_MEM_ALLOCATION_TYPE_DEFAULT,
            requested_handle_types: CN_MEM_HANDLE_TYPE_NONE,
            location: CnMemLocation {
                type_: CN_MEM_LOCATION_TYPE_DEVICE,
                id: device as c_uint,
            },
            alloc_flags: CnMemAllocFlags::default(),
        }
    }
}
