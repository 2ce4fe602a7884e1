//! `dipu` end to end with the Ascend vendor plugin (`libdipu_vendor_ascend.so`,
//! next to the `dipu` binary) on the fake CANN (`libdipu_fake_ascend.so`
//! linked as `lib64/libascendcl.so` and `lib64/libhccl.so`), and with no
//! CANN at all. Both files come from `cargo build --workspace`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A file cargo built next to `dipu`.
fn built(name: &str) -> PathBuf {
    let so = PathBuf::from(env!("CARGO_BIN_EXE_dipu")).with_file_name(name);
    assert!(
        so.is_file(),
        "{} is missing: build the workspace first (`cargo build --workspace`, as scripts/test.sh does)",
        so.display()
    );
    so
}

/// A CANN-like directory holding the fake.
fn fake_cann() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let lib64 = dir.path().join("lib64");
    std::fs::create_dir(&lib64).unwrap();
    for name in ["libascendcl.so", "libhccl.so"] {
        std::os::unix::fs::symlink(built("libdipu_fake_ascend.so"), lib64.join(name)).unwrap();
    }
    dir
}

/// `dipu` with none of the variables that choose or find a vendor inherited.
fn dipu(args: &[&str], cann: Option<&Path>) -> Command {
    built("libdipu_vendor_ascend.so");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_VENDOR",
        "DIPU_DEVICE",
        "DIPU_VENDOR_PATH",
        "DIPU_LOG",
        "ASCEND_HOME_PATH",
        "ASCEND_TOOLKIT_HOME",
        "LD_LIBRARY_PATH",
        "DIPU_FAKE_FAULTS",
        "DIPU_FAKE_DEVICES",
        "DIPU_FAKE_MEMORY",
    ] {
        cmd.env_remove(var);
    }
    if let Some(home) = cann {
        cmd.env("ASCEND_HOME_PATH", home);
    }
    cmd
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run dipu");
    let code = status.code().expect("dipu exited by a signal");
    let (out, err) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    assert!(!err.contains("panicked"), "dipu panicked:\n{out}\n{err}");
    (code, out, err)
}

#[test]
fn info_on_the_fake_cann() {
    let cann = fake_cann();
    let (code, out, err) = run(&mut dipu(
        &["info", "--vendor", "ascend"],
        Some(cann.path()),
    ));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("vendor:       ascend"), "{out}");
    assert!(out.contains("Ascend910B-fake"), "{out}");
    assert!(out.contains("collectives, virtual-memory"), "{out}");
}

#[test]
fn no_cann_is_a_clear_error_naming_every_place() {
    let empty = tempfile::tempdir().unwrap();
    let (code, out, err) = run(&mut dipu(
        &["info", "--vendor", "ascend"],
        Some(empty.path()),
    ));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("libascendcl.so not found"), "{err}");
    assert!(
        err.contains(&format!(
            "{}/lib64 (ASCEND_HOME_PATH)",
            empty.path().display()
        )),
        "{err}"
    );
    assert!(
        err.contains("/usr/local/Ascend/ascend-toolkit/latest/lib64"),
        "{err}"
    );
    assert!(err.contains("the system library path"), "{err}");
}

#[test]
fn dipu_device_selects_the_vendor_with_dipus_names() {
    let cann = fake_cann();
    let (code, out, err) = run(dipu(&["info"], Some(cann.path())).env("DIPU_DEVICE", "ascend"));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("vendor:       ascend"), "{out}");
    let (code, _, err) = run(dipu(&["info"], None).env("DIPU_DEVICE", "npu"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("DIPU_DEVICE=\"npu\"") && err.contains("cuda, camb, ascend"),
        "{err}"
    );
}

#[test]
fn replay_runs_every_algorithm_on_the_fake() {
    let cann = fake_cann();
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../allocator/traces/resnet18.trace");
    let trace = trace.to_str().unwrap();
    let (code, out, err) = run(dipu(
        &["replay", "--all", "--vendor", "ascend", trace],
        Some(cann.path()),
    )
    .env("DIPU_FAKE_MEMORY", "2147483648"));
    assert_eq!(code, 0, "{out}\n{err}");
    for row in ["TORCH", "BF ", "BS ", "RAW", "BF+expandable"] {
        assert!(
            out.lines().any(|l| l.starts_with(row)),
            "no {row} row:\n{out}"
        );
    }
}
