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
use dipu_vendorkit::bind::{CType, Signature};

/// How C spells a Rust type of the tables.
pub(super) fn c_type(rust: &str, names: &HashMap<&str, &str>) -> String {
    let spaced = rust.replace('*', " * ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    fn go(tokens: &[&str], names: &HashMap<&str, &str>) -> String {
        match tokens {
            ["*", "mut", rest @ ..] => format!("{} *", go(rest, names)),
            ["*", "const", rest @ ..] => format!("{} const *", go(rest, names)),
            [base] => match *base {
                "c_int" => "int".into(),
                "c_uint" => "unsigned int".into(),
                "c_char" => "char".into(),
                "c_void" => "void".into(),
                "usize" => "size_t".into(),
                "u64" => "uint64_t".into(),
                "f32" => "float".into(),
                other => names
                    .get(other)
                    .map_or_else(|| other.to_owned(), |c| (*c).to_owned()),
            },
            other => panic!("no C spelling for {other:?}"),
        }
    }
    go(&tokens, names)
}

fn check(signatures: &[Signature], types: &[CType], out: &mut String) {
    let names: HashMap<&str, &str> = types.iter().map(|t| (t.rust, t.c)).collect();
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
        let args: Vec<String> = s.args.iter().map(|(_, ty)| c_type(ty, &names)).collect();
        let args = if args.is_empty() {
            "void".to_owned()
        } else {
            args.join(", ")
        };
        let ret = c_type(s.ret, &names);
        writeln!(out, "{ret} (*check_{})({args}) = {};", s.name, s.name).unwrap();
    }
}

#[test]
fn every_binding_matches_the_projects_header() {
    let mut source = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n#include \"dipu_cambricon_api.h\"\n",
    );
    check(Cnrt::SIGNATURES, &cnrt::c_types(), &mut source);
    check(Cncl::SIGNATURES, &cncl::c_types(), &mut source);
    check(Cndrv::SIGNATURES, &cndrv::c_types(), &mut source);
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
