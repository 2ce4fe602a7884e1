//! The C types of the exported prototypes, spelt as the vendor's bindings
//! spell them (and so as `acl_rt.h`, `acl_base.h` and `hccl_types.h` do):
//! the vendor's tests compare every exported function's types with its
//! binding's, word for word, and compile the fake's prototypes against the
//! real CANN headers. A C enum is a `c_int` here, as in the bindings.

#![expect(
    non_camel_case_types,
    reason = "C names from the CANN headers, so the header test can check them"
)]

use std::any::TypeId;
use std::ffi::{c_int, c_void};
use std::mem::{align_of, offset_of, size_of};

/// `aclError`.
pub(crate) type aclError = c_int;
/// `aclrtStream`.
pub(crate) type aclrtStream = *mut c_void;
/// `aclrtEvent`.
pub(crate) type aclrtEvent = *mut c_void;
/// `aclrtMemcpyKind` (an enum).
pub(crate) type aclrtMemcpyKind = c_int;
/// `aclrtMemMallocPolicy` (an enum).
pub(crate) type aclrtMemMallocPolicy = c_int;
/// `aclrtMemAttr` (an enum).
pub(crate) type aclrtMemAttr = c_int;
/// `aclrtStreamStatus` (an enum).
pub(crate) type aclrtStreamStatus = c_int;
/// `aclrtEventRecordedStatus` (an enum).
pub(crate) type aclrtEventRecordedStatus = c_int;
/// `aclrtCallbackBlockType` (an enum).
pub(crate) type aclrtCallbackBlockType = c_int;
/// `aclrtDevAttr` (an enum).
pub(crate) type aclrtDevAttr = c_int;
/// `aclDeviceInfo` (an enum).
pub(crate) type aclDeviceInfo = c_int;
/// `aclrtMemGranularityOptions` (an enum).
pub(crate) type aclrtMemGranularityOptions = c_int;
/// `aclrtDrvMemHandle`.
pub(crate) type aclrtDrvMemHandle = *mut c_void;
/// `aclrtCallback` and `aclrtHostFunc`.
pub(crate) type aclrtCallback = Option<unsafe extern "C" fn(*mut c_void)>;
/// `aclrtPhysicalMemProp`.
pub(crate) type aclrtPhysicalMemProp = crate::vmm::PhysicalMemProp;

/// `HcclResult` (an enum).
pub(crate) type HcclResult = c_int;
/// `HcclComm`.
pub(crate) type HcclComm = *mut c_void;
/// `HcclDataType` (an enum).
pub(crate) type HcclDataType = c_int;
/// `HcclReduceOp` (an enum).
pub(crate) type HcclReduceOp = c_int;
/// `HcclRootInfo`: 4108 opaque bytes.
pub(crate) type HcclRootInfo = [u8; crate::hccl::ROOT_INFO_BYTES];
/// `HcclSendRecvItem`.
pub(crate) type HcclSendRecvItem = crate::p2p::Item;

/// One exported function as declared (types as written), for the vendor's
/// tests.
#[derive(Debug, Clone, Copy)]
pub struct Signature {
    /// The C symbol.
    pub name: &'static str,
    /// The return type, as written.
    pub ret: &'static str,
    /// The argument types, as written.
    pub args: &'static [&'static str],
    /// The Rust type of the function, as an `unsafe extern "C" fn` pointer.
    pub fn_type: fn() -> TypeId,
}

/// The structs the prototypes point to: C name, size and alignment, for
/// the vendor's header check.
pub const STRUCTS: [(&str, usize, usize); 3] = [
    (
        "aclrtPhysicalMemProp",
        size_of::<aclrtPhysicalMemProp>(),
        align_of::<aclrtPhysicalMemProp>(),
    ),
    (
        "HcclRootInfo",
        size_of::<HcclRootInfo>(),
        align_of::<HcclRootInfo>(),
    ),
    (
        "HcclSendRecvItem",
        size_of::<HcclSendRecvItem>(),
        align_of::<HcclSendRecvItem>(),
    ),
];

/// The fields of [`STRUCTS`] the fake reads or writes: C struct, C field
/// (as `offsetof` takes it) and offset, for the vendor's header check.
pub const FIELDS: [(&str, &str, usize); 11] = [
    (
        "aclrtPhysicalMemProp",
        "handleType",
        offset_of!(aclrtPhysicalMemProp, handle_type),
    ),
    (
        "aclrtPhysicalMemProp",
        "allocationType",
        offset_of!(aclrtPhysicalMemProp, allocation_type),
    ),
    (
        "aclrtPhysicalMemProp",
        "memAttr",
        offset_of!(aclrtPhysicalMemProp, mem_attr),
    ),
    (
        "aclrtPhysicalMemProp",
        "location.id",
        offset_of!(aclrtPhysicalMemProp, location_id),
    ),
    (
        "aclrtPhysicalMemProp",
        "location.type",
        offset_of!(aclrtPhysicalMemProp, location_type),
    ),
    (
        "aclrtPhysicalMemProp",
        "reserve",
        offset_of!(aclrtPhysicalMemProp, reserve),
    ),
    (
        "HcclSendRecvItem",
        "sendRecvType",
        offset_of!(HcclSendRecvItem, send_recv_type),
    ),
    ("HcclSendRecvItem", "buf", offset_of!(HcclSendRecvItem, buf)),
    (
        "HcclSendRecvItem",
        "count",
        offset_of!(HcclSendRecvItem, count),
    ),
    (
        "HcclSendRecvItem",
        "dataType",
        offset_of!(HcclSendRecvItem, data_type),
    ),
    (
        "HcclSendRecvItem",
        "remoteRank",
        offset_of!(HcclSendRecvItem, remote_rank),
    ),
];
