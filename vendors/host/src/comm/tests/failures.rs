//! Wrong use and failures: errors say what happened, nothing hangs, the
//! stream's sticky error stays clean, and /dev/shm is left empty.

use std::time::{Duration, Instant};

use dipu_deviceapi::{CommHandle, DataType, DeviceApi, ErrorKind, ReduceOp, StreamHandle};

use super::{assert_no_segment, vendor, Rank};
use crate::{HostConfig, HostVendor};

const S: StreamHandle = StreamHandle::DEFAULT;

#[test]
fn init_rejects_bad_arguments() {
    let host = vendor(1);
    let id = host.comm_get_unique_id().unwrap();
    assert_eq!(host.comm_unique_id_size(), 128);
    assert_eq!(id.len(), 128);
    let cases: [(i32, &[u8], i32, &str); 5] = [
        (65, &id, 0, "1 to 64 ranks, not 65"),
        (0, &id, 0, "1 to 64 ranks, not 0"),
        (2, &id, 2, "rank 2 is out of range for world size 2"),
        (2, &id[..100], 0, "128 bytes, not 100"),
        (2, &[7u8; 128], 0, "bad magic"),
    ];
    for (world, id, rank, want) in cases {
        let e = host.comm_init_rank(world, id, rank).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains(want), "{e}");
    }
    assert_no_segment(&id);
}

#[test]
fn world_size_mismatch_and_double_join_are_errors() {
    let host = vendor(2);
    let id = host.comm_get_unique_id().unwrap();
    let comm = host.comm_init_rank(2, &id, 0).unwrap();
    let e = host.comm_init_rank(3, &id, 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message()
            .contains("world size mismatch: rank 1 was given 3, the communicator has 2"),
        "{e}"
    );
    let e = host.comm_init_rank(2, &id, 0).unwrap_err();
    assert!(e.message().contains("rank 0 has already joined"), "{e}");
    // The missing rank never comes: abort removes the name.
    // SAFETY: a live communicator, aborted once.
    unsafe { host.comm_abort(comm).unwrap() };
    assert_no_segment(&id);
}

#[test]
fn issue_time_errors() {
    super::with_ranks(2, super::Mode::SharedVendor, |r| {
        let buf = r.upload(&[0u8; 64]);
        let (c, me) = (r.comm, r.rank);
        // SAFETY: a live buffer, stream and communicator.
        unsafe {
            let e = r
                .host
                .all_reduce(buf, buf, 4, DataType::F32, ReduceOp::Avg, c, S)
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            assert!(e.message().contains("Sum followed by a division"), "{e}");
            let e = r
                .host
                .broadcast(buf, buf, 4, DataType::F32, 2, c, S)
                .unwrap_err();
            assert!(e.message().contains("root 2 is not a rank"), "{e}");
            let e = r
                .host
                .all_gather(buf, buf, 9, DataType::F32, c, S)
                .unwrap_err();
            assert!(e.message().contains("receive buffer"), "{e}");
            let unknown = CommHandle::from_raw(0xdead);
            let e = r
                .host
                .all_reduce(buf, buf, 4, DataType::F32, ReduceOp::Sum, unknown, S);
            assert!(e.unwrap_err().message().contains("unknown communicator"));
            // The other rank's device: the stream is not on the comm's device.
            r.host.set_device(1 - me as i32).unwrap();
            let e = r
                .host
                .all_reduce(buf, buf, 4, DataType::F32, ReduceOp::Sum, c, S);
            assert!(e
                .unwrap_err()
                .message()
                .contains("where the communicator was created"));
            r.host.set_device(me as i32).unwrap();
            let e = r.host.group_end().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(
                e.message().contains("without a matching group_start"),
                "{e}"
            );
        }
        r.free(buf);
    });
}

/// Ranks disagreeing on the collective both fail with a message naming
/// both operations; the stream's sticky error stays clean; later calls
/// fail at once.
#[test]
fn mismatched_collectives_fail_on_every_rank() {
    let host = vendor(2);
    let id = host.comm_get_unique_id().unwrap();
    let errors: Vec<String> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let (host, id) = (&host, &id);
                scope.spawn(move || {
                    host.set_device(rank).unwrap();
                    let comm = host.comm_init_rank(2, id, rank).unwrap();
                    let buf = host.malloc(80).unwrap();
                    // SAFETY: a live buffer (80 bytes: enough for both
                    // calls), stream and communicator.
                    unsafe {
                        if rank == 0 {
                            host.all_reduce(buf, buf, 10, DataType::F32, ReduceOp::Sum, comm, S)
                        } else {
                            host.all_gather(
                                buf,
                                buf.cast::<u8>().add(40).cast(),
                                5,
                                DataType::F32,
                                comm,
                                S,
                            )
                        }
                        .unwrap();
                        host.stream_synchronize(S)
                            .expect("the stream is not poisoned");
                        let e = host.comm_async_error(comm).unwrap_err();
                        let again =
                            host.all_reduce(buf, buf, 1, DataType::U8, ReduceOp::Max, comm, S);
                        assert!(again.unwrap_err().message().contains("failed earlier"));
                        host.comm_destroy(comm).unwrap();
                        host.free(buf).unwrap();
                        e.message().to_owned()
                    }
                })
            })
            .collect();
        ranks.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(
            e.contains("collective mismatch")
                && e.contains("all_gather(send_count 5, f32)")
                && e.contains("all_reduce(count 10, f32, sum)"),
            "{e}"
        );
    }
    assert!(
        errors[0]
            .contains("rank 1 is in all_gather(send_count 5, f32) while rank 0 is in all_reduce"),
        "{}",
        errors[0]
    );
    assert!(host.take_async_error().is_none());
    assert_no_segment(&id);
}

