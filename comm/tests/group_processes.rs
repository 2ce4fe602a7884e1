//! The process group with ranks as separate processes (the host vendor's
//! collectives go through POSIX shared memory; the ranks meet through a
//! TCP store): collectives on 2 and 4 processes, and a rank killed in the
//! middle of a collective making the others fail instead of hanging.
//!
//! The test binary is its own child: the ignored `child_rank` runs the
//! scenario `DIPU_COMM_TEST_CHILD` names.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use dipu_comm::store::{Store, TcpStore, TcpStoreServer};
use dipu_comm::{Buffer, ProcessGroup};
use dipu_deviceapi::{DataType, ErrorKind, ReduceOp};

const CHILD: &str = "DIPU_COMM_TEST_CHILD";

/// How long a rank may run before the parent calls it a hang: far beyond
/// the scenarios' own timeouts (10 s and 30 s), never reached by a rank
/// that is merely slow.
const HANG: Duration = Duration::from_secs(300);

fn spawn(scenario: &str, rank: i32, world: i32, port: u16) -> Rank {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_rank",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, scenario)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Rank(child)
}

/// A child rank, killed and reaped when dropped: a test that fails leaves
/// no rank running.
struct Rank(Child);

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `rank` to exit (its stdout closing), reading what it printed;
/// past `limit` (a hang guard, far beyond any timeout of the scenarios) it
/// fails, and the drop kills the rank.
fn finish(rank: &mut Rank, limit: Duration, what: &str) -> (bool, String) {
    let mut stdout = rank.0.stdout.take().expect("a rank's stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let out = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} still running after {limit:?}: a hang"));
    (rank.0.wait().unwrap().success(), out)
}

#[test]
fn collectives_across_2_and_4_processes() {
    for world in [2, 4] {
        let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
        let mut children: Vec<Rank> = (0..world)
            .map(|r| spawn("collectives", r, world, server.port()))
            .collect();
        for (rank, child) in children.iter_mut().enumerate() {
            let (ok, out) = finish(child, HANG, &format!("rank {rank} of {world}"));
            assert!(ok, "rank {rank} of {world} failed; its output:\n{out}");
            assert!(out.contains("collectives ok"), "{out}");
        }
    }
}

#[test]
fn a_killed_rank_fails_the_others_instead_of_hanging() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let mut survivor = spawn("survivor", 0, 2, server.port());
    let mut victim = spawn("victim", 1, 2, server.port());
    // The victim says when it is inside the second collective's rendezvous.
    let mut lines = BufReader::new(victim.0.stdout.take().unwrap()).lines();
    let ready = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("victim ready")));
    assert!(ready.is_some(), "the victim never got ready");
    drop(victim);
    let (ok, out) = finish(&mut survivor, HANG, "the surviving rank");
    assert!(
        ok,
        "the survivor did not fail as documented; its output:\n{out}"
    );
    assert!(out.contains("survivor failed cleanly"), "{out}");
}

