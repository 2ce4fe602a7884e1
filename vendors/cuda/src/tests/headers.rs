//! The bindings against NVIDIA's real headers (from the wheels in `.venv`):
//! every function's Rust signature becomes a C function pointer initialised
//! with the real function, every constant a `_Static_assert`, every type a
//! size check and every struct field an offset check, compiled with
//! `cc -std=c11 -Wall -Werror -fsyntax-only` (incompatible pointer types,
//! const-ness and enum-vs-int mismatches are errors).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use crate::cudart::CudaPointerAttributes;
use crate::driver::{CuMemAccessDesc, CuMemAllocFlags, CuMemAllocationProp, CuMemLocation};
use crate::nccl::{NcclConfig, NcclUniqueId};
use crate::{cudart, driver, nccl};
use dipu_vendorkit::bind::{c_args, c_type, CType, Signature};

/// The wheels' include directories (CUDA runtime + crt + cccl, NCCL).
fn include_dirs() -> Vec<PathBuf> {
    let sp = super::venv_site_packages();
    let dirs = vec![
        sp.join("nvidia/cu13/include"),
        sp.join("nvidia/nccl/include"),
    ];
    for (dir, header) in dirs.iter().zip(["crt/host_defines.h", "nccl.h"]) {
        assert!(
            dir.join(header).is_file(),
            "{} lacks {header}: run scripts/cuda-env.sh (it installs nvidia-cuda-crt and nvidia-cuda-cccl for the headers)",
            dir.display()
        );
    }
    dirs
}

/// The include directories for CUDA 12: the declarations of
/// `nvidia-cuda-runtime-cu12` (`cuda_runtime_api.h`, `driver_types.h`,
/// `cuda.h`) first, then CUDA 13's only for the helper headers the cu12
/// wheel does not ship (`crt/`, `nv/target`), then NCCL's.
fn cuda12_include_dirs() -> Vec<PathBuf> {
    let sp = super::venv_site_packages();
    let cu12 = sp.join("nvidia/cuda_runtime/include");
    assert!(
        cu12.join("cuda_runtime_api.h").is_file() && cu12.join("cuda.h").is_file(),
        "{} lacks CUDA 12's headers: run scripts/cuda-env.sh (it installs nvidia-cuda-runtime-cu12)",
        cu12.display()
    );
    let mut dirs = vec![cu12];
    dirs.extend(include_dirs());
    dirs
}

/// Compiles `source` against the headers; the compiler's output on failure.
fn compile(source: &str) -> Result<(), String> {
    compile_with(source, &include_dirs())
}

/// Compiles `source` against the headers of `includes`.
fn compile_with(source: &str, includes: &[PathBuf]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("bindings_check.c");
    std::fs::write(&file, source).expect("write the C file");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&compiler);
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"]);
    for include in includes {
        cmd.arg("-I").arg(include);
    }
    let out = cmd
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

const PRELUDE: &str =
    "#include <stddef.h>\n#include <cuda_runtime_api.h>\n#include <cuda.h>\n#include <nccl.h>\n";

fn all_types() -> Vec<CType> {
    [cudart::c_types(), nccl::c_types(), driver::c_types()]
        .into_iter()
        .flatten()
        .collect()
}

fn pointer_checks(
    library: &str,
    signatures: &[Signature],
    names: &HashMap<&str, &str>,
    out: &mut String,
) {
    for s in signatures {
        let args: Vec<&str> = s.args.iter().map(|(_, ty)| *ty).collect();
        pointer_check(library, s.name, s.symbols[0], s.ret, &args, names, out);
    }
}

