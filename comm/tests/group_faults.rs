//! Failures of the process group on thread ranks: a missing rank times out
//! instead of hanging, a wrong world size and a mismatched communicator id
//! fail cleanly, bad arguments are errors, and an aborted group says why.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use dipu_comm::store::{HashStore, PrefixStore, Store};
use dipu_comm::{Options, ProcessGroup};
use dipu_deviceapi::{DataType, ErrorKind, ReduceOp};

fn short(ms: u64) -> Options {
    options().with_timeout(Duration::from_millis(ms))
}

/// Runs `f(rank)` on `n` threads, rank r current on device r.
fn on_threads<R: Send>(n: i32, f: impl Fn(i32) -> R + Sync) -> Vec<R> {
    let rt = runtime();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (rt, f) = (Arc::clone(&rt), &f);
                s.spawn(move || {
                    rt.set_device(rank).unwrap();
                    let stream = rt.context().new_stream(rank, 0).unwrap();
                    rt.context().set_current_stream(stream);
                    f(rank)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `rank` of a `world`-rank group (0.5 s timeout) all-reduces and
/// waits; returns the error it must get.
fn failing_all_reduce(store: Arc<dyn Store>, rank: i32, world: i32) -> dipu_deviceapi::Error {
    let pg = ProcessGroup::new(runtime(), store, rank, world, rank, short(500)).unwrap();
    let (_dev, buf) = upload(&pg, DataType::F32, &[1.0; 8]);
    pg.all_reduce(&buf, ReduceOp::Sum)
        .and_then(|w| w.wait_host(Duration::from_secs(30)))
        .expect_err("the all-reduce must fail")
}

#[test]
fn a_missing_rank_times_out_instead_of_hanging() {
    let store: Arc<dyn Store> = Arc::new(HashStore::new());
    let rt = runtime();
    let pg = ProcessGroup::new(Arc::clone(&rt), store, 0, 2, 0, short(300)).unwrap();
    let (_dev, buf) = upload(&pg, DataType::F32, &[1.0; 16]);
    let start = Instant::now();
    let work = pg.all_reduce(&buf, ReduceOp::Sum).unwrap();
    let err = work.wait_host(Duration::from_secs(60)).unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("all_reduce #0") && text.contains("rank 0 of 2"),
        "{text}"
    );
    assert!(text.contains("timeout 0.300 s"), "{text}");
    // The group's timeout, not before its time.
    assert!(took >= Duration::from_millis(300), "failed after {took:?}");
    assert!(work.is_completed() && !work.is_success());
    // The group is now aborted: every later call returns that failure at once.
    let again = pg.all_reduce(&buf, ReduceOp::Sum).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Timeout);
    assert!(again.to_string().contains("aborted"), "{again}");
    assert!(pg.failure().is_some());
}

#[test]
fn the_watchdog_fails_work_nobody_waits_for() {
    let store: Arc<dyn Store> = Arc::new(HashStore::new());
    let pg = ProcessGroup::new(runtime(), store, 0, 2, 0, short(200)).unwrap();
    let (_dev, buf) = upload(&pg, DataType::I32, &[1.0; 4]);
    let work = pg.broadcast(&buf, 1).unwrap();
    // Nothing to block on without waiting for the work (which would fail
    // it itself): look at it until it is failed. The limit only tells a
    // hang from a slow machine: it is 600 times the group's timeout.
    let start = Instant::now();
    while !work.is_completed() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the watchdog never failed the work (a hang)"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let err = work.error().expect("a timed out work has an error");
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.to_string().contains("broadcast #0"), "{err}");
}

#[test]
fn wrong_world_size_fails_cleanly() {
    let store: Arc<dyn Store> = Arc::new(HashStore::with_timeout(Duration::from_secs(10)));
    let results = on_threads(2, |rank| {
        let world = if rank == 0 { 2 } else { 3 };
        failing_all_reduce(Arc::clone(&store), rank, world)
    });
    for (rank, err) in results.iter().enumerate() {
        assert!(
            matches!(
                err.kind(),
                ErrorKind::InvalidArgument | ErrorKind::Timeout | ErrorKind::VendorError
            ),
            "rank {rank}: {err}"
        );
    }
    let all = format!("{} | {}", results[0], results[1]);
    assert!(
        all.contains("world size"),
        "one rank names the world size mismatch: {all}"
    );
}

/// A real id of another communicator: a fresh one from the vendor, or, on
/// a vendor without collectives, the host-staged record rank 0 of another
/// 2-rank group publishes (no rank 1 ever joins it).
fn another_communicators_id() -> Vec<u8> {
    match runtime().api().comm_get_unique_id() {
        Ok(id) => id,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            let store: Arc<dyn Store> = Arc::new(HashStore::new());
            let pg = ProcessGroup::new(runtime(), Arc::clone(&store), 0, 2, 0, quick()).unwrap();
            let (_dev, buf) = upload(&pg, DataType::F32, &[1.0]);
            // Pending until the group is dropped (which aborts it).
            let _work = pg.all_reduce(&buf, ReduceOp::Sum).unwrap();
            store.get("dicl/comm/all").unwrap()
        }
    }
}

