//! Unit tests. Those marked "venv" use the NVIDIA wheels installed in the
//! repository's `.venv` by `scripts/cuda-env.sh`, and fail (never skip)
//! when it is missing.

mod headers;
mod search;
mod translate;
mod venv;

use std::path::{Path, PathBuf};

/// The repository root.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<repo>/.venv/lib/python3*/site-packages`, or a panic saying how to make it.
pub(crate) fn venv_site_packages() -> PathBuf {
    let venv = repo_root().join(".venv");
    let found = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages"))
        .find(|p| {
            p.join("nvidia/cu13/lib/libcudart.so.13").is_file()
                && p.join("nvidia/nccl/lib/libnccl.so.2").is_file()
        });
    found.unwrap_or_else(|| {
        panic!(
            "the NVIDIA wheels are not installed in {}: run scripts/cuda-env.sh \
             (scripts/test.sh does) to create it",
            venv.display()
        )
    })
}

/// The venv's library directories of `nvidia-cuda-runtime` and `nvidia-nccl-cu13`.
pub(crate) fn venv_lib_dirs() -> Vec<PathBuf> {
    let sp = venv_site_packages();
    vec![sp.join("nvidia/cu13/lib"), sp.join("nvidia/nccl/lib")]
}