/// The body of a child rank: run only by the tests above, in the processes
/// they spawn.
#[test]
#[ignore = "the body of the child processes the other tests of this file spawn; not a test by itself"]
fn child_rank() {
    let scenario = std::env::var(CHILD).unwrap_or_else(|_| {
        panic!("{CHILD} is not set: child_rank runs in processes the other tests spawn")
    });
    let var = |k: &str| std::env::var(k).unwrap().parse::<i64>().unwrap();
    let (rank, world, port) = (
        var("RANK") as i32,
        var("WORLD_SIZE") as i32,
        var("MASTER_PORT") as u16,
    );
    let rt = common::runtime();
    let store: Arc<dyn Store> =
        Arc::new(TcpStore::connect("127.0.0.1", port, Duration::from_secs(20)).unwrap());
    let timeout = if scenario == "survivor" { 10 } else { 30 };
    let options = common::options().with_timeout(Duration::from_secs(timeout));
    let pg = ProcessGroup::new(Arc::clone(&rt), store, rank, world, 0, options).unwrap();
    let upload = |dtype: DataType, values: &[f64]| {
        let bytes: Vec<u8> = match dtype {
            DataType::F32 => values
                .iter()
                .flat_map(|v| (*v as f32).to_le_bytes())
                .collect(),
            DataType::I64 => values
                .iter()
                .flat_map(|v| (*v as i64).to_le_bytes())
                .collect(),
            other => panic!("{other:?}"),
        };
        let stream = rt.context().current_stream(0).unwrap();
        let dev = rt.allocate(bytes.len(), stream).unwrap();
        dev.copy_from_host(&bytes, None).unwrap();
        let buf = Buffer::from_device_buffer(&dev, dtype).unwrap();
        (dev, buf)
    };
    let read_f32 = |dev: &dipu_runtime::DeviceBuffer| {
        let mut bytes = vec![0u8; dev.len()];
        dev.copy_to_host(&mut bytes, None).unwrap();
        bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
            .collect::<Vec<_>>()
    };
    let wait = Duration::from_secs(60);
    match scenario.as_str() {
        "collectives" => {
            let n = 300_000;
            let mine: Vec<f64> = (0..n)
                .map(|i| f64::from(rank + 1) * (i % 7) as f64)
                .collect();
            let (dev, buf) = upload(DataType::F32, &mine);
            pg.all_reduce(&buf, ReduceOp::Sum)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            let total = f64::from(world * (world + 1) / 2);
            let got = read_f32(&dev);
            assert!(
                (0..n).all(|i| got[i] == total * (i % 7) as f64),
                "all_reduce sum"
            );
            pg.all_reduce(&buf, ReduceOp::Avg)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            let got = read_f32(&dev);
            assert!(
                (0..n).all(|i| got[i] == total * (i % 7) as f64),
                "all_reduce avg of equal values"
            );

            let (dev, buf) = upload(DataType::I64, &[f64::from(rank); 5]);
            pg.broadcast(&buf, world - 1)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            let mut bytes = vec![0u8; 40];
            dev.copy_to_host(&mut bytes, None).unwrap();
            assert!(bytes
                .chunks_exact(8)
                .all(|b| i64::from_le_bytes(b.try_into().unwrap()) == i64::from(world - 1)));

            let mine: Vec<f64> = (0..world)
                .flat_map(|to| (0..3).map(move |i| f64::from(rank * 100 + to * 10 + i)))
                .collect();
            let (_din, input) = upload(DataType::F32, &mine);
            let (dout, output) = upload(DataType::F32, &vec![0.0; mine.len()]);
            pg.all_to_all(&output, &input, None, None)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            let want: Vec<f64> = (0..world)
                .flat_map(|from| (0..3).map(move |i| f64::from(from * 100 + rank * 10 + i)))
                .collect();
            assert_eq!(read_f32(&dout), want, "all_to_all");

            let (_ds, send) = upload(DataType::F32, &[f64::from(rank); 1000]);
            let (dr, recv) = upload(DataType::F32, &[0.0; 1000]);
            let (to, from) = ((rank + 1) % world, (rank + world - 1) % world);
            pg.start_coalescing().unwrap();
            pg.send(&send, to, 0).unwrap();
            pg.recv(&recv, from, 0).unwrap();
            pg.end_coalescing().unwrap().wait_host(wait).unwrap();
            assert_eq!(read_f32(&dr), vec![f64::from(from); 1000], "ring exchange");
            common::all_reduce_every_type_and_op(&pg, 257);
            flat_and_rooted_collectives(&pg);
            pg.barrier().unwrap();
            println!("collectives ok");
        }
        "victim" => {
            let (_dev, buf) = upload(DataType::F32, &[1.0; 1024]);
            pg.all_reduce(&buf, ReduceOp::Sum)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            println!("victim ready");
            // Blocks until the parent kills it.
            loop {
                std::thread::park();
            }
        }
        "survivor" => {
            let (_dev, buf) = upload(DataType::F32, &[1.0; 1024]);
            pg.all_reduce(&buf, ReduceOp::Sum)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            let start = Instant::now();
            let err = pg
                .all_reduce(&buf, ReduceOp::Sum)
                .and_then(|w| w.wait_host(wait))
                .expect_err("the peer is dead: the all-reduce must fail");
            eprintln!("survivor: {err} (after {:?})", start.elapsed());
            assert!(
                matches!(err.kind(), ErrorKind::VendorError | ErrorKind::Timeout),
                "{err}"
            );
            assert!(err.to_string().contains("all_reduce #1"), "{err}");
            assert!(pg.failure().is_some(), "the group is aborted");
            println!("survivor failed cleanly");
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// all_gather_into, reduce_scatter_from, gather and scatter on a process
/// rank, checked against values every rank can compute.
fn flat_and_rooted_collectives(pg: &ProcessGroup) {
    use common::{download, upload, value, zeros};
    let (rank, world) = (pg.rank(), pg.world_size());
    let n = world as usize;
    let wait = Duration::from_secs(60);

    let mine: Vec<f64> = (0..9).map(|i| value(rank, i)).collect();
    let (_di, input) = upload(pg, DataType::I32, &mine);
    let (dout, output) = zeros(pg, DataType::I32, 9 * n);
    pg.all_gather_into(&output, &input)
        .unwrap()
        .wait_host(wait)
        .unwrap();
    let want: Vec<f64> = (0..world)
        .flat_map(|r| (0..9).map(move |i| value(r, i)))
        .collect();
    assert_eq!(download(&dout, &output), want, "all_gather_into");

    let flat: Vec<f64> = (0..4 * n).map(|i| value(rank, i)).collect();
    let (_di, input) = upload(pg, DataType::F64, &flat);
    let (dout, output) = zeros(pg, DataType::F64, 4);
    pg.reduce_scatter_from(&output, &input, ReduceOp::Sum)
        .unwrap()
        .wait_host(wait)
        .unwrap();
    let want: Vec<f64> = (0..4)
        .map(|i| common::reference(ReduceOp::Sum, DataType::F64, world, rank as usize * 4 + i))
        .collect();
    assert_eq!(download(&dout, &output), want, "reduce_scatter_from");

    let root = world - 1;
    let (_di, input) = upload(pg, DataType::U8, &[f64::from(rank + 1); 5]);
    let outs: Vec<_> = if rank == root {
        (0..n).map(|_| zeros(pg, DataType::U8, 5)).collect()
    } else {
        vec![]
    };
    let bufs: Vec<Buffer> = outs.iter().map(|(_, b)| *b).collect();
    pg.gather(&bufs, &input, root)
        .unwrap()
        .wait_host(wait)
        .unwrap();
    for (r, (dev, buf)) in outs.iter().enumerate() {
        assert_eq!(
            download(dev, buf),
            vec![r as f64 + 1.0; 5],
            "gather block {r}"
        );
    }

    let ins: Vec<_> = if rank == root {
        (0..world)
            .map(|r| upload(pg, DataType::I16, &[f64::from(10 * r); 3]))
            .collect()
    } else {
        vec![]
    };
    let bufs: Vec<Buffer> = ins.iter().map(|(_, b)| *b).collect();
    let (dout, output) = zeros(pg, DataType::I16, 3);
    pg.scatter(&output, &bufs, root)
        .unwrap()
        .wait_host(wait)
        .unwrap();
    assert_eq!(
        download(&dout, &output),
        vec![f64::from(10 * rank); 3],
        "scatter"
    );
}