#[test]
fn a_mismatched_communicator_id_fails_cleanly() {
    // Rank 1 reads its id from a store where a foreign id waits: garbage of
    // the right size, then a real id of another communicator.
    let garbage = vec![0x5a_u8; runtime().api().comm_unique_id_size()];
    let other = another_communicators_id();
    for (what, id) in [("garbage", garbage), ("another communicator's", other)] {
        let shared: Arc<dyn Store> = Arc::new(HashStore::with_timeout(Duration::from_secs(10)));
        let results = on_threads(2, |rank| {
            let store: Arc<dyn Store> = if rank == 0 {
                Arc::clone(&shared)
            } else {
                let fake: Arc<dyn Store> = Arc::new(HashStore::new());
                fake.set("dicl/comm/all", &id).unwrap();
                fake
            };
            failing_all_reduce(store, rank, 2)
        });
        if what == "garbage" {
            assert_eq!(
                results[1].kind(),
                ErrorKind::InvalidArgument,
                "{}",
                results[1]
            );
        } else {
            assert_eq!(results[1].kind(), ErrorKind::Timeout, "{}", results[1]);
        }
        assert_eq!(results[0].kind(), ErrorKind::Timeout, "{}", results[0]);
    }
}

#[test]
fn bad_arguments_are_errors() {
    let rt = runtime();
    let store: Arc<dyn Store> = Arc::new(HashStore::new());
    let err = ProcessGroup::new(Arc::clone(&rt), Arc::clone(&store), 2, 2, 0, quick()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let err = ProcessGroup::new(Arc::clone(&rt), Arc::clone(&store), 0, 2, 9, quick()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidDevice, "{err}");

    let pg = ProcessGroup::new(Arc::clone(&rt), Arc::clone(&store), 0, 2, 0, quick()).unwrap();
    let (_d, buf) = upload(&pg, DataType::F32, &[1.0; 6]);
    let (_d2, other) = upload(&pg, DataType::I32, &[1.0; 6]);
    let check = |r: dipu_deviceapi::Result<dipu_comm::Work>, needle: &str| {
        let err = r.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains(needle), "`{needle}` not in: {err}");
    };
    check(pg.broadcast(&buf, 2), "root 2");
    check(pg.send(&buf, 0, 0), "itself");
    check(pg.all_gather(&[buf], &buf), "1 buffers for a group of 2");
    check(pg.all_gather_into(&buf, &other), "element types differ");
    check(
        pg.reduce_scatter_from(&buf, &buf, ReduceOp::Sum),
        "world size x block",
    );
    check(pg.all_to_all(&buf, &buf, Some(&[1]), None), "1 splits");
    check(
        pg.all_to_all(&buf, &buf, Some(&[4, 4]), None),
        "add up to more",
    );
    check(pg.gather(&[buf], &buf, 1), "only the root");
    // A buffer on another device than the group's.
    rt.set_device(1).unwrap();
    let stream = rt.context().current_stream(1).unwrap();
    let dev1 = rt.allocate(16, stream).unwrap();
    rt.set_device(0).unwrap();
    let on1 = dipu_comm::Buffer::from_device_buffer(&dev1, DataType::F32).unwrap();
    check(
        pg.all_reduce(&on1, ReduceOp::Sum),
        "on device 1 but the group runs on device 0",
    );
    assert!(
        pg.failure().is_none(),
        "argument errors do not abort the group"
    );
}

#[test]
fn a_prefix_store_separates_groups_on_one_store() {
    // Two groups of the same 2 ranks share one store under different prefixes.
    let base: Arc<dyn Store> = Arc::new(HashStore::with_timeout(Duration::from_secs(10)));
    on_threads(2, |rank| {
        let groups: Vec<ProcessGroup> = ["a", "b"]
            .iter()
            .map(|p| {
                let store: Arc<dyn Store> = Arc::new(PrefixStore::new(*p, Arc::clone(&base)));
                ProcessGroup::new(runtime(), store, rank, 2, rank, quick()).unwrap()
            })
            .collect();
        for (k, pg) in groups.iter().enumerate() {
            let (dev, buf) = upload(pg, DataType::F64, &[f64::from(rank) + k as f64; 3]);
            pg.all_reduce(&buf, ReduceOp::Sum)
                .unwrap()
                .wait_host(Duration::from_secs(20))
                .unwrap();
            assert_eq!(download(&dev, &buf), vec![1.0 + 2.0 * k as f64; 3]);
        }
    });
}

#[test]
fn dropping_a_group_with_pending_work_aborts_instead_of_hanging() {
    let store: Arc<dyn Store> = Arc::new(HashStore::new());
    // A timeout far longer than the test: the drop ends the wait for the
    // missing rank.
    let pg = ProcessGroup::new(runtime(), store, 0, 2, 0, short(30_000)).unwrap();
    let (_dev, buf) = upload(&pg, DataType::F32, &[1.0; 8]);
    let work = pg.all_reduce(&buf, ReduceOp::Sum).unwrap();
    drop(pg);
    let err = work.wait_host(Duration::from_secs(10)).unwrap_err();
    assert!(
        err.to_string().contains("dropped with 1 operation"),
        "{err}"
    );
}