/// `ret (*const check)(args) = name;`, and an `#error` if the symbol looked
/// up first is a macro in the header (a name the header renames, such as
/// CUDA 12's `cudaGetDeviceProperties` to `cudaGetDeviceProperties_v2`,
/// would otherwise bind the old function of the same name).
fn pointer_check(
    library: &str,
    name: &str,
    symbol: &str,
    ret: &str,
    args: &[&str],
    names: &HashMap<&str, &str>,
    out: &mut String,
) {
    let args = c_args(args, names);
    let ret = c_type(ret, names);
    writeln!(
        out,
        "#ifdef {symbol}\n#error \"{symbol} is a macro in the header: bind the symbol it names\"\n#endif\n\
         {ret} (*const dipu_check_{library}_{name})({args}) = {name};"
    )
    .unwrap();
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
    let types = all_types();
    let names: HashMap<&str, &str> = types.iter().map(|t| (t.rust, t.c)).collect();
    let mut out = PRELUDE.to_owned();
    pointer_checks("cudart", cudart::Cudart::SIGNATURES, &names, &mut out);
    pointer_checks("nccl", nccl::Nccl::SIGNATURES, &names, &mut out);
    pointer_checks("driver", driver::Driver::SIGNATURES, &names, &mut out);
    for c in [cudart::CONSTANTS, nccl::CONSTANTS, driver::CONSTANTS]
        .into_iter()
        .flatten()
    {
        static_assert(
            &mut out,
            &format!("(long long)({}) == {}LL", c.name, c.value),
        );
    }
    for t in &types {
        match t.size {
            // CUDA 13 grew it from 24 to 88 bytes (reserved fields); the
            // vendor's 88 bytes hold either, and only the leading fields are read.
            Some(size) if t.c == "struct cudaPointerAttributes" => {
                static_assert(&mut out, &format!("sizeof({}) <= {size}", t.c));
            }
            Some(size) => static_assert(&mut out, &format!("sizeof({}) == {size}", t.c)),
            None => {}
        }
    }
    let location = offset_of!(CuMemAllocationProp, location);
    let flags = offset_of!(CuMemAllocationProp, alloc_flags);
    let layout = [
        ("CUmemLocation", "type", offset_of!(CuMemLocation, type_)),
        ("CUmemLocation", "id", offset_of!(CuMemLocation, id)),
        (
            "CUmemAllocationProp",
            "type",
            offset_of!(CuMemAllocationProp, type_),
        ),
        (
            "CUmemAllocationProp",
            "requestedHandleTypes",
            offset_of!(CuMemAllocationProp, requested_handle_types),
        ),
        (
            "CUmemAllocationProp",
            "location.type",
            location + offset_of!(CuMemLocation, type_),
        ),
        (
            "CUmemAllocationProp",
            "location.id",
            location + offset_of!(CuMemLocation, id),
        ),
        (
            "CUmemAllocationProp",
            "win32HandleMetaData",
            offset_of!(CuMemAllocationProp, win32_handle_meta_data),
        ),
        (
            "CUmemAllocationProp",
            "allocFlags.compressionType",
            flags + offset_of!(CuMemAllocFlags, compression_type),
        ),
        (
            "CUmemAllocationProp",
            "allocFlags.gpuDirectRDMACapable",
            flags + offset_of!(CuMemAllocFlags, gpu_direct_rdma_capable),
        ),
        (
            "CUmemAllocationProp",
            "allocFlags.usage",
            flags + offset_of!(CuMemAllocFlags, usage),
        ),
        (
            "CUmemAllocationProp",
            "allocFlags.reserved",
            flags + offset_of!(CuMemAllocFlags, reserved),
        ),
        (
            "CUmemAccessDesc",
            "location",
            offset_of!(CuMemAccessDesc, location),
        ),
        (
            "CUmemAccessDesc",
            "flags",
            offset_of!(CuMemAccessDesc, flags),
        ),
        (
            "ncclUniqueId",
            "internal",
            offset_of!(NcclUniqueId, internal),
        ),
        ("struct cudaDeviceProp", "name", 0),
        (
            "struct cudaPointerAttributes",
            "type",
            offset_of!(CudaPointerAttributes, type_),
        ),
        (
            "struct cudaPointerAttributes",
            "device",
            offset_of!(CudaPointerAttributes, device),
        ),
        (
            "struct cudaPointerAttributes",
            "devicePointer",
            offset_of!(CudaPointerAttributes, device_pointer),
        ),
        (
            "struct cudaPointerAttributes",
            "hostPointer",
            offset_of!(CudaPointerAttributes, host_pointer),
        ),
        ("ncclConfig_t", "size", offset_of!(NcclConfig, size)),
        ("ncclConfig_t", "magic", offset_of!(NcclConfig, magic)),
        ("ncclConfig_t", "version", offset_of!(NcclConfig, version)),
        ("ncclConfig_t", "blocking", offset_of!(NcclConfig, blocking)),
        ("ncclConfig_t", "netName", offset_of!(NcclConfig, net_name)),
        (
            "ncclConfig_t",
            "commName",
            offset_of!(NcclConfig, comm_name),
        ),
        (
            "ncclConfig_t",
            "collnetEnable",
            offset_of!(NcclConfig, ints3),
        ),
    ];
    for (ty, field, offset) in layout {
        static_assert(&mut out, &format!("offsetof({ty}, {field}) == {offset}"));
    }
    let alloc_flags = size_of::<CuMemAllocFlags>();
    static_assert(
        &mut out,
        &format!("sizeof(((CUmemAllocationProp *)0)->allocFlags) == {alloc_flags}"),
    );
    static_assert(
        &mut out,
        "sizeof(((struct cudaDeviceProp *)0)->name) == 256",
    );
    let buffer = crate::device::PROP_BUFFER_WORDS * 8;
    static_assert(
        &mut out,
        &format!("sizeof(struct cudaDeviceProp) <= {buffer}"),
    );
    // cudaHostFn_t is `Option<unsafe extern "C" fn(*mut c_void)>`.
    out.push_str("void (*dipu_check_host_fn)(void *) = (cudaHostFn_t)0;\n");
    out
}

