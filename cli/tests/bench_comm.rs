//! `dipu bench comm` end to end: a tiny run on 2 rank processes prints the
//! table with a positive bandwidth, and bad arguments fail clearly.

use std::process::{Command, Output};

/// `dipu` with none of the host vendor's variables inherited.
fn dipu(args: &[&str]) -> Output {
    dipu_with(args, &[])
}

/// `dipu` with `env` set (and nothing else of the host vendor's inherited).
fn dipu_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_VENDOR",
        "DIPU_LOG",
        "DIPU_HOST_DEVICES",
        "DIPU_HOST_MEMORY",
        "DIPU_HOST_FAIL_MALLOC_AT",
        "DIPU_HOST_FAIL_MALLOC_AFTER_BYTES",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run dipu")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn tiny_run_prints_the_table() {
    let out = dipu(&["bench", "comm", "--sizes", "1", "--iterations", "3"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    let header = stdout
        .lines()
        .find(|l| l.contains("busbw GB/s"))
        .unwrap_or_else(|| panic!("no table header:\n{stdout}"));
    for column in ["size", "time/op", "algbw GB/s", "busbw/memcpy"] {
        assert!(header.contains(column), "{column} missing: {header}");
    }
    // `   1 MiB   3   1.234 ms   0.850   0.850   0.09`
    let row: Vec<&str> = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1 MiB"))
        .unwrap_or_else(|| panic!("no 1 MiB row:\n{stdout}"))
        .split_whitespace()
        .collect();
    assert_eq!(row.len(), 8, "{row:?}");
    assert_eq!(row[2], "3", "iterations: {row:?}");
    assert_eq!(row[4], "ms", "{row:?}");
    let number = |i: usize| -> f64 {
        row[i]
            .parse()
            .unwrap_or_else(|_| panic!("column {i} of {row:?}"))
    };
    let (time_ms, algbw, busbw) = (number(3), number(5), number(6));
    assert!(time_ms > 0.0, "{row:?}");
    assert!(algbw > 0.0 && busbw > 0.0, "{row:?}");
    // Two ranks: 2(n-1)/n = 1.
    assert!((busbw - algbw).abs() <= 0.0015 * algbw.max(1.0), "{row:?}");
    let memcpy = stdout
        .lines()
        .find_map(|l| l.strip_prefix("memcpy: "))
        .unwrap_or_else(|| panic!("no memcpy line:\n{stdout}"));
    let gbps: f64 = memcpy.split_whitespace().next().unwrap().parse().unwrap();
    assert!(gbps > 0.0, "{memcpy}");
}

#[test]
fn bad_arguments_fail_clearly() {
    for (args, says) in [
        (&["--ranks", "0"][..], "--ranks"),
        (&["--ranks", "1"][..], "not in 2..=64"),
        (&["--sizes", "0"][..], "--sizes"),
        (&["--iterations", "0"][..], "--iterations"),
    ] {
        let mut all = vec!["bench", "comm"];
        all.extend_from_slice(args);
        let out = dipu(&all);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn the_child_mode_is_hidden_and_needs_its_parent() {
    let help = text(&dipu(&["bench", "comm", "--help"]).stdout);
    assert!(
        help.contains("--ranks") && help.contains("--sizes"),
        "{help}"
    );
    assert!(
        !help.contains("--child") && !help.contains("--port"),
        "{help}"
    );
    // A bare --child (without its parent's --rank and --port) is refused.
    let out = dipu(&["bench", "comm", "--child"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--rank"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_failing_rank_fails_the_run_with_its_error() {
    // Each rank's host vendor has 8 MiB of device memory: the 16 MiB
    // buffer does not fit, so both ranks fail (or one fails and the other
    // is killed waiting for it).
    let out = dipu_with(
        &["bench", "comm", "--sizes", "16", "--iterations", "1"],
        &[("DIPU_HOST_MEMORY", "8M")],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("dipu: error: "), "{stderr}");
    assert!(stderr.contains("of 2 failed (exit code 2)"), "{stderr}");
    assert!(stderr.contains("out of memory"), "{stderr}");
    assert!(stderr.contains("16 MiB"), "the rank's own error: {stderr}");
    assert!(!text(&out.stdout).contains("busbw"), "no table on failure");
}
