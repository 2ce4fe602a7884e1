//! `dipu` end to end with the CUDA vendor plugin (`libdipu_vendor_cuda.so`,
//! found next to the `dipu` binary as a user's install would have it) on the
//! NVIDIA wheels in the repository's `.venv` (`scripts/cuda-env.sh`).
//! Without a GPU: `info` names every library file and exits 2 with a clean
//! "no device" error; `selftest` passes its one device-free check. With a
//! GPU: the ignored test runs the whole suite.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's `.venv`, or a panic saying how to make it.
fn venv() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv");
    let venv = std::path::absolute(venv).expect("absolute path");
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
        "the NVIDIA wheels are not installed in {}: run scripts/cuda-env.sh (scripts/test.sh does)",
        venv.display()
    );
    venv
}

/// `libdipu_vendor_cuda.so` next to `dipu`, where `--vendor cuda` finds it.
fn cuda_plugin() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_dipu"));
    let so = exe.with_file_name("libdipu_vendor_cuda.so");
    assert!(
        so.is_file(),
        "{} is missing: build the workspace first (`cargo build --workspace`, as scripts/test.sh does)",
        so.display()
    );
    so
}

/// `dipu` with none of the variables that choose or find a vendor inherited.
fn dipu(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_VENDOR",
        "DIPU_VENDOR_PATH",
        "DIPU_LOG",
        "DIPU_CUDA_HOME",
        "CUDA_HOME",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run dipu");
    let code = status
        .code()
        .unwrap_or_else(|| panic!("dipu was killed by a signal: {status}"));
    let (out, err) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    assert!(!err.contains("panicked"), "dipu panicked:\n{out}\n{err}");
    (code, out, err)
}

/// `info` on the venv's libraries: exit 0 on a GPU machine, else exit 2
/// with the `NoDevice` error.
fn check_info(cmd: &mut Command, venv: &Path) {
    let (code, out, err) = run(cmd);
    let what = format!("exit code {code}\n--- stdout ---\n{out}\n--- stderr ---\n{err}");
    assert!(out.contains("vendor:       cuda\n"), "{what}");
    assert!(out.contains("version:      CUDA runtime 13."), "{what}");
    assert!(
        out.contains(&format!("cudart: {}/lib/python3", venv.display())),
        "{what}"
    );
    assert!(out.contains("/nvidia/nccl/lib/libnccl.so.2 2."), "{what}");
    assert!(
        out.contains(&format!("loaded from:  {}", cuda_plugin().display())),
        "{what}"
    );
    assert!(out.contains("capabilities: collectives"), "{what}");
    if code == 0 {
        assert!(out.contains("device 0: "), "a GPU machine: {what}");
        return;
    }
    assert_eq!(code, 2, "{what}");
    assert!(err.starts_with("dipu: error: no device: "), "{what}");
    assert!(err.contains("cudaGetDeviceCount: cudaError"), "{what}");
    assert!(err.contains("(vendor code "), "{what}");
    assert_eq!(err.lines().count(), 1, "one clean line: {what}");
}

#[test]
fn info_by_name_with_dipu_cuda_home() {
    let venv = venv();
    cuda_plugin();
    check_info(
        dipu(&["info", "--vendor", "cuda"]).env("DIPU_CUDA_HOME", &venv),
        &venv,
    );
}

#[test]
fn info_by_path_in_the_active_virtual_env() {
    let venv = venv();
    let plugin = cuda_plugin().display().to_string();
    check_info(
        dipu(&["info", "--vendor", &plugin]).env("VIRTUAL_ENV", &venv),
        &venv,
    );
}

#[test]
fn info_without_any_cuda_runtime_lists_where_it_looked() {
    let empty = tempfile::tempdir().unwrap();
    cuda_plugin();
    let (code, out, err) = run(dipu(&["info", "--vendor", "cuda"])
        .env("DIPU_CUDA_HOME", empty.path())
        .env("HOME", empty.path())
        .env("PATH", empty.path()));
    if code == 0 {
        // A machine with the CUDA toolkit on its library path.
        assert!(out.contains("libcudart.so.1"), "{out}");
        return;
    }
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.starts_with("dipu: error: vendor library not found: "),
        "{err}"
    );
    let home = empty.path().display();
    assert!(
        err.contains(&format!(
            "{home}/lib64 (DIPU_CUDA_HOME), {home}/lib (DIPU_CUDA_HOME)"
        )),
        "{err}"
    );
}

#[test]
fn selftest_without_a_gpu_passes_the_device_free_check() {
    let venv = venv();
    cuda_plugin();
    let (code, out, err) =
        run(dipu(&["selftest", "--vendor", "cuda"]).env("DIPU_CUDA_HOME", &venv));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(", 0 failed, "), "{out}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on a GPU machine"]
fn selftest_on_a_gpu_passes_every_check() {
    // The machine's own CUDA when DIPU_CUDA_HOME names it, else the venv's.
    let home = std::env::var_os("DIPU_CUDA_HOME").unwrap_or_else(|| venv().into());
    cuda_plugin();
    let (code, out, err) = run(dipu(&["selftest", "--vendor", "cuda"]).env("DIPU_CUDA_HOME", home));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(", 0 failed, 0 skipped"), "{out}");
}
