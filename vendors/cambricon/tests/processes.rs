//! CNCL ranks as processes on the fake Neuware: each test re-runs itself
//! once per rank with the fake as `$NEUWARE_HOME/lib64/{libcnrt,libcncl,
//! libcndrv}.so`, and the ranks form one clique through the Cambricon
//! vendor from a clique id passed between processes: an all-reduce on 2
//! processes, every collective and operator on 4 (average refused: CNCL
//! has none), a rank killed mid-collective, and 8 processes all-reducing
//! 64 MiB.
//!
//! The harness and the names of the fake's shared memory are fakekit's,
//! included by path (the fake is not a dependency of this crate).

mod common;

use std::process::Command;
use std::time::Duration;

use dipu_deviceapi::ReduceOp;
use dipu_fakekit::names::shm_prefix;
use dipu_fakekit::ranks::{self, Ranks};

/// The parts of `dipu-fakekit` the tests use.
#[path = "../../fakekit/src"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "a library's modules, used in part"
)]
mod dipu_fakekit {
    pub mod names;
    pub mod ranks;
}

#[path = "../../fakekit/scenarios/ranks.rs"]
mod scenarios;

fn vendor() -> dipu_vendor_cambricon::CambriconVendor {
    dipu_vendor_cambricon::CambriconVendor::new()
        .unwrap_or_else(|e| panic!("the vendor on the fake: {e}"))
}

/// Starts `world` ranks of test `name` on the fake.
fn launch(name: &str, world: usize) -> (Ranks, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("scratch directory");
    common::fake_neuware(home.path());
    let job = Ranks::launch(name, world, |cmd: &mut Command| {
        cmd.env("NEUWARE_HOME", home.path());
        for var in ["DIPU_FAKE_FAULTS", "DIPU_FAKE_TRACE"] {
            cmd.env_remove(var);
        }
    });
    (job, home)
}

/// Asserts the job left nothing in `/dev/shm`.
fn nothing_left(job: &Ranks) {
    let prefix = shm_prefix("cncl", &job.published("id"));
    assert_eq!(
        ranks::shm_left(&prefix),
        Vec::<String>::new(),
        "left in /dev/shm"
    );
}

#[test]
fn all_reduce_on_two_processes() {
    if let Some((rank, world)) = ranks::child() {
        return scenarios::all_reduce_sum(&vendor(), rank, world, 4096);
    }
    let (mut job, _home) = launch("all_reduce_on_two_processes", 2);
    job.expect_success(Duration::from_secs(60), "all_reduce ok");
    nothing_left(&job);
}

#[test]
fn every_collective_and_operator_on_four_processes() {
    if let Some((rank, world)) = ranks::child() {
        let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];
        return scenarios::every_collective(&vendor(), rank, world, &ops, &[ReduceOp::Avg]);
    }
    let (mut job, _home) = launch("every_collective_and_operator_on_four_processes", 4);
    job.expect_success(Duration::from_secs(60), "every collective ok");
    nothing_left(&job);
}

#[test]
fn eight_processes_all_reduce_64_mib() {
    if let Some((rank, world)) = ranks::child() {
        return scenarios::all_reduce_sum(&vendor(), rank, world, 16 << 20);
    }
    let (mut job, _home) = launch("eight_processes_all_reduce_64_mib", 8);
    job.expect_success(Duration::from_secs(120), "all_reduce ok");
    nothing_left(&job);
}

#[test]
fn a_rank_killed_mid_collective_fails_the_others() {
    if let Some((rank, world)) = ranks::child() {
        return scenarios::survive_a_killed_rank(&vendor(), rank, world);
    }
    let world = 3;
    let (mut job, _home) = launch("a_rank_killed_mid_collective_fails_the_others", world);
    for r in 0..world {
        job.await_file(&format!("waiting{r}"), Duration::from_secs(60));
    }
    let prefix = shm_prefix("cncl", &job.published("id"));
    job.clean_on_drop(&prefix);
    // The last rank's unread send is in shared memory (where the test looks).
    job.await_shm(&prefix, Duration::from_secs(120));
    job.kill(world - 1);
    for o in job.wait(Duration::from_secs(120)) {
        assert!(
            // CNCL_RET_ASYNC_ERROR: the vendor reads only the code.
            o.success
                && o.output.contains("saw the error")
                && o.output.contains("CNCL_RET_ASYNC_ERROR"),
            "rank {} did not fail cleanly; its output:\n{}",
            o.rank,
            o.output
        );
    }
    assert_eq!(
        ranks::shm_left(&prefix),
        Vec::<String>::new(),
        "left in /dev/shm"
    );
}
