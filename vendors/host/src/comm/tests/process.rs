//! Ranks as processes: this test binary runs again as a child that joins a
//! communicator whose unique id it gets hex-encoded in an environment
//! variable.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dipu_deviceapi::{DataType, DeviceApi, ReduceOp, StreamHandle};

use super::collectives::large_cases;
use super::data::{input, reduce};
use super::{assert_no_segment, vendor, Rank, ENV_BAD_PROBE, ENV_BAD_SEND, ENV_NO_ARENA};
use crate::comm::direct::ENV_COMM_DIRECT;

/// What the child does (`allreduce`, `every`, `badsend` or `hang`), its
/// rank, world and id.
const ROLE: &str = "DIPU_HOST_COMM_TEST_ROLE";
/// `direct`, `mapped` (direct, every peer's arena mapped), `unmapped`
/// (direct, no peer's arena mapped) or `staged`: how the child's
/// collectives must run.
const EXPECT: &str = "DIPU_HOST_COMM_TEST_EXPECT";
const RANK: &str = "DIPU_HOST_COMM_TEST_RANK";
const WORLD: &str = "DIPU_HOST_COMM_TEST_WORLD";
const ID: &str = "DIPU_HOST_COMM_TEST_ID";

/// Element counts the processes all-reduce: one element, odd, many chunks.
const COUNTS: [usize; 3] = [1, 1001, 3 * (512 << 10) / 4 + 7];
/// The count of the collective a killed child is in the middle of.
const BIG: usize = 4 << 20;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn spawn(role: &str, rank: usize, world: usize, id: &[u8]) -> Child {
    spawn_with(role, (rank, world, id), &[])
}

/// [`spawn`] with more environment variables.
fn spawn_with(role: &str, (rank, world, id): (usize, usize, &[u8]), env: &[(&str, &str)]) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "comm::tests::process::child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(RANK, rank.to_string())
        .env(WORLD, world.to_string())
        .env(ID, hex(id))
        .env("DIPU_HOST_COMM_TIMEOUT", "30")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the test binary")
}

/// How long a child may run before it counts as hung: far beyond what a
/// slow machine takes, and beyond the children's 30 s communicator timeout.
const HANG: Duration = Duration::from_secs(120);

/// Waits for `child` to exit (its standard output, read to the end,
/// closing), at most `limit`; kills it if it takes longer.
fn finish(mut child: Child, limit: Duration) -> bool {
    let mut stdout = child.stdout.take().expect("piped stdout");
    let (closed, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        let _ = closed.send(());
    });
    if exited.recv_timeout(limit).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        return false;
    }
    child.wait().expect("wait for a child").success()
}

/// Waits for every child (see [`finish`]) before asserting that each
/// succeeded: a failure leaves none running.
fn finish_all(children: Vec<Child>) {
    let ok: Vec<bool> = children.into_iter().map(|c| finish(c, HANG)).collect();
    for (rank, ok) in ok.into_iter().enumerate() {
        assert!(ok, "child rank {rank} failed");
    }
}

/// A child killed and reaped when dropped, a failed test's too.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The all-reduce every process runs with its rank's data.
fn all_reduce(r: &Rank<'_>, count: usize) -> Vec<u8> {
    let buf = r.upload(&input(DataType::F32, r.rank, count));
    // SAFETY: a live buffer of `count` f32, stream and communicator.
    unsafe {
        r.host
            .all_reduce(
                buf,
                buf,
                count,
                DataType::F32,
                ReduceOp::Sum,
                r.comm,
                StreamHandle::DEFAULT,
            )
            .expect("all_reduce");
    }
    let out = r.download(buf, count * 4);
    r.free(buf);
    out
}

/// Whether Yama may forbid reading a sibling process (then a communicator
/// asked to read its peers directly is staged instead).
fn cross_memory_restricted() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").is_ok_and(|s| s.trim() != "0")
}

