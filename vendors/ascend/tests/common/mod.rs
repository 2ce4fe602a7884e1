//! The fake CANN for the tests: `lib64/libascendcl.so` and `lib64/libhccl.so`
//! in a scratch directory, both links to the fake cargo built.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dipu_deviceapi::DeviceApi;
use dipu_vendor_ascend::{AscendVendor, LibrarySearch};

/// Which fake: the current API, or an old CANN without the optional symbols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    New,
    Old,
}

/// The fake's file for `build`, as cargo built it for this test run.
pub fn fake_so(build: Build) -> PathBuf {
    let name = match build {
        Build::New => "libdipu_fake_ascend.so",
        Build::Old => "libdipu_fake_ascend_old.so",
    };
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("target/debug/deps");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found next to {}: run `cargo build -p dipu-fake-ascend -p dipu-fake-ascend-old`", exe.display())
        })
}

/// A CANN-like directory: `<dir>/lib64/{libascendcl,libhccl}.so`.
pub fn fake_home(build: Build) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("scratch directory");
    let lib64 = dir.path().join("lib64");
    std::fs::create_dir(&lib64).expect("lib64");
    for name in ["libascendcl.so", "libhccl.so"] {
        std::os::unix::fs::symlink(fake_so(build), lib64.join(name)).expect("link the fake");
    }
    dir
}

/// The vendor on the fake in `home`.
pub fn vendor_in(home: &Path) -> Arc<dyn DeviceApi> {
    let search = LibrarySearch::dirs([home.join("lib64")]);
    Arc::new(AscendVendor::with_search(search).expect("the vendor opens the fake"))
}
