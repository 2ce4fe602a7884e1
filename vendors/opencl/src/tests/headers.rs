//! The bindings against the Khronos headers of Debian's `opencl-headers`
//! (`/usr/include/CL`, installed by `scripts/setup.sh`): every function's
//! Rust signature becomes a C function pointer initialised with the real
//! function, every constant (the status codes too) a `_Static_assert`, and
//! every type a size check, compiled with `cc -std=c11 -Wall -Werror
//! -fsyntax-only` (incompatible pointer types, const-ness and integer
//! width mismatches are errors).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use dipu_vendorkit::bind::{c_args, c_type, CType};

use crate::{cl, status};

/// Where Debian's `opencl-headers` puts `CL/cl.h`.
const INCLUDE: &str = "/usr/include";

const PRELUDE: &str =
    "#define CL_TARGET_OPENCL_VERSION 300\n#include <stddef.h>\n#include <CL/cl.h>\n#include <CL/cl_ext.h>\n";

/// Compiles `source` against the headers; the compiler's output on failure.
fn compile(source: &str) -> Result<(), String> {
    let header = Path::new(INCLUDE).join("CL/cl.h");
    assert!(
        header.is_file(),
        "{} is missing: install the Khronos headers (`apt-get install opencl-headers`, which \
         scripts/setup.sh does)",
        header.display()
    );
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("bindings_check.c");
    std::fs::write(&file, source).expect("write the C file");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&compiler)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .arg("-I")
        .arg(INCLUDE)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn names(types: &[CType]) -> HashMap<&str, &str> {
    types.iter().map(|t| (t.rust, t.c)).collect()
}

fn static_assert(out: &mut String, condition: &str) {
    writeln!(
        out,
        "_Static_assert({condition}, \"{}\");",
        condition.replace('"', "'")
    )
    .unwrap();
}

/// The whole check file.
fn bindings_source() -> String {
    let types = cl::c_types();
    let names = names(&types);
    let mut out = PRELUDE.to_owned();
    for s in cl::Cl::SIGNATURES {
        let args: Vec<&str> = s.args.iter().map(|(_, ty)| *ty).collect();
        let symbol = s.symbols[0];
        writeln!(
            out,
            "#ifdef {symbol}\n#error \"{symbol} is a macro in the header: bind the symbol it names\"\n#endif\n\
             {} (*const dipu_check_{})({}) = {symbol};",
            c_type(s.ret, &names),
            s.name,
            c_args(&args, &names)
        )
        .unwrap();
    }
    for c in cl::CONSTANTS.iter().chain(status::CONSTANTS) {
        static_assert(
            &mut out,
            &format!("(long long)({}) == {}LL", c.name, c.value),
        );
    }
    for t in &types {
        if let Some(size) = t.size {
            static_assert(&mut out, &format!("sizeof({}) == {size}", t.c));
        }
    }
    out
}

#[test]
fn bindings_match_the_khronos_headers() {
    let source = bindings_source();
    if let Err(errors) = compile(&source) {
        panic!(
            "the bindings differ from the Khronos headers:\n{errors}\n--- generated C ---\n{source}"
        );
    }
    let functions = source.matches("dipu_check_").count();
    assert_eq!(functions, cl::Cl::SIGNATURES.len());
    let asserts = source.matches("_Static_assert").count();
    assert!(asserts > 100, "only {asserts} static checks were generated");
}

#[test]
fn the_check_catches_wrong_signatures_and_values() {
    let wrong = [
        (
            "a missing const",
            "cl_int (*const x)(cl_command_queue, cl_bool, void *, void *, size_t, cl_uint, \
             cl_event const *, cl_event *) = clEnqueueSVMMemcpy;",
        ),
        (
            "a 32-bit flags argument",
            "void *(*const x)(cl_context, cl_uint, size_t, cl_uint) = clSVMAlloc;",
        ),
        (
            "a wrong callback type",
            "cl_int (*const x)(cl_event, cl_int, void (*)(cl_event, void *), void *) = \
             clSetEventCallback;",
        ),
        (
            "a wrong status value",
            "_Static_assert(CL_INVALID_VALUE == -31, \"value\");",
        ),
        (
            "a wrong size",
            "_Static_assert(sizeof(cl_context_properties) == 4, \"size\");",
        ),
    ];
    for (what, line) in wrong {
        let source = format!("{PRELUDE}{line}\n");
        assert!(compile(&source).is_err(), "{what} was not caught: {line}");
    }
    let right = "void *(*const x)(cl_context, cl_svm_mem_flags, size_t, cl_uint) = clSVMAlloc;";
    compile(&format!("{PRELUDE}{right}\n")).expect("the correct prototype compiles");
}

#[test]
fn every_status_is_named() {
    for c in status::CONSTANTS {
        let code = c.value as cl::cl_int;
        assert_eq!(status::name(code), Some(c.name), "{}", c.name);
    }
    assert_eq!(status::name(-20), None, "no such status");
}
