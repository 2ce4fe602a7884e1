//! Collectives reading the peers' buffers directly: agreement on the
//! form, ordering against staged operations, groups, odd alignments,
//! mismatches.

use dipu_deviceapi::{DataType, DeviceApi, ReduceOp, StreamHandle};

use super::collectives::{large_cases, run, Case};
use super::data::{input, reduce};
use super::{with_ranks, with_ranks_as, Mode, MODES};
use crate::comm::direct::Policy;
use crate::comm::Kind;

const S: StreamHandle = StreamHandle::DEFAULT;
/// f32 elements of a large operation: 3 MiB, not a multiple of anything.
const BIG: usize = (3 << 18) + 13;

/// A rank that does not read directly makes every rank stage.
#[test]
fn one_rank_staging_makes_all_stage() {
    for mode in MODES {
        let policy = |rank| {
            Some(if rank == 1 {
                Policy::Off
            } else {
                Policy::Local
            })
        };
        with_ranks_as(3, mode, policy, |r| {
            large_cases(r);
            assert_eq!(r.direct(), Some(false));
        });
    }
}

/// A one-rank communicator reads itself.
#[test]
fn one_rank_reads_itself() {
    with_ranks(1, Mode::OwnVendor, |r| {
        large_cases(r);
        assert_eq!(r.direct(), Some(true));
    });
}

/// Sums `BIG` f32 of every rank's input `times` times, in place.
fn summed(world: usize, times: usize) -> Vec<u8> {
    let mut acc: Vec<Vec<u8>> = (0..world).map(|p| input(DataType::F32, p, BIG)).collect();
    for _ in 0..times {
        let sum = reduce(DataType::F32, ReduceOp::Sum, &acc);
        acc = vec![sum; world];
    }
    acc.swap_remove(0)
}

/// Direct and staged operations queued back to back and in groups, each
/// using the previous one's result in place: every one sees its
/// predecessor's output, on every rank.
#[test]
fn chained_in_place_operations_in_a_row_and_in_groups() {
    for mode in MODES {
        with_ranks(2, mode, |r| {
            let buf = r.upload(&input(DataType::F32, r.rank, BIG));
            let small = r.upload(&input(DataType::I32, r.rank, 100));
            let (c, d, sum) = (r.comm, DataType::F32, ReduceOp::Sum);
            // SAFETY: live buffers of `BIG` f32 and 100 i32, stream, comm.
            unsafe {
                r.host.all_reduce(buf, buf, BIG, d, sum, c, S).unwrap();
                r.host
                    .all_reduce(small, small, 100, DataType::I32, sum, c, S)
                    .unwrap();
                r.host.all_reduce(buf, buf, BIG, d, sum, c, S).unwrap();
                r.host.group_start().unwrap();
                r.host.all_reduce(buf, buf, BIG, d, sum, c, S).unwrap();
                r.host
                    .all_reduce(small, small, 100, DataType::I32, sum, c, S)
                    .unwrap();
                r.host.all_reduce(buf, buf, BIG, d, sum, c, S).unwrap();
                r.host.group_end().unwrap();
            }
            assert!(r.download(buf, BIG * 4) == summed(2, 4), "rank {}", r.rank);
            assert_eq!(r.direct(), Some(true));
            let ints = (0..2)
                .map(|p| input(DataType::I32, p, 100))
                .collect::<Vec<_>>();
            let once = reduce(DataType::I32, ReduceOp::Sum, &ints);
            let twice = reduce(DataType::I32, ReduceOp::Sum, &[once.clone(), once]);
            assert_eq!(r.download(small, 400), twice);
            r.free(buf);
            r.free(small);
        });
    }
}

/// Buffers not aligned for their type (the terms are copied aligned).
#[test]
fn unaligned_buffers() {
    with_ranks(2, Mode::SharedVendor, |r| {
        let offset = 1 + 2 * r.rank;
        let mut padded = vec![0u8; offset];
        padded.extend_from_slice(&input(DataType::F32, r.rank, BIG));
        let send_base = r.upload(&padded);
        let recv_base = r.upload(&vec![0u8; BIG * 4 + 1]);
        // SAFETY: offsets inside the buffers, which have room for `BIG`
        // f32 past them; live stream and comm.
        unsafe {
            let send = send_base.cast::<u8>().add(offset).cast();
            let recv = recv_base.cast::<u8>().add(1).cast();
            let sum = ReduceOp::Sum;
            r.host
                .all_reduce(send, recv, BIG, DataType::F32, sum, r.comm, S)
                .unwrap();
            assert!(r.download(recv, BIG * 4) == summed(2, 1), "rank {}", r.rank);
        }
        assert_eq!(r.direct(), Some(true));
        r.free(send_base);
        r.free(recv_base);
    });
}

