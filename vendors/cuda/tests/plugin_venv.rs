//! The plugin through the loader (every call crossing the C ABI) on the
//! real NVIDIA wheels in `.venv`, found through `DIPU_CUDA_HOME` and through
//! `VIRTUAL_ENV`. Without a GPU: the vendor starts, names its files, reports
//! collectives, answers `NoDevice`, and the conformance suite passes its one
//! device-free check and skips the rest. With a GPU: see `gpu.rs`.
//!
//! This binary changes its environment, so it has exactly one test.

mod common;

use std::sync::Arc;

use dipu_deviceapi::{Capabilities, DeviceApi, ErrorKind, Loader, VendorSpec};

fn load() -> Arc<dyn DeviceApi> {
    let plugin = common::plugin_path();
    Loader::new()
        .load(&VendorSpec::Path(plugin))
        .unwrap_or_else(|e| panic!("loading the CUDA plugin: {e}"))
        .api
}

fn check(api: &Arc<dyn DeviceApi>, venv: &std::path::Path) {
    assert_eq!(api.name(), "cuda");
    let version = api.version();
    let sp = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages"))
        .next()
        .unwrap();
    let cudart = sp.join("nvidia/cu13/lib/libcudart.so.13");
    let nccl = sp.join("nvidia/nccl/lib/libnccl.so.2");
    assert!(
        version.contains(&format!("cudart: {}", cudart.display())),
        "{version}"
    );
    assert!(
        version.contains(&format!("nccl: {} 2.", nccl.display())),
        "{version}"
    );
    assert!(
        api.capabilities().contains(Capabilities::COLLECTIVES),
        "{version}"
    );
    assert_eq!(api.comm_unique_id_size(), 128);
    match api.device_count() {
        Ok(n) => assert!(n >= 1),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::NoDevice, "{e}");
            assert!(e.message().contains("cudaGetDeviceCount: cudaError"), "{e}");
            assert!(e.vendor_code().is_some(), "{e}");
            let report = dipu_tests::run(api, None);
            assert!(report.success(), "\n{report}");
            assert_eq!(
                report.passed(),
                1,
                "only device::count runs without a device:\n{report}"
            );
        }
    }
}

#[test]
fn the_plugin_runs_on_the_wheels() {
    let venv = common::venv();
    for var in [
        "CUDA_HOME",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "DIPU_LOG",
        "DIPU_CUDA_HOME",
    ] {
        std::env::remove_var(var);
    }
    std::env::set_var("DIPU_CUDA_HOME", &venv);
    check(&load(), &venv);
    std::env::remove_var("DIPU_CUDA_HOME");
    std::env::set_var("VIRTUAL_ENV", &venv);
    check(&load(), &venv);
}
