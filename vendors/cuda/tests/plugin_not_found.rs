//! The plugin through the loader on a machine without the CUDA runtime:
//! creation fails with `VendorLibraryNotFound`, listing where it looked.
//!
//! This binary changes its environment, so it has exactly one test.

mod common;

use dipu_deviceapi::{ErrorKind, Loader, VendorSpec};

#[test]
fn without_cudart_the_plugin_reports_every_place_it_looked() {
    let empty = tempfile::tempdir().unwrap();
    let home = empty.path().display().to_string();
    std::env::set_var("DIPU_CUDA_HOME", empty.path());
    std::env::set_var("HOME", empty.path());
    std::env::set_var("PATH", empty.path().join("bin"));
    for var in ["CUDA_HOME", "VIRTUAL_ENV", "CONDA_PREFIX", "DIPU_LOG"] {
        std::env::remove_var(var);
    }
    let plugin = common::plugin_path();
    let result = Loader::new().load(&VendorSpec::Path(plugin.clone()));
    let system_has_cudart = ["libcudart.so.13", "libcudart.so.12"].iter().any(|name| {
        // SAFETY: loading NVIDIA's runtime only runs its initialisers.
        unsafe { libloading::Library::new(name) }.is_ok()
    });
    if system_has_cudart {
        // A machine with the CUDA toolkit on its library path: the
        // vendor must then start from it.
        let loaded =
            result.unwrap_or_else(|e| panic!("the system's CUDA runtime is not used: {e}"));
        assert!(
            loaded.api.version().contains("libcudart.so.1"),
            "{}",
            loaded.api.version()
        );
        return;
    }
    let err = result.expect_err("no CUDA runtime anywhere, yet the vendor started");
    assert_eq!(err.kind(), ErrorKind::VendorLibraryNotFound, "{err}");
    let msg = err.message();
    for needle in [
        format!("vendor plugin {} failed to initialise", plugin.display()),
        "libcudart.so.13 or libcudart.so.12 not found".to_owned(),
        format!("{home}/lib64 (DIPU_CUDA_HOME)"),
        format!("{home}/lib (DIPU_CUDA_HOME)"),
        "the system library path".to_owned(),
        "/usr/local/cuda/lib64".to_owned(),
        "pip install nvidia-cuda-runtime".to_owned(),
    ] {
        assert!(msg.contains(&needle), "{needle:?} missing from:\n{msg}");
    }
    assert!(
        !msg.contains("site-packages"),
        "no Python environment was active:\n{msg}"
    );
}
