//! Pins. Sources: `cnrt.h` 6.0.2 and 6.14.1 and `cncl.h` 1.25.0 (public
//! copies, as used by DeepLink's camb vendor and torch_mlu), `cn_api.h` of
//! CNDrv 2.15, and the CNRT developer guide (priorities, notifier flags).

use std::collections::HashMap;
use std::mem::{offset_of, size_of};

use dipu_deviceapi::{CopyKind, DataType, ReduceOp};

use crate::cncl::{CnclCliqueId, CNCL_CLIQUE_ID_BYTES_SIZE};
use crate::cndrv::{CnMemAccessDesc, CnMemAllocationProp, CnMemLocation};
use crate::collectives::{cncl_op, cncl_type, CLIQUE_ID_BYTES};
use crate::memory::trans_dir;
use crate::streams::{to_cnrt_priority, to_trait_range};
use crate::{cncl, cndrv, cnrt};

/// (name, value, where it was taken from).
const EXPECTED: &[(&str, i64, &str)] = &[
    ("cnrtSuccess", 0, "cnrt.h 6.0.2"),
    ("cnrtErrorNotReady", 1, "cnrt.h 6.0.2"),
    ("cnrtErrorArgsInvalid", 100006, "cnrt.h 6.0.2"),
    ("cnrtErrorNoMem", 100100, "cnrt.h 6.0.2"),
    ("cnrtErrorBusy", 632014, "cnrt.h 6.0.2"),
    ("cnrtErrorUnknown", 999991, "cnrt.h 6.0.2"),
    ("cnrtMemcpyHostToDev", 0, "cnrt.h 6.0.2"),
    ("cnrtMemcpyDevToDev", 1, "cnrt.h 6.0.2"),
    ("cnrtMemcpyDevToHost", 2, "cnrt.h 6.0.2"),
    ("cnrtMemcpyHostToHost", 3, "cnrt.h 6.0.2"),
    ("CNRT_NOTIFIER_DEFAULT", 0, "cnrt.h 6.14.1"),
    ("CNRT_NOTIFIER_DISABLE_TIMING_ALL", 0x4, "cnrt.h 6.14.1"),
    ("cnrtAttrComputeCapabilityMajor", 0x01, "cnrt.h 6.0.2"),
    ("cnrtAttrComputeCapabilityMinor", 0x02, "cnrt.h 6.0.2"),
    ("cnrtAttrClusterCount", 0x205, "cnrt.h 6.0.2"),
    ("cnrtAttrMcorePerCluster", 0x206, "cnrt.h 6.0.2"),
    ("cnrtAttrTotalMemSize", 0x405, "cnrt.h 6.0.2"),
    ("CNCL_RET_SUCCESS", 0, "cncl.h 1.25.0"),
    ("CNCL_RET_ERR_INTERNAL", 0x01, "cncl.h 1.25.0"),
    ("CNCL_RET_ASYNC_IN_PROGRESS", 0x06, "cncl.h 1.25.0"),
    ("CNCL_RET_ERR_ARGUMENTS", 0x07, "cncl.h 1.25.0"),
    ("CNCL_RET_ASYNC_ERROR", 0x16, "cncl.h 1.25.0"),
    ("cnclHalf", 0x10, "cncl.h 1.25.0"),
    ("cnclBfloat16", 0x11, "cncl.h 1.25.0"),
    ("cnclFloat", 0x12, "cncl.h 1.25.0"),
    ("cnclInt8", 0x20, "cncl.h 1.25.0"),
    ("cnclInt16", 0x21, "cncl.h 1.25.0"),
    ("cnclInt32", 0x22, "cncl.h 1.25.0"),
    ("cnclInt64", 0x23, "cncl.h 1.25.0"),
    ("cnclUint8", 0x30, "cncl.h 1.25.0"),
    ("cnclUint32", 0x32, "cncl.h 1.25.0"),
    ("cnclUint64", 0x33, "cncl.h 1.25.0"),
    ("cnclSum", 0, "cncl.h 1.25.0"),
    ("cnclProd", 1, "cncl.h 1.25.0"),
    ("cnclMax", 2, "cncl.h 1.25.0"),
    ("cnclMin", 3, "cncl.h 1.25.0"),
    ("CN_SUCCESS", 0, "cn_api.h 2.15"),
    (
        "CN_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED",
        0x30B,
        "cn_api.h 2.15",
    ),
    ("CN_MEM_ALLOCATION_TYPE_DEFAULT", 1, "cn_api.h 2.15"),
    ("CN_MEM_HANDLE_TYPE_NONE", 0, "cn_api.h 2.15"),
    ("CN_MEM_LOCATION_TYPE_DEVICE", 1, "cn_api.h 2.15"),
    ("CN_MEM_ALLOC_GRANULARITY_RECOMMENDED", 1, "cn_api.h 2.15"),
    ("CN_MEM_ACCESS_FLAGS_PROT_READWRITE", 0, "cn_api.h 2.15"),
];

