//! `dipu bench sync --vendor` end to end: on the OpenCL vendor (PoCL,
//! installed by `scripts/setup.sh`) a tiny run prints the runtime's round
//! trip beside the two raw OpenCL loops, every figure positive, each loop
//! run as often as asked and its bytes read back from the device; on a
//! vendor without a raw loop it says so. Timings are printed, never
//! bounded.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Timed round trips per loop in the tiny runs (5 rounds of 4, plus a
/// warm-up of 16).
const ITERATIONS: u64 = 20;
const RUNS: u64 = ITERATIONS + 16;

/// `libdipu_vendor_opencl.so` as cargo built it (the dev-dependency).
fn opencl_plugin() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_dipu"));
    let dir = exe.parent().expect("target directory");
    [
        dir.join("libdipu_vendor_opencl.so"),
        dir.join("deps/libdipu_vendor_opencl.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| {
        panic!(
            "libdipu_vendor_opencl.so is not built next to {}",
            exe.display()
        )
    })
}

fn bench(vendor: &str) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(["bench", "sync", "--vendor", vendor, "--iterations"])
        .arg(ITERATIONS.to_string())
        .env_remove("DIPU_LOG")
        .env_remove("DIPU_VENDOR");
    if std::env::var_os("POCL_DEVICES").is_none() {
        let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pocl-cache");
        cmd.env("POCL_DEVICES", "pthread pthread")
            .env("POCL_MAX_PTHREAD_COUNT", "2")
            .env("POCL_CACHE_DIR", cache);
    }
    cmd.output().expect("run dipu")
}

/// The table's rows: (loop, us per trip, ratio, round trips).
fn rows(stdout: &str) -> Vec<(String, f64, f64, u64)> {
    let table = &stdout[stdout
        .find("\nloop ")
        .unwrap_or_else(|| panic!("no table:\n{stdout}"))..];
    table
        .lines()
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = w.len();
            assert!(n >= 4, "{l}");
            let num = |s: &str| -> f64 { s.parse().unwrap_or_else(|_| panic!("{s} in {l}")) };
            (
                w[..n - 3].join(" "),
                num(w[n - 3]),
                num(w[n - 2]),
                w[n - 1].parse().expect(l),
            )
        })
        .collect()
}

#[test]
fn opencl_prints_the_runtime_beside_raw_opencl() {
    let out = bench(opencl_plugin().to_str().unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "PoCL is installed by scripts/setup.sh\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("vendor opencl: "), "{stdout}");
    let rows = rows(&stdout);
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names.len(), 3, "{stdout}");
    assert!(names[0].starts_with("runtime: "), "{stdout}");
    assert!(
        names[1].starts_with("raw OpenCL: clEnqueueSVMMemcpy + clFinish"),
        "{stdout}"
    );
    assert!(
        names[2].starts_with("raw OpenCL, the vendor's calls"),
        "{stdout}"
    );
    for (name, us, ratio, runs) in &rows {
        assert!(us.is_finite() && *us > 0.0, "{name}: {us} us\n{stdout}");
        assert!(
            ratio.is_finite() && *ratio > 0.0,
            "{name}: ratio {ratio}\n{stdout}"
        );
        assert_eq!(*runs, RUNS, "{name} ran {runs} round trips\n{stdout}");
    }
    assert_eq!(
        rows[1].2, 1.0,
        "the clFinish loop is the baseline\n{stdout}"
    );
    let summary = stdout
        .lines()
        .find_map(|l| l.strip_prefix("runtime / raw (clFinish): "))
        .unwrap_or_else(|| panic!("no ratio line\n{stdout}"));
    let ratio: f64 = summary.split(';').next().unwrap().parse().expect(summary);
    assert!(
        (ratio - rows[0].1 / rows[1].1).abs() < 0.01 * ratio,
        "{stdout}"
    );
}

#[test]
fn a_vendor_without_a_raw_loop_says_so() {
    let out = bench("host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 1, "{stdout}");
    assert_eq!(rows[0].3, RUNS, "{stdout}");
    assert!(
        stdout.contains("raw: no loop on vendor \"host\"'s own API"),
        "{stdout}"
    );
}
