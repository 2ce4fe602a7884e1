//! The process group (`dipu-comm`) over the fake CNCL with ranks as
//! processes: the runtime loads the Cambricon plugin on the fake Neuware,
//! the ranks meet through a TCP store (the clique id passes through it),
//! and a killed rank makes the others fail within the group's timeout.
//! (A binary of its own: the runtime links the host vendor, whose plugin
//! symbols clash with the Cambricon crate's when both are linked.)

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_comm::store::{Store, TcpStore, TcpStoreServer};
use dipu_comm::{Buffer, Options, ProcessGroup};
use dipu_deviceapi::{DataType, ReduceOp};
use dipu_fakekit::ranks::{self, Ranks};
use dipu_runtime::{Runtime, RuntimeOptions, VendorSpec};

/// The harness of `dipu-fakekit` (the fake is not a dependency of this crate).
#[path = "../../fakekit/src"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "a library's module, used in part"
)]
mod dipu_fakekit {
    pub mod ranks;
}

/// The process group over the fake CNCL, ranks as processes meeting
/// through a TCP store (the clique id passes through it): the last rank is
/// killed after the first all-reduce, and the other ranks' second
/// all-reduce fails within the group's 5 s timeout instead of hanging.
#[test]
fn the_process_group_fails_within_its_timeout_when_a_rank_is_killed() {
    const PORT: &str = "DIPU_TEST_STORE_PORT";
    let name = "the_process_group_fails_within_its_timeout_when_a_rank_is_killed";
    if let Some((rank, world)) = ranks::child() {
        let port: u16 = std::env::var(PORT).unwrap().parse().unwrap();
        let options =
            RuntimeOptions::default().with_vendor(VendorSpec::Path(common::plugin_path()));
        let rt = Runtime::new(options).expect("the runtime on the Cambricon vendor");
        let store: Arc<dyn Store> =
            Arc::new(TcpStore::connect("127.0.0.1", port, Duration::from_secs(20)).unwrap());
        let options = Options::default().with_timeout(Duration::from_secs(5));
        let pg = ProcessGroup::new(
            Arc::clone(&rt),
            store,
            rank as i32,
            world as i32,
            0,
            options,
        )
        .unwrap();
        let bytes: Vec<u8> = [1.0f32; 1024]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let stream = rt.context().current_stream(0).unwrap();
        let dev = rt.allocate(bytes.len(), stream).unwrap();
        dev.copy_from_host(&bytes, None).unwrap();
        let buf = Buffer::from_device_buffer(&dev, DataType::F32).unwrap();
        let wait = Duration::from_secs(60);
        pg.all_reduce(&buf, ReduceOp::Sum)
            .unwrap()
            .wait_host(wait)
            .unwrap();
        if rank == world - 1 {
            dipu_fakekit::ranks::publish("victim ready", b"");
            std::thread::sleep(Duration::from_secs(600));
            unreachable!("the victim was to be killed");
        }
        let start = Instant::now();
        let err = pg
            .all_reduce(&buf, ReduceOp::Sum)
            .and_then(|w| w.wait_host(wait))
            .expect_err("a rank is dead: the all-reduce must fail");
        let took = start.elapsed();
        println!("rank {rank}: {err} (after {took:?})");
        assert!(
            took < Duration::from_secs(7),
            "failed after {took:?}, beyond the 5 s timeout"
        );
        assert!(pg.failure().is_some(), "the group is aborted");
        println!("rank {rank}: failed cleanly");
        return;
    }
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port().to_string();
    let home = tempfile::tempdir().expect("scratch directory");
    common::fake_neuware(home.path());
    let mut job = Ranks::launch(name, 3, |cmd: &mut Command| {
        cmd.env("NEUWARE_HOME", home.path()).env(PORT, &port);
    });
    job.await_file("victim ready", Duration::from_secs(60));
    job.kill(2);
    job.expect_success(Duration::from_secs(30), "failed cleanly");
}
