//! Helpers shared by the integration tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compiles `tests/c/<src>` with `-D<define>`s into the shared library
/// `dir/<name>`, as strictly as a vendor's own CI would (C11, -Werror).
pub(crate) fn build_c_plugin(dir: &Path, src: &str, defines: &[&str], name: &str) -> PathBuf {
    let include = workspace_root().join("include");
    build_c(dir, src, defines, name, &include, true)
}

/// Compiles `tests/c/<src>` as strictly as [`build_c_plugin`], against the
/// headers in `include`, into `dir/<name>`: a shared library if `shared`,
/// else a program.
pub(crate) fn build_c(
    dir: &Path,
    src: &str,
    defines: &[&str],
    name: &str,
    include: &Path,
    shared: bool,
) -> PathBuf {
    let root = workspace_root();
    let out = dir.join(name);
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&compiler)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .args(if shared {
            &["-shared", "-fPIC", "-pthread"][..]
        } else {
            &["-pthread"][..]
        })
        .arg("-I")
        .arg(include)
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(root.join("tests/c").join(src))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    assert!(status.success(), "compiling {src} {defines:?} failed");
    out
}

/// `libdipu_vendor_host.so` as cargo built it for this test run.
pub(crate) fn host_plugin_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let candidate = dir.join("libdipu_vendor_host.so");
        if candidate.exists() {
            return candidate;
        }
    }
    panic!(
        "libdipu_vendor_host.so not found next to {} or in its parent; build it with `cargo build -p dipu-vendor-host`",
        deps.display()
    );
}
