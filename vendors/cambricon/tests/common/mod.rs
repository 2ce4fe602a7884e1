//! Shared helpers: the fake Neuware (the fake library linked under the
//! three names), the plugin's path, and loading it.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

/// `target/<profile>`, from this test binary's own path (`.../deps/x`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// The vendor plugin built next to this test binary.
pub fn plugin_path() -> PathBuf {
    let path = target_dir().join("libdipu_vendor_cambricon.so");
    assert!(path.is_file(), "{} is not built", path.display());
    path
}

/// A fresh Neuware home in `dir` whose `lib64/` holds `libcnrt.so`,
/// `libcncl.so` and `libcndrv.so`, all links to the one fake library
/// (so the dynamic linker loads it once and the three share its state).
pub fn fake_neuware(dir: &Path) -> PathBuf {
    let fake = target_dir().join("libdipu_fake_cambricon.so");
    assert!(
        fake.is_file(),
        "{} is not built: run `cargo build -p dipu-fake-cambricon` (CI builds the workspace first)",
        fake.display()
    );
    let lib = dir.join("lib64");
    std::fs::create_dir_all(&lib).unwrap();
    for name in ["libcnrt.so", "libcncl.so", "libcndrv.so"] {
        std::os::unix::fs::symlink(&fake, lib.join(name)).unwrap();
    }
    dir.to_path_buf()
}
