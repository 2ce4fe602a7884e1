//! The bindings against the project's own header of the published
//! prototypes (`fake/include/dipu_cambricon_api.h`), compiled with the C
//! compiler: each Rust signature becomes a function pointer initialised
//! with the declared function (so a wrong argument count or type is an
//! error under `-Werror`), and each sized type a size check.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::cncl::Cncl;
use crate::cndrv::Cndrv;
use crate::cnrt::Cnrt;
use crate::{cncl, cndrv, cnrt};
use dipu_vendorkit::bind::{c_args, c_type, CType, Signature};

/// Size checks of `types` and pointer checks of `signatures`, whose types
/// `names` spells (every table's: CNCL's functions take CNRT's queue).
fn check(signatures: &[Signature], types: &[CType], names: &HashMap<&str, &str>, out: &mut String) {
    for t in types {
        if let Some(size) = t.size {
            if t.rust != "cnrtHostFn_t" {
                writeln!(
                    out,
                    "_Static_assert(sizeof({}) == {size}, \"{}\");",
                    t.c, t.rust
                )
                .unwrap();
            }
        }
    }
    for s in signatures {
        let args: Vec<&str> = s.args.iter().map(|(_, ty)| *ty).collect();
        let args = c_args(&args, names);
        let ret = c_type(s.ret, names);
        writeln!(out, "{ret} (*check_{})({args}) = {};", s.name, s.name).unwrap();
    }
}

#[test]
fn every_binding_matches_the_projects_header() {
    let mut source = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n#include \"dipu_cambricon_api.h\"\n",
    );
    let tables = [cnrt::c_types(), cncl::c_types(), cndrv::c_types()];
    let names: HashMap<&str, &str> = tables.iter().flatten().map(|t| (t.rust, t.c)).collect();
    check(Cnrt::SIGNATURES, &tables[0], &names, &mut source);
    check(Cncl::SIGNATURES, &tables[1], &names, &mut source);
    check(Cndrv::SIGNATURES, &tables[2], &names, &mut source);
    // The host function pointer type: cnrtHostFn_t is `void (*)(void *)`.
    source.push_str("_Static_assert(sizeof(cnrtHostFn_t) == sizeof(void *), \"cnrtHostFn_t\");\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bindings_check.c");
    std::fs::write(&file, &source).unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake/include");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&compiler)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(&include)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    assert!(
        out.status.success(),
        "the bindings differ from the header:\n{}\n--- source ---\n{source}",
        String::from_utf8_lossy(&out.stderr)
    );
}