/// Checks the child's collectives ran as [`EXPECT`] says; `true` if they
/// read the peers directly.
fn check_form(r: &Rank<'_>) -> bool {
    let direct = r.direct() == Some(true);
    match std::env::var(EXPECT).as_deref() {
        Ok("direct") if !direct => assert!(
            cross_memory_restricted(),
            "rank {} staged its collectives though it may read its peers",
            r.rank
        ),
        Ok("mapped") if direct => assert_eq!(
            r.mapped_peers(),
            r.world - 1,
            "rank {} did not map every peer's device memory",
            r.rank
        ),
        Ok("unmapped") if direct => assert_eq!(r.mapped_peers(), 0),
        Ok("mapped" | "unmapped") => assert!(
            cross_memory_restricted(),
            "rank {} staged its collectives though it may read its peers",
            r.rank
        ),
        Ok("staged") => assert!(!direct, "rank {} read its peers directly", r.rank),
        _ => {}
    }
    direct
}

fn expected(world: usize, count: usize) -> Vec<u8> {
    let terms: Vec<_> = (0..world).map(|p| input(DataType::F32, p, count)).collect();
    reduce(DataType::F32, ReduceOp::Sum, &terms)
}

/// The child's side, run by the tests below in a process of its own.
#[test]
#[ignore = "a child rank: the process tests start it with its role and rank in the environment"]
fn child() {
    let role = std::env::var(ROLE).expect("run by a process test, which sets the role");
    let var = |name| std::env::var(name).expect(name);
    let rank: usize = var(RANK).parse().unwrap();
    let world: usize = var(WORLD).parse().unwrap();
    let id = unhex(&var(ID));
    let host = crate::HostVendor::from_env().expect("vendor");
    let comm = host
        .comm_init_rank(world as i32, &id, rank as i32)
        .expect("init");
    let r = Rank {
        host: &host,
        comm,
        rank,
        world,
    };
    match role.as_str() {
        "allreduce" => {
            for count in COUNTS {
                assert!(
                    all_reduce(&r, count) == expected(world, count),
                    "count {count}"
                );
            }
            check_form(&r);
            r.sync();
            // SAFETY: a live communicator, destroyed once.
            unsafe { host.comm_destroy(comm).expect("destroy") };
        }
        "every" => {
            large_cases(&r);
            for count in COUNTS {
                assert!(all_reduce(&r, count) == expected(world, count));
            }
            check_form(&r);
            r.sync();
            // SAFETY: a live communicator, destroyed once.
            unsafe { host.comm_destroy(comm).expect("destroy") };
        }
        "badsend" => {
            let buf = r.upload(&vec![1u8; BIG * 4]);
            // SAFETY: a live buffer, stream and communicator.
            unsafe {
                host.all_reduce(
                    buf,
                    buf,
                    BIG,
                    DataType::F32,
                    ReduceOp::Sum,
                    comm,
                    StreamHandle::DEFAULT,
                )
                .expect("all_reduce");
                host.stream_synchronize(StreamHandle::DEFAULT)
                    .expect("the stream is not poisoned");
                if check_form(&r) {
                    // Rank 0 cannot read rank 1's buffer; rank 1 learns
                    // that rank 0 gave up, or finds rank 0's buffer freed
                    // (rank 0 may be done with it by then).
                    let e = host.comm_async_error(comm).unwrap_err();
                    let m = e.message();
                    if rank == 0 {
                        assert!(m.contains("of rank 1's send buffer"), "{e}");
                        assert!(m.contains("process_vm_readv/writev failed: EFAULT"), "{e}");
                    } else {
                        assert!(
                            m.contains("rank 0 failed in an operation")
                                || m.contains("of rank 0's send buffer"),
                            "{e}"
                        );
                    }
                }
                host.comm_destroy(comm).expect("destroy");
            }
            r.free(buf);
        }
        "hang" => {
            assert!(all_reduce(&r, 1001) == expected(world, 1001));
            let buf = r.upload(&vec![0u8; BIG * 4]);
            // SAFETY: a live buffer, stream and communicator.
            unsafe {
                host.all_reduce(
                    buf,
                    buf,
                    BIG,
                    DataType::F32,
                    ReduceOp::Sum,
                    comm,
                    StreamHandle::DEFAULT,
                )
                .expect("all_reduce");
            }
            println!("ready");
            // Blocks until the parent kills it.
            loop {
                std::thread::park();
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// Two processes all-reduce through the shared segment.
#[test]
fn two_processes_all_reduce() {
    let id = vendor(1).comm_get_unique_id().unwrap();
    let children: Vec<Child> = (0..2)
        .map(|rank| spawn("allreduce", rank, 2, &id))
        .collect();
    finish_all(children);
    assert_no_segment(&id);
}

/// Runs `world` children as `role`, `env(rank)` added to each child's
/// environment; all must succeed.
fn run_children(
    role: &str,
    world: usize,
    env: impl Fn(usize) -> Vec<(&'static str, &'static str)>,
) {
    let id = vendor(1).comm_get_unique_id().unwrap();
    let children: Vec<Child> = (0..world)
        .map(|rank| spawn_with(role, (rank, world, &id), &env(rank)))
        .collect();
    finish_all(children);
    assert_no_segment(&id);
}

/// Processes stage their collectives unless asked to read each other.
#[test]
fn processes_read_each_other_by_default() {
    run_children("every", 2, |_| vec![(EXPECT, "mapped")]);
}

/// Processes map each other's device memory when asked explicitly too:
/// every kind, uneven blocks (three ranks).
#[test]
fn three_processes_read_each_other_when_asked() {
    run_children("every", 3, |_| {
        vec![(ENV_COMM_DIRECT, "1"), (EXPECT, "mapped")]
    });
}

/// Kept to the ranks of one process, processes stage their collectives.
#[test]
fn processes_stage_when_reads_are_kept_local() {
    run_children("every", 2, |_| {
        vec![(ENV_COMM_DIRECT, "local"), (EXPECT, "staged")]
    });
}

/// Buffers outside a device arena are read with process_vm_readv: no rank
/// has an arena here, and every collective still reads directly.
#[test]
fn buffers_outside_arenas_are_read_with_process_vm_readv() {
    run_children("every", 2, |_| {
        vec![(ENV_NO_ARENA, "1"), (EXPECT, "unmapped")]
    });
}

/// A rank whose probe word cannot be read keeps the communicator staged.
#[test]
fn a_failed_probe_keeps_the_collectives_staged() {
    run_children("every", 2, |rank| {
        let mut env = vec![(ENV_COMM_DIRECT, "1"), (EXPECT, "staged")];
        if rank == 1 {
            env.push((ENV_BAD_PROBE, "1"));
        }
        env
    });
}

/// A peer buffer that cannot be read (a rank publishes an unmapped
/// address) fails the communicator on every rank with the reason; no
/// process crashes.
#[test]
fn an_unreadable_peer_buffer_fails_the_communicator() {
    run_children("badsend", 2, |rank| {
        let mut env = vec![(ENV_COMM_DIRECT, "1"), (EXPECT, "direct")];
        if rank == 1 {
            env.push((ENV_BAD_SEND, "1"));
        }
        env
    });
}

/// A peer process killed in the middle of a collective: this rank's
/// operation fails (before its timeout) with an error naming it.
#[test]
fn a_killed_peer_process_fails_the_wait() {
    let host = vendor(1);
    let id = host.comm_get_unique_id().unwrap();
    let mut child = KillOnDrop(spawn("hang", 1, 2, &id));
    let comm = host.comm_init_rank(2, &id, 0).unwrap();
    let r = Rank {
        host: &host,
        comm,
        rank: 0,
        world: 2,
    };
    assert!(all_reduce(&r, 1001) == expected(2, 1001));
    let mut stdout = BufReader::new(child.0.stdout.take().expect("piped"));
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        let n = stdout.read_line(&mut line).expect("child output");
        assert!(n > 0, "the child ended before it was ready");
    }
    let pid = child.0.id();
    child.0.kill().expect("SIGKILL");
    let buf = r.upload(&vec![0u8; BIG * 4]);
    // SAFETY: a live buffer, stream and communicator.
    unsafe {
        host.all_reduce(
            buf,
            buf,
            BIG,
            DataType::F32,
            ReduceOp::Sum,
            comm,
            StreamHandle::DEFAULT,
        )
        .unwrap();
        host.stream_synchronize(StreamHandle::DEFAULT).unwrap();
        // The peer's exit ended the wait, not the 30 s timeout: the error
        // says so.
        let e = host.comm_async_error(comm).unwrap_err();
        assert!(
            e.message().contains(&format!(
                "rank 1 (pid {pid}) exited while rank 0 waited in all_reduce"
            )),
            "{e}"
        );
        host.comm_destroy(comm).unwrap();
    }
    drop(child);
    r.free(buf);
    assert_no_segment(&id);
}
