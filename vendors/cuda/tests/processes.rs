//! NCCL ranks as processes on the fake (`dipu-fake-cuda`): each test
//! re-runs itself once per rank with the fakes laid out under their real
//! names (`DIPU_CUDA_HOME`, `LD_LIBRARY_PATH`), and the ranks form one
//! communicator through the CUDA vendor from a unique id passed between
//! processes: an all-reduce on 2 processes, every collective and operator
//! on 4, a rank killed mid-collective, and 8 processes all-reducing 64 MiB.

use std::process::Command;
use std::time::Duration;

use dipu_deviceapi::ReduceOp;
use dipu_fake_cuda::dipu_fakekit;
use dipu_fakekit::collective::shm_prefix;
use dipu_fakekit::ranks::{self, Ranks};

#[path = "../../fakekit/scenarios/ranks.rs"]
mod scenarios;

fn vendor() -> dipu_vendor_cuda::CudaVendor {
    dipu_vendor_cuda::CudaVendor::new().unwrap_or_else(|e| panic!("the vendor on the fakes: {e}"))
}

/// Starts `world` ranks of test `name` on the fakes, with `env`.
fn launch(name: &str, world: usize, env: &[(&str, &str)]) -> Ranks {
    let library = dipu_fake_cuda::layout::built_library()
        .expect("libdipu_fake_cuda.so next to the test (a dev-dependency builds it)");
    let dir = library
        .parent()
        .unwrap()
        .join(format!("fake-cuda-ranks/{name}"));
    let lib = dipu_fake_cuda::layout::layout(&library, &dir, false).expect("lay out the fakes");
    Ranks::launch(name, world, |cmd: &mut Command| {
        cmd.env("DIPU_CUDA_HOME", &dir).env("LD_LIBRARY_PATH", &lib);
        for var in [
            "CUDA_HOME",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "DIPU_FAKE_FAULTS",
            "DIPU_FAKE_TRACE",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
    })
}

/// Asserts the job left nothing in `/dev/shm`.
fn nothing_left(job: &Ranks) {
    let prefix = shm_prefix("nccl", &job.published("id"));
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
    let mut job = launch("all_reduce_on_two_processes", 2, &[]);
    job.expect_success(Duration::from_secs(60), "all_reduce ok");
    nothing_left(&job);
}

#[test]
fn every_collective_and_operator_on_four_processes() {
    if let Some((rank, world)) = ranks::child() {
        return scenarios::every_collective(&vendor(), rank, world, &ReduceOp::ALL, &[]);
    }
    let mut job = launch("every_collective_and_operator_on_four_processes", 4, &[]);
    job.expect_success(Duration::from_secs(60), "every collective ok");
    nothing_left(&job);
}

#[test]
fn eight_processes_all_reduce_64_mib() {
    if let Some((rank, world)) = ranks::child() {
        return scenarios::all_reduce_sum(&vendor(), rank, world, 16 << 20);
    }
    launch(
        "eight_processes_all_reduce_64_mib",
        8,
        &[("DIPU_FAKE_MEMORY", "1073741824")],
    )
    .expect_success(Duration::from_secs(120), "all_reduce ok");
}

#[test]
fn a_rank_killed_mid_collective_fails_the_others() {
    if let Some((rank, world)) = ranks::child() {
        return scenarios::survive_a_killed_rank(&vendor(), rank, world);
    }
    let world = 3;
    let mut job = launch("a_rank_killed_mid_collective_fails_the_others", world, &[]);
    for r in 0..world {
        job.await_file(&format!("waiting{r}"), Duration::from_secs(60));
    }
    let prefix = shm_prefix("nccl", &job.published("id"));
    job.clean_on_drop(&prefix);
    // The last rank's unread send is in shared memory (where the test looks).
    job.await_shm(&prefix, Duration::from_secs(120));
    job.kill(world - 1);
    for o in job.wait(Duration::from_secs(120)) {
        assert!(
            o.success && o.output.contains("saw the error") && o.output.contains("exited"),
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
