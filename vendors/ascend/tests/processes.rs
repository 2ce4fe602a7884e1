//! HCCL ranks as processes on the fake CANN: each test re-runs itself once
//! per rank with the fake as `$ASCEND_TOOLKIT_HOME/lib64/{libascendcl,
//! libhccl}.so`, and the ranks form one communicator through the Ascend
//! vendor from a root info passed between processes: an all-reduce on 2
//! processes, every collective and operator on 4 (average refused: HCCL
//! has none), a rank killed mid-collective, and 8 processes all-reducing
//! 64 MiB.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{fake_home, Build};
use dipu_deviceapi::ReduceOp;
use dipu_fake_ascend::dipu_fakekit;
use dipu_fakekit::collective::shm_prefix;
use dipu_fakekit::ranks::{self, Ranks};

#[path = "../../fakekit/scenarios/ranks.rs"]
mod scenarios;

fn vendor() -> dipu_vendor_ascend::AscendVendor {
    dipu_vendor_ascend::AscendVendor::new()
        .unwrap_or_else(|e| panic!("the vendor on the fake: {e}"))
}

/// Starts `world` ranks of test `name` on the fake.
fn launch(name: &str, world: usize) -> (Ranks, tempfile::TempDir) {
    let home = fake_home(Build::New);
    let job = Ranks::launch(name, world, |cmd: &mut Command| {
        cmd.env("ASCEND_TOOLKIT_HOME", home.path())
            .env_remove("ASCEND_HOME_PATH");
        for var in ["DIPU_FAKE_FAULTS", "DIPU_FAKE_TRACE"] {
            cmd.env_remove(var);
        }
    });
    (job, home)
}

/// Asserts the job left nothing in `/dev/shm`.
fn nothing_left(job: &Ranks) {
    let prefix = shm_prefix("hccl", &job.published("id")[..28]);
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
    let prefix = shm_prefix("hccl", &job.published("id")[..28]);
    job.clean_on_drop(&prefix);
    // The last rank's unread send is in shared memory (where the test looks).
    job.await_shm(&prefix, Duration::from_secs(120));
    job.kill(world - 1);
    for o in job.wait(Duration::from_secs(120)) {
        assert!(
            // HCCL reports a lost peer as its wait's timeout (the vendor
            // reads only the code).
            o.success && o.output.contains("saw the error") && o.output.contains("HcclResult 9"),
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