/// A peer that never joins: the waiting operation fails promptly on
/// comm_abort, and comm_async_error reports the abort.
#[test]
fn abort_ends_a_wait_for_a_missing_rank() {
    let host = vendor(1);
    let id = host.comm_get_unique_id().unwrap();
    let comm = host.comm_init_rank(2, &id, 0).unwrap();
    let stream = host.stream_create(0).unwrap();
    let buf = host.malloc(4 << 20).unwrap();
    // SAFETY: a live buffer, stream and communicator.
    unsafe {
        host.all_reduce(
            buf,
            buf,
            1 << 20,
            DataType::F32,
            ReduceOp::Sum,
            comm,
            stream,
        )
        .unwrap();
        // Usually lets the operation start waiting for rank 1 (which never
        // comes: the checks below hold either way).
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !host.stream_query(stream).unwrap(),
            "the operation waits for rank 1"
        );
        host.comm_async_error(comm).expect("no error while waiting");
        host.comm_abort(comm).unwrap();
        host.stream_synchronize(stream)
            .expect("the stream is not poisoned");
        // The abort ended the wait, not the 20 s timeout: the error says so.
        let e = host.comm_async_error(comm).unwrap_err();
        assert!(
            e.message().contains("rank 0 aborted the communicator"),
            "{e}"
        );
        let e = host.all_reduce(buf, buf, 1, DataType::F32, ReduceOp::Sum, comm, stream);
        assert!(e.unwrap_err().message().contains("unknown communicator"));
        host.comm_destroy(comm)
            .expect("destroy after abort is fine");
        host.stream_destroy(stream).unwrap();
        host.free(buf).unwrap();
    }
    assert!(host.take_async_error().is_none());
    assert_no_segment(&id);
}

/// The safety-net timeout turns an endless wait into a `Timeout` error
/// that names the variable to set.
#[test]
fn timeout_ends_an_endless_wait() {
    let host = HostVendor::new(HostConfig {
        devices: 1,
        comm_timeout: Duration::from_millis(200),
        ..HostConfig::default()
    })
    .unwrap();
    let id = host.comm_get_unique_id().unwrap();
    let comm = host.comm_init_rank(3, &id, 1).unwrap();
    let buf = host.malloc(16).unwrap();
    // SAFETY: a live buffer, stream and communicator.
    unsafe {
        let t = Instant::now();
        host.broadcast(buf, buf, 4, DataType::I32, 0, comm, S)
            .unwrap();
        host.stream_synchronize(S).unwrap();
        // Not forever, and not before the 0.2 s timeout.
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        let e = host.comm_async_error(comm).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        let m = e.message();
        assert!(m.contains("broadcast(count 4, i32, root 0)"), "{m}");
        assert!(m.contains("for rank(s) 0, 2 to join"), "{m}");
        assert!(m.contains("DIPU_HOST_COMM_TIMEOUT"), "{m}");
        host.comm_abort(comm).unwrap();
        host.free(buf).unwrap();
    }
    assert_no_segment(&id);
}

/// A rank whose vendor is dropped with the communicator live aborts it,
/// so its peer's pending operation fails instead of waiting.
#[test]
fn dropping_a_vendor_aborts_its_communicators() {
    let id = vendor(1).comm_get_unique_id().unwrap();
    let (peer_host, dropped) = (vendor(1), vendor(1));
    let peer = peer_host.comm_init_rank(2, &id, 0).unwrap();
    let _gone = dropped.comm_init_rank(2, &id, 1).unwrap();
    let r = Rank {
        host: &peer_host,
        comm: peer,
        rank: 0,
        world: 2,
    };
    let buf = r.upload(&[1u8; 1 << 20]);
    // SAFETY: a live buffer, stream and communicator.
    unsafe {
        peer_host
            .all_reduce(buf, buf, 1 << 20, DataType::U8, ReduceOp::Sum, peer, S)
            .unwrap();
        drop(dropped);
        peer_host.stream_synchronize(S).unwrap();
        let e = peer_host.comm_async_error(peer).unwrap_err();
        assert!(
            e.message().contains("rank 1 dropped its host vendor"),
            "{e}"
        );
        peer_host.comm_destroy(peer).unwrap();
    }
    r.free(buf);
    assert_no_segment(&id);
}
