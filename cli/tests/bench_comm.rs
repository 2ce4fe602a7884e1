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
        "DIPU_HOST_COLLECTIVES",
        "DIPU_COMM_STAGED_TRANSPORT",
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
fn the_host_staged_paths_run_beside_the_native_one() {
    let out = dipu(&[
        "bench",
        "comm",
        "--sizes",
        "1",
        "--iterations",
        "2",
        "--paths",
        "native,staged-shm,staged-tcp",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    for words in [
        "own collectives",
        "pinned -> shared memory",
        "pinned -> TCP",
    ] {
        assert!(stdout.contains(words), "no table of `{words}`:\n{stdout}");
    }
    // `   1 MiB   0.850   1.00   0.400   0.47   0.300   0.35`
    let head = stdout
        .lines()
        .position(|l| l.contains("staged-shm") && l.contains("ratio"))
        .unwrap_or_else(|| panic!("no comparison:\n{stdout}"));
    let row: Vec<f64> = stdout
        .lines()
        .nth(head + 1)
        .and_then(|l| l.trim_start().strip_prefix("1 MiB"))
        .unwrap_or_else(|| panic!("no 1 MiB comparison row:\n{stdout}"))
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(row.len(), 6, "{row:?}");
    assert_eq!(row[1], 1.0, "native against itself: {row:?}");
    assert!(row.iter().all(|v| *v > 0.0), "{row:?}");
    // Bandwidths are printed to 0.0005, ratios to 0.005: a ratio lies
    // between what the printed bandwidths allow.
    let native = row[0];
    for (busbw, ratio) in [(row[2], row[3]), (row[4], row[5])] {
        let low = (busbw - 0.0005) / (native + 0.0005) - 0.005;
        let high = (busbw + 0.0005) / (native - 0.0005).max(1e-9) + 0.005;
        assert!(
            (low..=high).contains(&ratio),
            "a ratio is its busbw over native's: {row:?}"
        );
    }
}

#[test]
fn bad_arguments_fail_clearly() {
    for (args, says) in [
        (&["--ranks", "0"][..], "--ranks"),
        (&["--ranks", "1"][..], "not in 2..=64"),
        (&["--sizes", "0"][..], "--sizes"),
        (&["--iterations", "0"][..], "--iterations"),
        (&["--paths", "staged"][..], "staged-shm"),
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