/// Ranks disagreeing on a large collective both fail, naming both.
#[test]
fn large_mismatch_fails_on_every_rank() {
    let host = super::vendor(2);
    let id = host.comm_get_unique_id().unwrap();
    let errors: Vec<String> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let (host, id) = (&host, &id);
                scope.spawn(move || {
                    host.set_device(rank).unwrap();
                    let comm = host.comm_init_rank(2, id, rank).unwrap();
                    let buf = host.malloc(BIG * 4 * 2).unwrap();
                    let (d, sum) = (DataType::F32, ReduceOp::Sum);
                    // SAFETY: a live buffer with room for both calls,
                    // stream and communicator.
                    unsafe {
                        if rank == 0 {
                            host.all_reduce(buf, buf, BIG, d, sum, comm, S)
                        } else {
                            host.reduce_scatter(buf, buf, BIG, d, sum, comm, S)
                        }
                        .unwrap();
                        host.stream_synchronize(S).unwrap();
                        let e = host.comm_async_error(comm).unwrap_err();
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
                && e.contains(&format!("all_reduce(count {BIG}, f32, sum)"))
                && e.contains(&format!("reduce_scatter(recv_count {BIG}, f32, sum)")),
            "{e}"
        );
    }
    super::assert_no_segment(&id);
}

/// Every kind once more on four ranks with a root other than 0, small
/// and large.
#[test]
fn roots_and_sizes_across_the_threshold() {
    with_ranks(4, Mode::SharedVendor, |r| {
        for count in [(1 << 18) - 1, 1 << 18, (1 << 18) + 1] {
            for kind in [Kind::Broadcast, Kind::Reduce, Kind::AllReduce] {
                let case = Case {
                    root: 3,
                    ..Case::new(kind, DataType::F32, ReduceOp::Max, count)
                };
                run(r, case);
            }
        }
    });
}

/// A rank that gives up is not written into once it returns: a pusher
/// that sees the abort writes no further piece, and the rank that gave up
/// waits for its peers to stop pushing before its operation ends.
#[test]
fn no_push_after_a_rank_gave_up() {
    let host = super::vendor(2);
    let id = host.comm_get_unique_id().unwrap();
    let out: Vec<(Vec<u8>, Vec<u8>, String)> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let (host, id) = (&host, &id);
                scope.spawn(move || {
                    host.set_device(rank).unwrap();
                    let comm = host.comm_init_rank(2, id, rank).unwrap();
                    let r = super::Rank {
                        host,
                        comm,
                        rank: rank as usize,
                        world: 2,
                    };
                    let state = host.comms.get(comm).expect("live");
                    if rank == 0 {
                        state
                            .give_up_before_push
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    let data = input(DataType::F32, r.rank, BIG);
                    let buf = r.upload(&data);
                    // SAFETY: a live buffer of `BIG` f32, stream and
                    // communicator, destroyed once.
                    let error = unsafe {
                        host.all_reduce(buf, buf, BIG, DataType::F32, ReduceOp::Sum, comm, S)
                            .unwrap();
                        host.stream_synchronize(S).unwrap();
                        let e = host
                            .comm_async_error(comm)
                            .expect_err("the all_reduce failed");
                        host.comm_destroy(comm).unwrap();
                        e
                    };
                    let after = r.download(buf, BIG * 4);
                    r.free(buf);
                    (data, after, error.message().to_owned())
                })
            })
            .collect();
        ranks.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let (input1, after1, error1) = &out[1];
    // Rank 0 gave up before its first piece: block 0 of rank 1's buffer is
    // rank 1's input still.
    let block0 = BIG.div_ceil(2).next_multiple_of(1024) * 4;
    assert!(
        after1[..block0] == input1[..block0],
        "rank 0 pushed after giving up"
    );
    assert!(error1.contains("rank 0"), "{error1}");
    assert!(out[0].2.contains("gave up before pushing"), "{}", out[0].2);
}

/// A rank that gave up waits until its peers no longer push.
#[test]
fn quiesce_waits_for_a_pushing_peer() {
    with_ranks(2, Mode::OwnVendor, |r| {
        let state = r.host.comms.get(r.comm).expect("live");
        if r.rank == 1 {
            state.set_pushing(true);
            std::thread::sleep(std::time::Duration::from_millis(100));
            state.set_pushing(false);
        } else {
            while state.pushing_flag(1) == 0 {
                std::thread::yield_now();
            }
            state.quiesce();
            // Only rank 1 clears its flag, 100 ms after setting it.
            assert_eq!(
                state.pushing_flag(1),
                0,
                "quiesce returned while rank 1 pushed"
            );
        }
    });
}
