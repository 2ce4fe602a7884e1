//! The bindings against the real CANN headers of both torch-npu wheels
//! (`scripts/cann-headers.sh` downloads them into `.cann-headers/`): every
//! function's Rust signature becomes a C++ function pointer initialised
//! with the real function (refused if the header makes its name a macro), every constant a `static_assert`, every type a
//! size check and every struct field an offset check, compiled with
//! `c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only` (HCCL's header is
//! C++ only, and C++ makes any mismatch of a pointer, `const` or enum type
//! an error). The ACL unit includes only the precise headers and adds
//! `-pedantic`; the HCCL unit includes `hccl.h`, which pulls in `acl.h`
//! (not `-pedantic` clean in 2.14.0). Functions and types the older
//! headers lack are checked against the newer ones only.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::acl::{AclMemLocation, AclPhysicalMemProp};
use crate::hccl::{HcclRootInfoBytes, HcclSendRecvItemDef};
use crate::{acl, hccl};
use dipu_vendorkit::bind::{c_args, c_type, CType, Constant, Signature};

/// The two header versions: torch-npu's version, and whether it is the
/// newer one (which has every optional function).
pub(super) const VERSIONS: [(&str, bool); 2] = [("2.14.0", true), ("2.1.0.post17", false)];

/// Types the older headers lack.
const OPTIONAL_TYPES: &[&str] = &["aclrtDevAttr", "aclrtMemGranularityOptions"];

/// `<repo>/.cann-headers/<version>/torch_npu/include`, or a panic saying
/// how to get it.
fn include_root(version: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.cann-headers")
        .join(version)
        .join("torch_npu/include");
    assert!(
        root.join("third_party/hccl/inc/hccl/hccl.h").is_file(),
        "the CANN headers of torch-npu {version} are missing in {}: run scripts/cann-headers.sh \
         (scripts/test.sh does)",
        root.display()
    );
    root
}

