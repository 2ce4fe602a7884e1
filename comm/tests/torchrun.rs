//! Rendezvous under torchrun: PyTorch's launcher (from PyPI, installed by
//! `scripts/torch-env.sh`) starts 2 processes of the `allreduce` example,
//! which meet through torch's agent TCPStore via `MASTER_ADDR`/`MASTER_PORT`
//! and all-reduce on the host vendor.

use std::path::PathBuf;
use std::process::Command;

fn torchrun() -> PathBuf {
    let python = std::env::var_os("DIPU_TORCH_PYTHON").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-torch/bin/python"),
        PathBuf::from,
    );
    let torchrun = python.with_file_name("torchrun");
    assert!(
        torchrun.exists(),
        "{} does not exist: this test needs PyPI's torch. Run scripts/torch-env.sh (or set \
         DIPU_TORCH_PYTHON to a python with torch)",
        torchrun.display()
    );
    torchrun
}

/// The `allreduce` example `cargo test` built beside this test.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/allreduce");
    assert!(
        path.exists(),
        "{} was not built (cargo test builds examples)",
        path.display()
    );
    path
}

#[test]
fn two_ranks_rendezvous_under_torchrun() {
    let out = Command::new(torchrun())
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(example())
        .env("DIPU_VENDOR", "host")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "torchrun failed:\n{stdout}\n{stderr}");
    for rank in 0..2 {
        let line = format!("rank {rank} of 2");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(": ok (every element 3)")),
            "no ok line from {line}:\n{stdout}"
        );
    }
}