#[test]
fn bindings_match_the_real_headers() {
    let source = bindings_source();
    if let Err(errors) = compile(&source) {
        panic!(
            "the bindings differ from NVIDIA's headers:\n{errors}\n--- generated C ---\n{source}"
        );
    }
    let checked = source
        .lines()
        .filter(|l| l.starts_with("_Static_assert") || l.contains("dipu_check_"))
        .count();
    assert!(checked > 100, "only {checked} checks were generated");
}

/// The fake libraries' exported functions (`dipu-fake-cuda`), checked the
/// same way against the same headers.
fn fakes_source() -> String {
    let types = all_types();
    let names: HashMap<&str, &str> = types.iter().map(|t| (t.rust, t.c)).collect();
    let mut out = PRELUDE.to_owned();
    for (library, signatures) in [
        ("fake_cudart", dipu_fake_cuda::RUNTIME),
        ("fake_driver", dipu_fake_cuda::DRIVER),
        ("fake_nccl", dipu_fake_cuda::NCCL),
    ] {
        for s in signatures {
            pointer_check(library, s.name, s.name, s.ret, s.args, &names, &mut out);
        }
    }
    out
}

#[test]
fn bindings_match_the_cuda12_headers() {
    let source = bindings_source();
    if let Err(errors) = compile_with(&source, &cuda12_include_dirs()) {
        panic!(
            "the bindings differ from CUDA 12's headers:\n{errors}\n--- generated C ---\n{source}"
        );
    }
    // The CUDA 12 headers really are the ones compiled: they rename
    // cudaGetDeviceProperties, which the check refuses to bind by name.
    let mut renamed = PRELUDE.to_owned();
    renamed.push_str("#ifdef cudaGetDeviceProperties\n#error renamed\n#endif\n");
    assert!(compile_with(&renamed, &cuda12_include_dirs()).is_err());
    assert!(compile(&renamed).is_ok(), "CUDA 13 does not rename it");
}

#[test]
fn the_fakes_match_the_real_headers() {
    let source = fakes_source();
    if let Err(errors) = compile(&source) {
        panic!("the fakes differ from NVIDIA's headers:\n{errors}\n--- generated C ---\n{source}");
    }
}

