//! `dipu` end to end: the built binary against the host vendor, built in and
//! as a plugin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `dipu` with a clean environment: none of the variables it reads are
/// inherited from whoever runs the tests.
fn dipu(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_VENDOR",
        "DIPU_VENDOR_PATH",
        "DIPU_LOG",
        "DIPU_HOST_DEVICES",
        "DIPU_HOST_MEMORY",
        "DIPU_HOST_FAIL_MALLOC_AT",
        "DIPU_HOST_FAIL_MALLOC_AFTER_BYTES",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run dipu");
    Run {
        code: status.code().expect("dipu exited by a signal"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `libdipu_vendor_host.so`, built by cargo next to the `dipu` binary.
fn host_plugin() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_dipu"));
    let dir = exe.parent().expect("target directory");
    for candidate in [dir.to_path_buf(), dir.join("deps")] {
        let so = candidate.join("libdipu_vendor_host.so");
        if so.exists() {
            return so;
        }
    }
    panic!(
        "libdipu_vendor_host.so not found in {} or its deps/; build it with `cargo build -p dipu-vendor-host`",
        dir.display()
    );
}

/// Builds the minimal C vendor (`tests/c/minimal_vendor.c`) with
/// `-DNO_DEVICE`: a vendor whose `device_count` answers `NoDevice`.
fn no_device_plugin(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = dir.join("libdipu_vendor_nodev.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&compiler)
        .args([
            "-std=c11",
            "-shared",
            "-fPIC",
            "-pthread",
            "-DNO_DEVICE",
            "-I",
        ])
        .arg(root.join("include"))
        .arg(root.join("tests/c/minimal_vendor.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    assert!(status.success(), "compiling the NO_DEVICE C vendor failed");
    out
}

#[test]
fn info_shows_the_host_vendor_and_its_two_devices() {
    let r = run(&mut dipu(&["info"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("vendor:       host\n"), "{r:?}");
    assert!(r.stdout.contains("loaded from:  built in\n"), "{r:?}");
    assert!(r.stdout.contains("virtual-memory"), "{r:?}");
    assert!(r.stdout.contains("devices:      2\n"), "{r:?}");
    assert!(
        r.stdout.contains("device 0: ") && r.stdout.contains("device 1: "),
        "{r:?}"
    );
    assert!(!r.stdout.contains("device 2: "), "{r:?}");
    for field in [
        "total memory:",
        "free memory:",
        "compute:",
        "multiprocessors:",
    ] {
        assert_eq!(r.stdout.matches(field).count(), 2, "{field} {r:?}");
    }
    assert!(r.stdout.contains(" GiB\n"), "{r:?}");
}

#[test]
fn info_follows_dipu_host_devices() {
    let r = run(dipu(&["info"]).env("DIPU_HOST_DEVICES", "3"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("devices:      3\n"), "{r:?}");
    assert!(r.stdout.contains("device 2: "), "{r:?}");
}

#[test]
fn an_invalid_host_memory_setting_is_a_clear_error() {
    let r = run(dipu(&["info"]).env("DIPU_HOST_MEMORY", "banana"));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.starts_with("dipu: error: "), "{r:?}");
    assert!(r.stderr.contains("DIPU_HOST_MEMORY"), "{r:?}");
    assert!(r.stderr.contains("banana"), "{r:?}");
}

#[test]
fn selftest_passes_on_the_host_vendor() {
    let r = run(&mut dipu(&["selftest"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("check "), "{r:?}");
    assert!(r.stdout.contains("time (ms)"), "{r:?}");
    let summary = r.stdout.lines().last().expect("a summary line");
    assert!(
        summary.contains(" passed, 0 failed, 0 skipped in ") && summary.ends_with(" s"),
        "{r:?}"
    );
}

#[test]
fn a_failing_check_exits_1() {
    let r = run(dipu(&["selftest", "--filter", "memory::malloc_and_free"])
        .env("DIPU_HOST_FAIL_MALLOC_AT", "1"));
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.contains("memory::malloc_and_free | FAILED"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("failures:\n  memory::malloc_and_free: "),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("\n0 passed, 1 failed, 0 skipped in "),
        "{r:?}"
    );
}

#[test]
fn selftest_filter_selects_checks() {
    let r = run(&mut dipu(&["selftest", "--filter", "events::"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("events::cross_stream_wait"), "{r:?}");
    assert!(!r.stdout.contains("memory::"), "{r:?}");
    let r = run(&mut dipu(&["selftest", "--filter", "no-such-check"]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no-such-check"), "{r:?}");
}

#[test]
fn an_unknown_vendor_says_where_it_looked() {
    let r = run(&mut dipu(&["info", "--vendor", "nosuch"]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .starts_with("dipu: error: vendor library not found: "),
        "{r:?}"
    );
    assert!(r.stderr.contains("libdipu_vendor_nosuch.so"), "{r:?}");
    assert!(r.stderr.contains("looked in"), "{r:?}");
    let exe_dir = PathBuf::from(env!("CARGO_BIN_EXE_dipu"));
    let exe_dir = exe_dir.parent().unwrap().display().to_string();
    assert!(r.stderr.contains(&exe_dir), "{r:?}");
}

#[test]
fn dipu_vendor_names_the_vendor() {
    let so = host_plugin();
    let r = run(dipu(&["info"]).env("DIPU_VENDOR", &so));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains(&format!("loaded from:  {}\n", so.display())),
        "{r:?}"
    );
    let r = run(dipu(&["info"]).env("DIPU_VENDOR", "no such vendor"));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("DIPU_VENDOR"), "{r:?}");
}

#[test]
fn an_invalid_log_filter_names_dipu_log() {
    let r = run(dipu(&["info"]).env("DIPU_LOG", "["));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.starts_with("dipu: error: "), "{r:?}");
    assert!(r.stderr.contains("DIPU_LOG"), "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
}

#[test]
fn vendor_calls_are_traced_through_the_plugin() {
    let so = host_plugin();
    let so = so.to_str().expect("UTF-8 path");
    let r = run(dipu(&["info", "--vendor", so]).env("DIPU_LOG", "dipu::vendor_call=trace"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("loaded from:  {so}\n")), "{r:?}");
    assert!(
        r.stderr
            .lines()
            .any(|l| l.contains("TRACE") && l.contains("device_count")),
        "{r:?}"
    );
}

#[test]
fn selftest_runs_through_the_plugin() {
    let so = host_plugin();
    let so = so.to_str().expect("UTF-8 path");
    let r = run(&mut dipu(&[
        "selftest", "--vendor", so, "--filter", "copies::",
    ]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("loaded from: {so}\n")), "{r:?}");
    assert!(r.stdout.contains("copies::peer"), "{r:?}");
}

#[test]
fn usage_errors_exit_2() {
    let r = run(&mut dipu(&["frobnicate"]));
    assert_eq!(r.code, 2, "{r:?}");
    let r = run(&mut dipu(&["--help"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("selftest") && r.stdout.contains("info"),
        "{r:?}"
    );
}

#[test]
fn no_device_is_an_error_for_info_but_skips_in_selftest() {
    let dir = tempfile::tempdir().unwrap();
    let so = no_device_plugin(dir.path());
    let so = so.to_str().expect("UTF-8 path");
    let r = run(&mut dipu(&["info", "--vendor", so]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("vendor:       c-minimal\n"), "{r:?}");
    assert!(r.stdout.contains(&format!("loaded from:  {so}\n")), "{r:?}");
    assert!(r.stdout.contains("capabilities: none\n"), "{r:?}");
    assert!(r.stderr.starts_with("dipu: error: no device: "), "{r:?}");
    assert!(r.stderr.contains("no accelerator found"), "{r:?}");
    let r = run(&mut dipu(&["selftest", "--vendor", so]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\n1 passed, 0 failed, "), "{r:?}");
    assert!(r.stdout.contains("skipped:\n"), "{r:?}");
}
