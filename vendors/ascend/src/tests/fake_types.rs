//! The fake's exported functions have the bindings' types, so that the
//! chain fake == binding == header is closed: every function the vendor
//! binds is declared by the fake in the binding's very words and with the
//! same Rust function-pointer type (the bindings are proven against the
//! headers by `headers.rs`), and every function the fake exports, bound or
//! not, is compiled against both header versions itself, with the sizes and
//! field offsets of the structs its prototypes point to.

use std::any::TypeId;
use std::collections::{BTreeSet, HashMap};

use dipu_fake_ascend::{Signature as Faked, FIELDS, SIGNATURES, STRUCTS};

use super::fake_symbols::{exported, fake};
use super::headers::{
    acl_prelude, all_types, compile, pointer_check, static_assert, HCCL_PRELUDE, VERSIONS,
};
use crate::acl::Acl;
use crate::hccl::Hccl;

fn faked(name: &str) -> &'static Faked {
    SIGNATURES
        .iter()
        .flat_map(|t| t.iter())
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("the fake declares no {name}"))
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect()
}

#[test]
fn the_fake_declares_every_bound_function_in_the_bindings_words() {
    // Word for word, so an `i32` where the binding (and the header) has an
    // enum such as `aclrtMemcpyKind` is caught even though Rust sees one type.
    for s in Acl::SIGNATURES.iter().chain(Hccl::SIGNATURES) {
        let f = faked(s.name);
        let bound: Vec<String> = s.args.iter().map(|(_, ty)| squash(ty)).collect();
        let fake: Vec<String> = f.args.iter().map(|ty| squash(ty)).collect();
        assert_eq!(bound, fake, "{}: arguments", s.name);
        assert_eq!(squash(s.ret), squash(f.ret), "{}: return type", s.name);
    }
}

/// The Rust function-pointer type of a binding accessor's result.
fn bound_type<L, T: 'static>(_: fn(&L) -> dipu_deviceapi::Result<T>) -> TypeId {
    TypeId::of::<T>()
}

/// `(name, type)` of the named functions of a binding table.
macro_rules! bound_types {
    ($lib:ident: $($name:ident)*) => {
        [$((stringify!($name), bound_type($lib::$name))),*]
    };
}

/// The functions whose prototypes point to a struct: the fake has its own
/// struct there (same layout, checked against the headers below), so the Rust
/// types differ by that pointee only.
const WITH_STRUCTS: &[&str] = &[
    "aclrtMemGetAllocationGranularity",
    "aclrtMallocPhysical",
    "HcclGetRootInfo",
    "HcclCommInitRootInfo",
    "HcclBatchSendRecv",
];

#[test]
fn the_fakes_functions_have_the_bindings_rust_types() {
    let acl_types = bound_types!(Acl:
        aclInit aclGetRecentErrMsg aclrtGetVersion aclrtGetDeviceCount aclrtSetDevice
        aclrtSynchronizeDevice aclrtGetSocName aclGetDeviceCapability aclrtGetDeviceInfo
        aclrtGetMemInfo aclrtMalloc aclrtMallocAlign32 aclrtFree aclrtFreeWithDevSync
        aclrtMallocHost aclrtFreeHost aclrtMemset aclrtMemsetAsync aclrtMemcpy aclrtMemcpyAsync
        aclrtDeviceCanAccessPeer aclrtDeviceEnablePeerAccess aclrtDeviceGetStreamPriorityRange
        aclrtCreateStreamWithConfig aclrtDestroyStream aclrtSynchronizeStream aclrtStreamQuery
        aclrtStreamWaitEvent aclrtLaunchHostFunc aclrtSubscribeReport aclrtUnSubscribeReport
        aclrtLaunchCallback aclrtProcessReport aclrtCreateEventWithFlag aclrtDestroyEvent
        aclrtRecordEvent aclrtQueryEventStatus aclrtSynchronizeEvent aclrtEventElapsedTime
        aclrtMemGetAllocationGranularity aclrtReserveMemAddress aclrtReleaseMemAddress
        aclrtMallocPhysical aclrtFreePhysical aclrtMapMem aclrtUnmapMem
    );
    let hccl_types = bound_types!(Hccl:
        HcclGetRootInfo HcclCommInitRootInfo HcclCommDestroy HcclGetErrorString
        HcclGetCommAsyncError HcclAllReduce HcclBroadcast HcclAllGather HcclReduceScatter
        HcclReduce HcclSend HcclRecv HcclBatchSendRecv HcclGroupStart HcclGroupEnd
    );
    let table: Vec<(&str, TypeId)> = acl_types.into_iter().chain(hccl_types).collect();
    // The table is every bound function, so none escapes the check.
    let listed: BTreeSet<&str> = table.iter().map(|(n, _)| *n).collect();
    let bound: BTreeSet<&str> = Acl::SIGNATURES
        .iter()
        .chain(Hccl::SIGNATURES)
        .map(|s| s.name)
        .collect();
    assert_eq!(
        listed, bound,
        "the type table must list every bound function"
    );
    assert_eq!(listed.len(), table.len(), "a function listed twice");
    // The exception is exactly the functions whose words name a struct.
    let structs: Vec<&str> = STRUCTS.iter().map(|(c, _, _)| *c).collect();
    for s in Acl::SIGNATURES.iter().chain(Hccl::SIGNATURES) {
        let names_struct = s
            .args
            .iter()
            .any(|(_, ty)| structs.iter().any(|c| ty.contains(c)));
        assert_eq!(
            names_struct,
            WITH_STRUCTS.contains(&s.name),
            "{}: WITH_STRUCTS is wrong",
            s.name
        );
    }
    for (name, ty) in table {
        let same = (faked(name).fn_type)() == ty;
        assert_eq!(
            same,
            !WITH_STRUCTS.contains(&name),
            "{name}: the fake's Rust type {} the binding's",
            if same { "equals" } else { "differs from" }
        );
    }
}