#[test]
fn every_bound_constant_is_pinned_with_its_version() {
    let bound: HashMap<&str, i64> = cnrt::CONSTANTS
        .iter()
        .chain(cncl::CONSTANTS)
        .chain(cndrv::CONSTANTS)
        .map(|c| (c.name, c.value))
        .collect();
    for (name, value, source) in EXPECTED {
        assert_eq!(bound.get(name), Some(value), "{name} (from {source})");
    }
    assert_eq!(
        bound.len(),
        EXPECTED.len(),
        "a bound constant is not pinned"
    );
}

#[test]
fn struct_layouts_match_the_headers() {
    // cncl.h 1.25.0: struct cnclCliqueId { char data[128]; uint64_t hash; }.
    assert_eq!(CNCL_CLIQUE_ID_BYTES_SIZE, 128);
    assert_eq!(size_of::<CnclCliqueId>(), 136);
    assert_eq!(CLIQUE_ID_BYTES, 136);
    assert_eq!(offset_of!(CnclCliqueId, hash), 128);
    // cn_api.h 2.15: CNmemLocation { int type; uint32 id; }.
    assert_eq!(size_of::<CnMemLocation>(), 8);
    // CNmemAllocationProp { type; requestedHandleTypes; location; { u8, u8 } allocFlags; }.
    assert_eq!(offset_of!(CnMemAllocationProp, location), 8);
    assert_eq!(offset_of!(CnMemAllocationProp, alloc_flags), 16);
    assert_eq!(size_of::<CnMemAllocationProp>(), 20);
    // CNmemAccessDesc { location; accessFlags; cacheType; pinnedType; }.
    assert_eq!(offset_of!(CnMemAccessDesc, access_flags), 8);
    assert_eq!(size_of::<CnMemAccessDesc>(), 20);
    // 64-bit addresses, handles and devices.
    assert_eq!(size_of::<cndrv::CNaddr>(), 8);
    assert_eq!(size_of::<cndrv::CNdev>(), 8);
    assert_eq!(size_of::<cndrv::CNmemGenericAllocationHandle>(), 8);
}

#[test]
fn copy_directions_are_translated_not_cast() {
    assert_eq!(trans_dir(CopyKind::HostToDevice), 0);
    assert_eq!(trans_dir(CopyKind::DeviceToHost), 2);
    assert_eq!(trans_dir(CopyKind::DeviceToDevice), 1);
    assert_eq!(trans_dir(CopyKind::HostToHost), 3);
}

#[test]
fn priorities_map_cudas_scale_onto_7_to_0() {
    let r = to_trait_range(7, 0);
    assert_eq!((r.least, r.greatest), (0, -7));
    assert_eq!(to_cnrt_priority(0, 7), 7, "normal is CNRT's least");
    assert_eq!(to_cnrt_priority(-7, 7), 0, "most urgent is CNRT's greatest");
    assert_eq!(to_cnrt_priority(r.clamp(-100), 7), 0);
}

#[test]
fn types_and_operators_cncl_has_and_lacks() {
    assert_eq!(cncl_type(DataType::F64), None);
    assert_eq!(cncl_type(DataType::BF16), Some(0x11));
    assert_eq!(cncl_type(DataType::I16), Some(0x21));
    assert_eq!(cncl_op(ReduceOp::Avg), None);
    assert_eq!(cncl_op(ReduceOp::Min), Some(3));
    assert_eq!(cncl_op(ReduceOp::Max), Some(2));
}
