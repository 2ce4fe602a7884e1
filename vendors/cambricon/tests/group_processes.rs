//! The process group (`dipu-comm`) over the fake CNCL with ranks as
//! processes: the runtime loads the Cambricon plugin on the fake Neuware,
//! the ranks meet through a TCP store (the clique id passes through it),
//! and a killed rank makes the others fail instead of hanging.
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

/// The store's port, for the ranks.
const PORT: &str = "DIPU_TEST_STORE_PORT";

/// In a rank: the runtime on the Cambricon plugin and its process group
/// (device 0 of the rank's own fake), through the parent's TCP store.
fn child_group(rank: usize, world: usize, timeout: Duration) -> (Arc<Runtime>, ProcessGroup) {
    let port: u16 = std::env::var(PORT).unwrap().parse().unwrap();
    let options = RuntimeOptions::default().with_vendor(VendorSpec::Path(common::plugin_path()));
    let rt = Runtime::new(options).expect("the runtime on the Cambricon vendor");
    let store: Arc<dyn Store> =
        Arc::new(TcpStore::connect("127.0.0.1", port, Duration::from_secs(20)).unwrap());
    let options = Options::default().with_timeout(timeout);
    let pg = ProcessGroup::new(
        Arc::clone(&rt),
        store,
        rank as i32,
        world as i32,
        0,
        options,
    )
    .unwrap();
    (rt, pg)
}

/// In the test: the store, a fake Neuware, and `world` ranks of test
/// `name` on them (the first two are kept alive for the ranks' life).
fn launch(name: &str, world: usize) -> (TcpStoreServer, tempfile::TempDir, Ranks) {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port().to_string();
    let home = tempfile::tempdir().expect("scratch directory");
    common::fake_neuware(home.path());
    let job = Ranks::launch(name, world, |cmd: &mut Command| {
        cmd.env("NEUWARE_HOME", home.path()).env(PORT, &port);
    });
    (server, home, job)
}

/// Element `i` reduced over `world` ranks by `op`, in rank order.
fn f64_reduced(op: ReduceOp, world: usize, i: usize) -> f64 {
    let mut acc = f64_value(0, i);
    for r in 1..world {
        let x = f64_value(r, i);
        acc = match op {
            ReduceOp::Prod => acc * x,
            ReduceOp::Min => acc.min(x),
            ReduceOp::Max => acc.max(x),
            _ => acc + x,
        };
    }
    if op == ReduceOp::Avg {
        acc / world as f64
    } else {
        acc
    }
}

/// Rank `rank`'s value at element `i`: 1 plus a multiple of 2^-40 (which
/// `f32` would round away), negative on odd elements.
fn f64_value(rank: usize, i: usize) -> f64 {
    let v = 1.0 + ((rank * 7 + i) % 13 + 1) as f64 * f64::powi(2.0, -40);
    if i % 2 == 1 {
        -v
    } else {
        v
    }
}

/// CNCL has no 64-bit float: the process group all-gathers `F64` buffers
/// and reduces them on the host. Every operator, all-reduce, reduce to a
/// root and reduce-scatter, on 3 ranks as processes, gives each rank
/// exactly the `f64` reduction in rank order (no rounding through `f32`).
#[test]
fn f64_reductions_on_cncl_are_exact() {
    const COUNT: usize = 1001;
    let name = "f64_reductions_on_cncl_are_exact";
    if let Some((rank, world)) = ranks::child() {
        let (rt, pg) = child_group(rank, world, Duration::from_secs(30));
        let stream = rt.context().current_stream(0).unwrap();
        let mine: Vec<f64> = (0..COUNT).map(|i| f64_value(rank, i)).collect();
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        let wait = Duration::from_secs(60);
        // Reduce-scatter first, so that its own refusal by the vendor (not
        // the all-reduce's) turns the host path on: rank r gets block r of
        // the reduced flat input.
        let flat: Vec<u8> = (0..COUNT * world)
            .flat_map(|i| f64_value(rank, i).to_le_bytes())
            .collect();
        for op in ReduceOp::ALL {
            let input = rt.allocate(flat.len(), stream).unwrap();
            input.copy_from_host(&flat, None).unwrap();
            let output = rt.allocate(COUNT * 8, stream).unwrap();
            let input = Buffer::from_device_buffer(&input, DataType::F64).unwrap();
            let out = Buffer::from_device_buffer(&output, DataType::F64).unwrap();
            pg.reduce_scatter_from(&out, &input, op)
                .unwrap_or_else(|e| panic!("reduce-scatter {op:?}: {e}"))
                .wait_host(wait)
                .unwrap();
            let mut bytes = vec![0u8; COUNT * 8];
            output.copy_to_host(&mut bytes, None).unwrap();
            let got: Vec<f64> = bytes
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let want: Vec<f64> = (rank * COUNT..(rank + 1) * COUNT)
                .map(|i| f64_reduced(op, world, i))
                .collect();
            assert_eq!(got, want, "rank {rank}: reduce-scatter {op:?}");
        }
        for root in [None, Some(0), Some(world as i32 - 1)] {
            for op in ReduceOp::ALL {
                let dev = rt.allocate(bytes.len(), stream).unwrap();
                dev.copy_from_host(&bytes, None).unwrap();
                let buf = Buffer::from_device_buffer(&dev, DataType::F64).unwrap();
                let work = match root {
                    None => pg.all_reduce(&buf, op),
                    Some(r) => pg.reduce(&buf, r, op),
                };
                work.unwrap_or_else(|e| panic!("{op:?} to {root:?}: {e}"))
                    .wait_host(wait)
                    .unwrap();
                let mut out = vec![0u8; bytes.len()];
                dev.copy_to_host(&mut out, None).unwrap();
                let got: Vec<f64> = out
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                let want: Vec<f64> = if root.is_none_or(|r| r as usize == rank) {
                    (0..COUNT).map(|i| f64_reduced(op, world, i)).collect()
                } else {
                    mine.clone()
                };
                assert_eq!(got, want, "rank {rank}: {op:?} to {root:?}");
            }
        }
        println!("rank {rank}: f64 ok");
        return;
    }
    let (_server, _home, mut job) = launch(name, 3);
    job.expect_success(Duration::from_secs(60), "f64 ok");
}

/// The process group over the fake CNCL, ranks as processes meeting
/// through a TCP store (the clique id passes through it): the last rank is
/// killed after the first all-reduce, and the other ranks' second
/// all-reduce fails (the group's timeout is 5 s) instead of hanging.
#[test]
fn the_process_group_fails_instead_of_hanging_when_a_rank_is_killed() {
    let name = "the_process_group_fails_instead_of_hanging_when_a_rank_is_killed";
    if let Some((rank, world)) = ranks::child() {
        let (rt, pg) = child_group(rank, world, Duration::from_secs(5));
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
            // Blocks until the parent kills it.
            loop {
                std::thread::park();
            }
        }
        let start = Instant::now();
        let err = pg
            .all_reduce(&buf, ReduceOp::Sum)
            .and_then(|w| w.wait_host(wait))
            .expect_err("a rank is dead: the all-reduce must fail");
        println!("rank {rank}: {err} (after {:?})", start.elapsed());
        assert!(pg.failure().is_some(), "the group is aborted");
        println!("rank {rank}: failed cleanly");
        return;
    }
    let (_server, _home, mut job) = launch(name, 3);
    job.await_file("victim ready", Duration::from_secs(60));
    job.kill(2);
    // A hang guard, far beyond the group's 5 s timeout.
    job.expect_success(Duration::from_secs(120), "failed cleanly");
}
