//! Lays the fake out under the real libraries' file names, in a folder the
//! vendor is pointed at (its CUDA home, or `LD_LIBRARY_PATH`).

use std::io;
use std::path::{Path, PathBuf};

/// The names that are links to the one fake (sharing one state).
pub const LINKED: [&str; 3] = ["libcudart.so.13", "libcuda.so.1", "libnccl.so.2"];
/// The name that is a copy of the fake (its own object, CUDA 12.8).
pub const COPIED: &str = "libcudart.so.12";

/// `libdipu_fake_cuda.so` as cargo built it next to the running test or
/// binary (its folder, the `deps/` below it, or the folder above).
pub fn built_library() -> Option<PathBuf> {
    built("libdipu_fake_cuda.so")
}

/// The library `file` (`libdipu_fake_cuda_old.so`, say) as cargo built it
/// next to the running test or binary, as [`built_library`] looks.
pub fn built(file: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.to_path_buf(),
        dir.join("deps"),
        dir.parent()?.to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join(file))
    .find(|p| p.is_file())
}

/// Makes `dir/lib64` hold the fake as [`LINKED`] (symbolic links to
/// `library`) and, if `with_cuda12`, as [`COPIED`]; returns `dir/lib64`.
/// Safe to run from several processes at once (each name is replaced
/// atomically).
pub fn layout(library: &Path, dir: &Path, with_cuda12: bool) -> io::Result<PathBuf> {
    let lib = dir.join("lib64");
    std::fs::create_dir_all(&lib)?;
    let library = std::path::absolute(library)?;
    let tmp = |name: &str| lib.join(format!(".{name}.{}", std::process::id()));
    for name in LINKED {
        let t = tmp(name);
        let _ = std::fs::remove_file(&t);
        std::os::unix::fs::symlink(&library, &t)?;
        std::fs::rename(&t, lib.join(name))?;
    }
    let copy = lib.join(COPIED);
    if with_cuda12 {
        let t = tmp(COPIED);
        std::fs::copy(&library, &t)?;
        std::fs::rename(&t, &copy)?;
    } else if copy.exists() {
        std::fs::remove_file(&copy)?;
    }
    Ok(lib)
}