/// The fake's pointer and struct checks for one header unit: `hccl` picks
/// the HCCL functions, else the ACL ones; `exports` says which functions
/// the build being checked exports.
fn fake_source(hccl_unit: bool, newest: bool, exports: &dyn Fn(&str) -> bool) -> String {
    let names: HashMap<&str, &str> = all_types().iter().map(|t| (t.rust, t.c)).collect();
    let mut out = if hccl_unit {
        HCCL_PRELUDE.to_owned()
    } else {
        acl_prelude(newest).to_owned()
    };
    for f in SIGNATURES.iter().flat_map(|t| t.iter()) {
        if f.name.starts_with("Hccl") == hccl_unit && exports(f.name) {
            pointer_check(f.name, f.ret, f.args, &names, &mut out);
        }
    }
    for (c, size, align) in STRUCTS {
        if c.starts_with("Hccl") == hccl_unit {
            static_assert(&mut out, &format!("sizeof({c}) == {size}"));
            static_assert(&mut out, &format!("alignof({c}) == {align}"));
        }
    }
    for (c, field, offset) in FIELDS {
        if c.starts_with("Hccl") == hccl_unit {
            static_assert(&mut out, &format!("offsetof({c}, {field}) == {offset}"));
        }
    }
    out
}

#[test]
fn the_fakes_prototypes_match_both_header_versions() {
    // The old-CANN build is checked against the old headers with what it
    // really exports; the new build against the new headers with everything.
    // SAFETY: the fake's initialisers only set up Rust statics.
    let old = unsafe { libloading::Library::new(fake("libdipu_fake_ascend_old.so")) }.unwrap();
    for (version, newest) in VERSIONS {
        let exports = |name: &str| newest || exported(&old, name);
        for (hccl_unit, unit) in [(false, "ACL"), (true, "HCCL")] {
            let source = fake_source(hccl_unit, newest, &exports);
            if let Err(errors) = compile(version, &source, !hccl_unit) {
                panic!(
                    "the fake's {unit} functions differ from the torch-npu {version} headers:\n\
                     {errors}\n--- generated C++ ---\n{source}"
                );
            }
            let checked = source.matches("dipu_check_").count();
            assert!(checked > 10, "only {checked} {unit} functions checked");
        }
    }
    // The old build does leave out the optional functions, so the filter
    // above is not "everything".
    assert!(!exported(&old, "aclrtLaunchHostFunc"));
}

/// The functions `library` defines in its dynamic symbol table (`nm -D`,
/// from binutils, which the C++ compiler of the header checks brings).
fn defined_functions(library: &str) -> BTreeSet<String> {
    let path = fake(library);
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm (binutils): {e}"));
    assert!(out.status.success(), "nm {}: {:?}", path.display(), out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] => Some(name.to_owned()),
            _ => None,
        })
        .collect()
}

#[test]
fn every_function_the_fakes_export_is_declared_in_the_table() {
    // So none escapes the checks above: the table is all the fake exports.
    let declared: BTreeSet<String> = SIGNATURES
        .iter()
        .flat_map(|t| t.iter())
        .map(|f| f.name.to_owned())
        .collect();
    let new = defined_functions("libdipu_fake_ascend.so");
    assert_eq!(new, declared, "the new fake's exports and its table differ");
    let old = defined_functions("libdipu_fake_ascend_old.so");
    assert!(
        old.is_subset(&declared) && old.len() < declared.len(),
        "the old-CANN fake exports {:?} outside the table",
        old.difference(&declared).collect::<Vec<_>>()
    );
}
