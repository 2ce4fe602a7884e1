//! `dipu bench store` end to end: a tiny run against our server (a child
//! process) and against a server the test starts, and bad arguments.

use std::process::{Command, Output};

use dipu_comm::store::{Store, TcpStore, TcpStoreServer};

fn dipu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dipu"))
        .args(args)
        .env_remove("DIPU_LOG")
        .output()
        .expect("run dipu")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The figures of the table's one row: clients, connect ms, cycles/s,
/// barrier ms, close ms.
fn row(stdout: &str) -> Vec<f64> {
    let line = stdout.lines().last().expect("a row");
    line.split_whitespace()
        .map(|f| f.parse().unwrap_or_else(|_| panic!("a number in {line:?}")))
        .collect()
}

#[test]
fn tiny_run_on_our_server_prints_the_table() {
    let out = dipu(&["bench", "store", "--clients", "4", "--cycles", "5"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("dipu's server (a child process), 4 clients, 5 cycles"),
        "{stdout}"
    );
    assert!(stdout.contains("connect ms"), "{stdout}");
    let figures = row(&stdout);
    assert_eq!(figures.len(), 5, "{stdout}");
    assert_eq!(figures[0], 4.0);
    assert!(
        figures[1..].iter().all(|f| *f >= 0.0) && figures[2] > 0.0,
        "{stdout}"
    );
}

#[test]
fn loads_a_server_given_by_address() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let address = format!("127.0.0.1:{}", server.port());
    let out = dipu(&[
        "bench",
        "store",
        "--clients",
        "3",
        "--cycles",
        "4",
        "--server",
        &address,
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("the server at {address}")),
        "{stdout}"
    );
    assert_eq!(row(&stdout)[0], 3.0);
    // Each round ends once the server has closed every client's connection.
    assert_eq!(server.num_clients(), 0, "{stdout}");
    // The load went to this server: 5 rounds x 3 clients x 4 adds.
    let store = TcpStore::connect(
        "127.0.0.1",
        server.port(),
        std::time::Duration::from_secs(10),
    )
    .unwrap();
    let total: i64 = (0..5)
        .map(|round| store.add(&format!("bench/{round}/count"), 0).unwrap())
        .sum();
    assert_eq!(total, 5 * 3 * 4);
}

#[test]
fn bad_arguments_fail_clearly() {
    let out = dipu(&["bench", "store", "--server", "no-port"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("expected HOST:PORT"),
        "{}",
        text(&out.stderr)
    );
    for bad in [
        &["--clients", "0"][..],
        &["--cycles", "0"],
        &["--clients", "20000"],
    ] {
        let mut args = vec!["bench", "store"];
        args.extend_from_slice(bad);
        let out = dipu(&args);
        assert!(!out.status.success(), "{bad:?} was accepted");
        assert!(
            text(&out.stderr).contains(bad[0]),
            "{bad:?}: {}",
            text(&out.stderr)
        );
    }
}
