//! Helpers shared by the integration tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};

use dipu_vendor_cuda::{CudaVendor, LibrarySearch};

/// The repository root.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<repo>/.venv` with the NVIDIA wheels, or a panic saying how to make it.
pub(crate) fn venv() -> PathBuf {
    let venv = repo_root().join(".venv");
    let has_wheels = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .any(|e| {
            e.path()
                .join("site-packages/nvidia/cu13/lib/libcudart.so.13")
                .is_file()
        });
    assert!(
        has_wheels,
        "the NVIDIA wheels are not installed in {}: run scripts/cuda-env.sh \
         (scripts/test.sh does) to create it",
        venv.display()
    );
    std::path::absolute(venv).expect("absolute venv path")
}

/// `libdipu_vendor_cuda.so` as cargo built it for this test run.
pub(crate) fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let candidate = dir.join("libdipu_vendor_cuda.so");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!(
        "libdipu_vendor_cuda.so not found next to {} or in its parent; build it with `cargo build -p dipu-vendor-cuda`",
        deps.display()
    );
}

/// The vendor as `dipu` would find it on a GPU machine: the environment's
/// search, then the repository's `.venv` if it exists.
pub(crate) fn gpu_vendor() -> CudaVendor {
    let mut search = LibrarySearch::from_env();
    search.push_python_prefix(&repo_root().join(".venv"), "the repository's .venv");
    CudaVendor::with_search(search)
        .unwrap_or_else(|e| panic!("the CUDA vendor does not start: {e}"))
}
