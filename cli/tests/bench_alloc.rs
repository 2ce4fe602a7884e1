//! `dipu bench alloc` end to end: a tiny run prints the allocators' table
//! and the C ABI's (dipu_malloc + dipu_free through libdipu_runtime.so)
//! beside BF's own pair and the system pair; a library that is not there is a clear error.

use std::path::PathBuf;
use std::process::{Command, Output};

fn dipu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dipu"))
        .args(args)
        .env_remove("DIPU_LOG")
        .output()
        .expect("run dipu")
}

/// The C ABI library cargo built beside `dipu` (target/<profile>/).
fn library() -> PathBuf {
    let lib = PathBuf::from(env!("CARGO_BIN_EXE_dipu")).with_file_name("libdipu_runtime.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build -p dipu-ffi` first",
        lib.display()
    );
    lib
}

#[test]
fn tiny_run_prints_the_c_abi_pair_beside_bfs_own() {
    let lib = library();
    let out = dipu(&[
        "bench",
        "alloc",
        "--iterations",
        "5",
        "--c-abi-lib",
        lib.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = &stdout[stdout.find("the C ABI pair: dipu_malloc").expect(&stdout)..];
    // size (two words), threads, devices, system, BF own, C ABI, two
    // ratios, two x1thr.
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 11 && w[2].parse::<u32>().is_ok())
        .collect();
    assert_eq!(rows.len(), 15, "5 sizes x 3 layouts:\n{table}");
    let layouts: Vec<(&str, &str)> = rows[..3].iter().map(|r| (r[2], r[3])).collect();
    assert_eq!(layouts, [("1", "1"), ("2", "1"), ("2", "2")], "{table}");
    for r in &rows {
        for figure in &r[4..] {
            let v: f64 = figure
                .parse()
                .unwrap_or_else(|_| panic!("{figure} in {r:?}"));
            assert!(v > 0.0 && v.is_finite(), "{r:?}");
        }
    }
}

#[test]
fn a_missing_library_is_a_clear_error() {
    let out = dipu(&[
        "bench",
        "alloc",
        "--iterations",
        "5",
        "--c-abi-lib",
        "/nonexistent/libdipu_runtime.so",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/libdipu_runtime.so"),
        "{stderr}"
    );
}
