//! Helpers shared by the integration tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// A fake library build to run a test on: its file next to the test, and
/// the label used for its folder and messages.
pub(crate) struct FakeBuild {
    /// The built library (`dipu_fake_cuda::layout::built...`).
    pub(crate) library: PathBuf,
    /// Names the layout folder (`fake-<label>-tests/<test>`) and the failures.
    pub(crate) label: &'static str,
    /// Also lay out a copy named `libcudart.so.12`.
    pub(crate) cuda12: bool,
}

/// Runs `body` in a fresh process on `fake`, laid out under the real names
/// and found through the vendor's normal search (`DIPU_CUDA_HOME`, and
/// `LD_LIBRARY_PATH` for the driver, set before the process starts), with
/// `env`: the test re-runs itself by `name` with `child_var` set. Fails if
/// the child fails or runs longer than 120 s.
pub(crate) fn run_on_fake(
    child_var: &str,
    name: &str,
    fake: impl FnOnce() -> FakeBuild,
    env: &[(&str, &str)],
    body: impl FnOnce(),
) {
    if std::env::var(child_var).as_deref() == Ok(name) {
        body();
        return;
    }
    let fake = fake();
    let dir = fake
        .library
        .parent()
        .unwrap()
        .join(format!("fake-{}-tests/{name}", fake.label));
    let lib = dipu_fake_cuda::layout::layout(&fake.library, &dir, fake.cuda12)
        .expect("lay out the fakes");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(child_var, name)
        .env("DIPU_CUDA_HOME", &dir)
        .env("LD_LIBRARY_PATH", &lib);
    for var in [
        "CUDA_HOME",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "DIPU_FAKE_FAULTS",
        "DIPU_FAKE_TRACE",
        "DIPU_ALLOC_CONF",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let label = fake.label;
    let mut child = cmd.spawn().expect("re-run the test on the fakes");
    // A hang guard: far beyond what a slow machine takes.
    let limit = Duration::from_secs(120);
    let Some(status) = dipu_fake_cuda::dipu_fakekit::ranks::wait_timeout(&mut child, limit) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{name} on the {label} fakes did not finish within {limit:?} (hung)");
    };
    assert!(
        status.success(),
        "{name} on the {label} fakes failed: {status}"
    );
}