/// Compiles `source` against `version`'s headers; the compiler's output on
/// failure.
pub(super) fn compile(version: &str, source: &str, pedantic: bool) -> Result<(), String> {
    let root = include_root(version);
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("bindings_check.cpp");
    std::fs::write(&file, source).expect("write the C++ file");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let mut cmd = Command::new(&compiler);
    cmd.args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"]);
    if pedantic {
        cmd.arg("-pedantic");
    }
    // 2.14.0 has `acl/` at the root; 2.1.0 only under third_party.
    for dir in [root.clone(), root.join("third_party/acl/inc")] {
        cmd.arg("-I").arg(dir);
    }
    let out = cmd
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{compiler}`: {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The ACL unit's headers: the precise ones (2.1.0 declares `aclInit` only
/// in `acl.h`, which is `-pedantic` clean there).
pub(super) fn acl_prelude(newest: bool) -> &'static str {
    if newest {
        "#include <cstddef>\n#include <acl/acl_rt.h>\n"
    } else {
        "#include <cstddef>\n#include <acl/acl.h>\n"
    }
}

pub(super) const HCCL_PRELUDE: &str =
    "#include <cstddef>\n#include \"third_party/hccl/inc/hccl/hccl.h\"\n";

pub(super) fn all_types() -> Vec<CType> {
    [acl::c_types(), hccl::c_types()]
        .into_iter()
        .flatten()
        .collect()
}

fn pointer_checks(
    signatures: &[Signature],
    optional: &[&str],
    newest: bool,
    names: &HashMap<&str, &str>,
    out: &mut String,
) {
    for s in signatures
        .iter()
        .filter(|s| newest || !optional.contains(&s.name))
    {
        let args: Vec<&str> = s.args.iter().map(|(_, ty)| *ty).collect();
        pointer_check(s.name, s.ret, &args, names, out);
    }
}

/// `ret (*const dipu_check_name)(args) = name;`, after an `#error` if the
/// header makes `name` a macro (a header that renames a function to a
/// versioned symbol would otherwise have the check pass on the renamed
/// one while `dlsym` finds the old one).
pub(super) fn pointer_check(
    name: &str,
    ret: &str,
    args: &[&str],
    names: &HashMap<&str, &str>,
    out: &mut String,
) {
    let args = c_args(args, names);
    let ret = c_type(ret, names);
    writeln!(
        out,
        "#ifdef {name}\n#error \"{name} is a macro in the header: bind the symbol it names\"\n#endif\n\
         {ret} (*const dipu_check_{name})({args}) = {name};"
    )
    .unwrap();
}

fn constant_checks(constants: &[Constant], optional: &[&str], newest: bool, out: &mut String) {
    for c in constants
        .iter()
        .filter(|c| newest || !optional.contains(&c.name))
    {
        static_assert(out, &format!("(long long)({}) == {}LL", c.name, c.value));
    }
}

fn type_checks(types: &[CType], newest: bool, out: &mut String) {
    for t in types
        .iter()
        .filter(|t| newest || !OPTIONAL_TYPES.contains(&t.rust))
    {
        if let Some(size) = t.size {
            static_assert(out, &format!("sizeof({}) == {size}", t.c));
        }
    }
}

pub(super) fn static_assert(out: &mut String, condition: &str) {
    writeln!(
        out,
        "static_assert({condition}, \"{}\");",
        condition.replace('"', "'")
    )
    .unwrap();
}

/// The ACL unit of `version`.
fn acl_source(newest: bool) -> String {
    let types = acl::c_types();
    let names: HashMap<&str, &str> = all_types().iter().map(|t| (t.rust, t.c)).collect();
    let mut out = acl_prelude(newest).to_owned();
    pointer_checks(
        acl::Acl::SIGNATURES,
        acl::OPTIONAL,
        newest,
        &names,
        &mut out,
    );
    constant_checks(acl::CONSTANTS, acl::OPTIONAL, newest, &mut out);
    type_checks(&types, newest, &mut out);
    let location = offset_of!(AclPhysicalMemProp, location);
    let layout = [
        ("aclrtMemLocation", "id", offset_of!(AclMemLocation, id)),
        (
            "aclrtMemLocation",
            "type",
            offset_of!(AclMemLocation, type_),
        ),
        (
            "aclrtPhysicalMemProp",
            "handleType",
            offset_of!(AclPhysicalMemProp, handle_type),
        ),
        (
            "aclrtPhysicalMemProp",
            "allocationType",
            offset_of!(AclPhysicalMemProp, allocation_type),
        ),
        (
            "aclrtPhysicalMemProp",
            "memAttr",
            offset_of!(AclPhysicalMemProp, mem_attr),
        ),
        ("aclrtPhysicalMemProp", "location", location),
        (
            "aclrtPhysicalMemProp",
            "reserve",
            offset_of!(AclPhysicalMemProp, reserve),
        ),
    ];
    for (ty, field, offset) in layout {
        static_assert(&mut out, &format!("offsetof({ty}, {field}) == {offset}"));
    }
    static_assert(
        &mut out,
        &format!(
            "sizeof(aclrtMemLocation) == {}",
            size_of::<AclMemLocation>()
        ),
    );
    out
}

/// The HCCL unit of `version`.
fn hccl_source(newest: bool) -> String {
    let names: HashMap<&str, &str> = all_types().iter().map(|t| (t.rust, t.c)).collect();
    let mut out = HCCL_PRELUDE.to_owned();
    pointer_checks(
        hccl::Hccl::SIGNATURES,
        hccl::OPTIONAL,
        newest,
        &names,
        &mut out,
    );
    constant_checks(hccl::CONSTANTS, hccl::OPTIONAL, newest, &mut out);
    type_checks(&hccl::c_types(), newest, &mut out);
    let layout = [
        (
            "HcclRootInfo",
            "internal",
            offset_of!(HcclRootInfoBytes, internal),
        ),
        (
            "HcclSendRecvItem",
            "sendRecvType",
            offset_of!(HcclSendRecvItemDef, send_recv_type),
        ),
        (
            "HcclSendRecvItem",
            "buf",
            offset_of!(HcclSendRecvItemDef, buf),
        ),
        (
            "HcclSendRecvItem",
            "count",
            offset_of!(HcclSendRecvItemDef, count),
        ),
        (
            "HcclSendRecvItem",
            "dataType",
            offset_of!(HcclSendRecvItemDef, data_type),
        ),
        (
            "HcclSendRecvItem",
            "remoteRank",
            offset_of!(HcclSendRecvItemDef, remote_rank),
        ),
    ];
    for (ty, field, offset) in layout {
        static_assert(&mut out, &format!("offsetof({ty}, {field}) == {offset}"));
    }
    static_assert(
        &mut out,
        &format!("HCCL_ROOT_INFO_BYTES == {}", hccl::HCCL_ROOT_INFO_BYTES),
    );
    out
}

fn check(version: &str, unit: &str, source: &str, pedantic: bool) {
    if let Err(errors) = compile(version, source, pedantic) {
        panic!(
            "the {unit} bindings differ from the torch-npu {version} headers:\n{errors}\n--- generated C++ ---\n{source}"
        );
    }
    let checked = source
        .lines()
        .filter(|l| l.starts_with("static_assert") || l.contains("dipu_check_"))
        .count();
    assert!(
        checked > 20,
        "only {checked} checks were generated for {unit}"
    );
}

#[test]
fn acl_bindings_match_both_header_versions() {
    for (version, newest) in VERSIONS {
        check(version, "ACL", &acl_source(newest), true);
    }
}

#[test]
fn hccl_bindings_match_both_header_versions() {
    for (version, newest) in VERSIONS {
        check(version, "HCCL", &hccl_source(newest), false);
    }
}

#[test]
fn the_optional_symbols_are_really_missing_from_the_old_headers() {
    // Each optional function, checked against 2.1.0, must fail: if one
    // compiles there, it is not optional and the list is wrong.
    let names: HashMap<&str, &str> = all_types().iter().map(|t| (t.rust, t.c)).collect();
    for (signatures, optional, prelude) in [
        (acl::Acl::SIGNATURES, acl::OPTIONAL, acl_prelude(false)),
        (hccl::Hccl::SIGNATURES, hccl::OPTIONAL, HCCL_PRELUDE),
    ] {
        for s in signatures.iter().filter(|s| optional.contains(&s.name)) {
            let mut source = prelude.to_owned();
            pointer_checks(std::slice::from_ref(s), &[], true, &names, &mut source);
            assert!(
                compile("2.1.0.post17", &source, false).is_err(),
                "{} is declared by the 2.1.0 headers: it need not be optional",
                s.name
            );
        }
    }
}

#[test]
fn the_check_refuses_a_function_the_header_renames() {
    // No CANN header renames a bound function today; one that did would
    // `#define` the name, as this source does.
    let names: HashMap<&str, &str> = all_types().iter().map(|t| (t.rust, t.c)).collect();
    let mut source = acl_prelude(true).to_owned();
    source.push_str("#define aclrtFree aclrtFreeWithDevSync\n");
    pointer_check(
        "aclrtFree",
        "aclError",
        &["*mut c_void"],
        &names,
        &mut source,
    );
    let errors = compile("2.14.0", &source, true).expect_err("a renamed function must be refused");
    assert!(errors.contains("aclrtFree is a macro"), "{errors}");
}

#[test]
fn the_check_catches_wrong_signatures_and_values() {
    let wrong = [
        (
            "a wrong argument type",
            "int (*const x)(int) = aclrtMalloc;",
        ),
        (
            "a missing const",
            "aclError (*const x)(void *, size_t, void *, size_t, aclrtMemcpyKind) = aclrtMemcpy;",
        ),
        (
            "int for an enum",
            "aclError (*const x)(void *, size_t, void const *, size_t, int) = aclrtMemcpy;",
        ),
        (
            "a wrong value",
            "static_assert(ACL_EVENT_TIME_LINE == 2, \"flag\");",
        ),
        (
            "a wrong size",
            "static_assert(sizeof(aclrtPhysicalMemProp) == 24, \"size\");",
        ),
    ];
    for (what, line) in wrong {
        let source = format!("{}{line}\n", acl_prelude(true));
        assert!(
            compile("2.14.0", &source, true).is_err(),
            "{what} was not caught: {line}"
        );
    }
    let right =
        "aclError (*const x)(void *, size_t, void const *, size_t, aclrtMemcpyKind) = aclrtMemcpy;";
    compile("2.14.0", &format!("{}{right}\n", acl_prelude(true)), true)
        .expect("the correct prototype compiles");
}
