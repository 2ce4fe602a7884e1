//! The C types of the headers, under their C names (the names the vendor's
//! bindings use, so one translation to C serves both).

#![expect(
    non_camel_case_types,
    reason = "C names from the CUDA headers, so the header test can check them"
)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// `cudaError_t`.
pub type cudaError_t = c_int;
/// `cudaStream_t`.
pub type cudaStream_t = *mut c_void;
/// `cudaEvent_t`.
pub type cudaEvent_t = *mut c_void;
/// `enum cudaMemcpyKind`.
pub type cudaMemcpyKind = c_int;
/// `enum cudaDeviceAttr`.
pub type cudaDeviceAttr = c_int;
/// `struct cudaDeviceProp` (only `name`, its first 256 bytes, is written).
pub type cudaDeviceProp = c_void;
/// `cudaHostFn_t`.
pub type cudaHostFn_t = Option<unsafe extern "C" fn(*mut c_void)>;
/// `struct cudaPointerAttributes`.
pub type cudaPointerAttributes = PointerAttributes;
/// `CUresult`.
pub type CUresult = c_int;
/// `CUdevice`.
pub type CUdevice = c_int;
/// `CUcontext`.
pub type CUcontext = *mut c_void;
/// `CUdeviceptr`.
pub type CUdeviceptr = c_ulonglong;
/// `CUdevice_attribute`.
pub type CUdevice_attribute = c_int;
/// `CUmemGenericAllocationHandle`.
pub type CUmemGenericAllocationHandle = c_ulonglong;
/// `CUmemAllocationGranularity_flags`.
pub type CUmemAllocationGranularity_flags = c_int;
/// `CUmemAllocationProp`.
pub type CUmemAllocationProp = AllocationProp;
/// `CUmemAccessDesc`.
pub type CUmemAccessDesc = AccessDesc;
/// `ncclResult_t`.
pub type ncclResult_t = c_int;
/// `ncclComm_t`.
pub type ncclComm_t = *mut c_void;
/// `ncclDataType_t`.
pub type ncclDataType_t = c_int;
/// `ncclRedOp_t`.
pub type ncclRedOp_t = c_int;
/// `ncclUniqueId`: 128 opaque bytes, passed by value.
pub type ncclUniqueId = UniqueId;
/// `ncclConfig_t` (only its leading fields are read).
pub type ncclConfig_t = Config;

/// `struct cudaPointerAttributes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PointerAttributes {
    /// `enum cudaMemoryType type`.
    pub type_: c_int,
    /// `int device`.
    pub device: c_int,
    /// `void *devicePointer`.
    pub device_pointer: *mut c_void,
    /// `void *hostPointer`.
    pub host_pointer: *mut c_void,
    /// The union and `long reserved[7]` (left as they are).
    pub reserved: [std::ffi::c_long; 8],
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Location {
    /// `type`.
    pub type_: c_int,
    /// `id`.
    pub id: c_int,
}

/// `CUmemAllocationProp` (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AllocationProp {
    /// `type`.
    pub type_: c_int,
    /// `requestedHandleTypes`.
    pub requested_handle_types: c_int,
    /// `location`.
    pub location: Location,
    /// `win32HandleMetaData`.
    pub win32: *mut c_void,
    /// `allocFlags`.
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AccessDesc {
    /// `location`.
    pub location: Location,
    /// `flags`.
    pub flags: c_int,
}

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    /// `internal`.
    pub internal: [c_char; 128],
}

/// The leading fields of `ncclConfig_t`, the ones the fake reads.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `size`.
    pub size: usize,
    /// `magic`.
    pub magic: c_uint,
    /// `version`.
    pub version: c_uint,
    /// `blocking`.
    pub blocking: c_int,
}