#[test]
fn the_fakes_export_every_bound_function_with_the_bindings_types() {
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let fakes: Vec<&dipu_fake_cuda::Signature> = [
        dipu_fake_cuda::RUNTIME,
        dipu_fake_cuda::DRIVER,
        dipu_fake_cuda::NCCL,
    ]
    .into_iter()
    .flatten()
    .collect();
    for s in [
        cudart::Cudart::SIGNATURES,
        nccl::Nccl::SIGNATURES,
        driver::Driver::SIGNATURES,
    ]
    .into_iter()
    .flatten()
    {
        let fake = fakes
            .iter()
            .find(|f| s.symbols.contains(&f.name))
            .unwrap_or_else(|| panic!("the fake exports none of {:?}", s.symbols));
        let bound: Vec<String> = s.args.iter().map(|(_, ty)| squash(ty)).collect();
        let faked: Vec<String> = fake.args.iter().map(|ty| squash(ty)).collect();
        assert_eq!(bound, faked, "{}: arguments", s.name);
        assert_eq!(squash(s.ret), squash(fake.ret), "{}: return type", s.name);
    }
}

#[test]
fn the_check_catches_a_renamed_symbol() {
    let types = all_types();
    let names: HashMap<&str, &str> = types.iter().map(|t| (t.rust, t.c)).collect();
    let mut out = PRELUDE.to_owned();
    // cuda.h `#define`s cuDeviceTotalMem to cuDeviceTotalMem_v2.
    pointer_check(
        "x",
        "cuDeviceTotalMem",
        "cuDeviceTotalMem",
        "CUresult",
        &["*mut usize", "CUdevice"],
        &names,
        &mut out,
    );
    let errors = compile(&out).expect_err("a macro-renamed symbol must be refused");
    assert!(errors.contains("cuDeviceTotalMem is a macro"), "{errors}");
}

#[test]
fn the_check_catches_wrong_signatures_and_values() {
    let wrong = [
        ("a wrong argument type", "int (*const x)(int) = cudaMalloc;"),
        (
            "a missing const",
            "cudaError_t (*const x)(void *, void *, size_t, enum cudaMemcpyKind) = cudaMemcpy;",
        ),
        (
            "int for an enum",
            "cudaError_t (*const x)(void *, void const *, size_t, int) = cudaMemcpy;",
        ),
        (
            "the id by pointer",
            "ncclResult_t (*const x)(ncclComm_t *, int, ncclUniqueId *, int) = ncclCommInitRank;",
        ),
        (
            "a wrong value",
            "_Static_assert(ncclMin == 2, \"swapped\");",
        ),
        (
            "a wrong size",
            "_Static_assert(sizeof(CUmemAllocationProp) == 24, \"size\");",
        ),
    ];
    for (what, line) in wrong {
        let source = format!("{PRELUDE}{line}\n");
        assert!(compile(&source).is_err(), "{what} was not caught: {line}");
    }
    let right = "ncclResult_t (*const x)(ncclComm_t *, int, ncclUniqueId, int) = ncclCommInitRank;";
    compile(&format!("{PRELUDE}{right}\n")).expect("the correct prototype compiles");
}

#[test]
fn rust_types_translate_to_c() {
    let types = all_types();
    let names: HashMap<&str, &str> = types.iter().map(|t| (t.rust, t.c)).collect();
    assert_eq!(c_type("*mut *const c_char", &names), "char const * *");
    assert_eq!(
        c_type("*const CUmemAllocationProp", &names),
        "CUmemAllocationProp const *"
    );
    assert_eq!(c_type("cudaMemcpyKind", &names), "enum cudaMemcpyKind");
    assert_eq!(
        c_type("*mut cudaDeviceProp", &names),
        "struct cudaDeviceProp *"
    );
    assert_eq!(c_type("usize", &names), "size_t");
}
