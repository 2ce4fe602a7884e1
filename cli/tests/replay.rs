//! `dipu replay` and `dipu bench alloc` end to end, on the built-in host
//! vendor.

use std::process::Command;

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../allocator/traces/resnet18.trace"
);

/// `dipu` with none of the variables it reads inherited from whoever runs
/// the tests.
fn dipu(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_LOG",
        "DIPU_DEVICE_MEMCACHING_ALGORITHM",
        "DIPU_ALLOC_CONF",
        "DIPU_TORCH_ALLOCATOR_CONF",
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

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn run(mut cmd: Command) -> Run {
    let out = cmd.output().expect("run dipu");
    Run {
        code: out.status.code().expect("dipu exited by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The value after `label` on the line that starts with it.
fn field<'a>(out: &'a str, label: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(|rest| rest.trim_start_matches(':').trim())
}

#[test]
fn replay_prints_the_figures_of_one_algorithm() {
    let r = run(dipu(&["replay", TRACE, "--algo", "TORCH"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(field(&r.stdout, "algorithm"), Some("TORCH"), "{r:?}");
    let ratio: f64 = field(&r.stdout, "ratio")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no ratio line: {r:?}"));
    assert!((1.0..3.0).contains(&ratio), "{r:?}");
    let events: usize = field(&r.stdout, "events").unwrap().parse().unwrap();
    assert!(events > 1000, "{r:?}");
    for label in [
        "peak requested",
        "peak reserved",
        "segments",
        "vendor mallocs",
        "allocate",
        "free",
    ] {
        assert!(field(&r.stdout, label).is_some(), "no {label} line: {r:?}");
    }
}

#[test]
fn replay_algorithm_and_options_come_from_the_environment() {
    let mut cmd = dipu(&["replay", TRACE]);
    cmd.env("DIPU_DEVICE_MEMCACHING_ALGORITHM", "bs")
        .env("DIPU_ALLOC_CONF", "max_split_size_mb:64");
    let r = run(cmd);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(field(&r.stdout, "algorithm"), Some("BS"), "{r:?}");
    assert!(r.stdout.contains("max_split_size_mb:64"), "{r:?}");
}

#[test]
fn replay_all_prints_a_row_per_algorithm() {
    for streams in ["1", "3"] {
        let r = run(dipu(&["replay", TRACE, "--all", "--streams", streams]));
        assert_eq!(r.code, 0, "{r:?}");
        for label in ["TORCH", "BF", "BS", "RAW", "BF+expandable"] {
            let row = r
                .stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(label))
                .unwrap_or_else(|| panic!("no {label} row: {r:?}"));
            if label == "BF+expandable" && row.contains("n/a:") {
                continue;
            }
            let ratio: f64 = row
                .split_whitespace()
                .nth(5)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no ratio in {row:?}: {r:?}"));
            assert!(ratio >= 1.0, "{row}");
        }
    }
}

#[test]
fn replay_rejects_an_unknown_algorithm() {
    let r = run(dipu(&["replay", TRACE, "--algo", "XYZ"]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("XYZ"), "{r:?}");
    assert!(r.stderr.contains("TORCH, BF, BS or RAW"), "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
}

#[test]
fn replay_rejects_bad_options() {
    let r = run(dipu(&["replay", TRACE, "--conf", "colour:blue"]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("colour"), "{r:?}");
    let mut cmd = dipu(&["replay", TRACE]);
    cmd.env("DIPU_ALLOC_CONF", "max_split_size_mb:lots");
    let r = run(cmd);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("DIPU_ALLOC_CONF"), "{r:?}");
    let r = run(dipu(&["replay", TRACE, "--streams", "0"]));
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn replay_reports_a_missing_or_bad_trace() {
    let r = run(dipu(&["replay", "no/such/file.trace"]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no/such/file.trace"), "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "a 0 100\nfree 0\n").unwrap();
    let r = run(dipu(&["replay", bad.to_str().unwrap()]));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("line 2"), "{r:?}");
}

#[test]
fn bench_alloc_prints_ratios_to_the_system_allocator() {
    let r = run(dipu(&["bench", "alloc", "--iterations", "1000"]));
    assert_eq!(r.code, 0, "{r:?}");
    let header = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("size"))
        .unwrap_or_else(|| panic!("no header: {r:?}"));
    let columns: Vec<&str> = header.split_whitespace().collect();
    let ratio_column = columns
        .iter()
        .position(|c| *c == "ratio")
        .unwrap_or_else(|| panic!("no ratio column: {r:?}"));
    for allocator in ["system", "TORCH", "BF", "BS", "RAW"] {
        let rows: Vec<&str> = r
            .stdout
            .lines()
            .filter(|l| l.split_whitespace().nth(3) == Some(allocator))
            .collect();
        assert_eq!(
            rows.len(),
            10,
            "5 sizes x 2 thread counts of {allocator}: {r:?}"
        );
        for row in rows {
            // "512 B" and "4 KiB" are two words, so the ratio is one word
            // further right than in the header.
            let ratio: f64 = row
                .split_whitespace()
                .nth(ratio_column + 1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no ratio in {row:?}"));
            assert!(ratio > 0.0, "{row}");
        }
    }
}
