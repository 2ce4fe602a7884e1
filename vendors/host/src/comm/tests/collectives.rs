//! Every collective, data type and reduction against host references.

use dipu_deviceapi::{DataType, DeviceApi, ReduceOp, StreamHandle};

use super::data::{input, reduce, OPS};
use super::{with_ranks, with_ranks_as, Mode, Rank};
use crate::comm::direct::Policy;
use crate::comm::layout::Layout;
use crate::comm::Kind;

/// One collective call and what it should leave in `recv`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Case {
    pub(super) kind: Kind,
    pub(super) dtype: DataType,
    pub(super) op: ReduceOp,
    /// count, send_count (all_gather) or recv_count (reduce_scatter).
    pub(super) count: usize,
    pub(super) root: usize,
    pub(super) in_place: bool,
}

impl Case {
    pub(super) fn new(kind: Kind, dtype: DataType, op: ReduceOp, count: usize) -> Case {
        Case {
            kind,
            dtype,
            op,
            count,
            root: 0,
            in_place: false,
        }
    }
}

const SENTINEL: u8 = 0xAB;

/// Runs `case` on rank `r` and checks its result.
pub(super) fn run(r: &Rank<'_>, case: Case) {
    let (world, me, e) = (r.world, r.rank, case.dtype.size_in_bytes());
    let n = case.count;
    let send_elems = if case.kind == Kind::ReduceScatter {
        n * world
    } else {
        n
    };
    let recv_elems = if case.kind == Kind::AllGather {
        n * world
    } else {
        n
    };
    let mine = input(case.dtype, me, send_elems);
    let inputs = |len| -> Vec<Vec<u8>> { (0..world).map(|p| input(case.dtype, p, len)).collect() };
    // In place: send lies inside recv (or is it) as NCCL defines it.
    let (send, recv, send_at) = if case.in_place {
        let (big, at) = match case.kind {
            Kind::AllGather => (recv_elems, me * n * e),
            _ => (send_elems, 0),
        };
        let mut buf = vec![SENTINEL; big * e];
        buf[at..at + mine.len()].copy_from_slice(&mine);
        let ptr = r.upload(&buf);
        (ptr, ptr, at)
    } else {
        (
            r.upload(&mine),
            r.upload(&vec![SENTINEL; recv_elems * e]),
            0,
        )
    };
    // SAFETY: `send`/`recv` are live device buffers of the sizes NCCL
    // requires for the call; the stream and communicator are live.
    let (send_ptr, mut recv_ptr) = unsafe { (send.cast::<u8>().add(send_at).cast(), recv) };
    if case.in_place && case.kind == Kind::ReduceScatter {
        // SAFETY: recv is rank `me`'s block inside send.
        recv_ptr = unsafe { send.cast::<u8>().add(me * n * e).cast() };
    }
    let (d, op, c, s) = (case.dtype, case.op, r.comm, StreamHandle::DEFAULT);
    let root = case.root as i32;
    // SAFETY: as above.
    let result = unsafe {
        match case.kind {
            Kind::AllReduce => r.host.all_reduce(send_ptr, recv_ptr, n, d, op, c, s),
            Kind::Broadcast => r.host.broadcast(send_ptr, recv_ptr, n, d, root, c, s),
            Kind::Reduce => r.host.reduce(send_ptr, recv_ptr, n, d, op, root, c, s),
            Kind::AllGather => r.host.all_gather(send_ptr, recv_ptr, n, d, c, s),
            Kind::ReduceScatter => r.host.reduce_scatter(send_ptr, recv_ptr, n, d, op, c, s),
            Kind::Send | Kind::Recv => unreachable!(),
        }
    };
    result.unwrap_or_else(|e| panic!("{case:?} on rank {me}: {e}"));
    let got = r.download(recv_ptr, recv_elems * e);
    let want = match case.kind {
        Kind::AllReduce => reduce(d, op, &inputs(n)),
        Kind::Reduce if me == case.root => reduce(d, op, &inputs(n)),
        Kind::Reduce if case.in_place => mine.clone(),
        Kind::Reduce => vec![SENTINEL; n * e],
        Kind::Broadcast => input(d, case.root, n),
        Kind::AllGather => inputs(n).concat(),
        Kind::ReduceScatter => {
            reduce(d, op, &inputs(n * world))[me * n * e..(me + 1) * n * e].to_vec()
        }
        Kind::Send | Kind::Recv => unreachable!(),
    };
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b);
        panic!("{case:?} on rank {me} of {world}: first wrong byte at {at:?}");
    }
    r.free(send);
    if !case.in_place {
        r.free(recv);
    }
}

/// Every collective with every data type and reduction, small counts.
fn every_type_and_op(world: usize, mode: Mode) {
    with_ranks(world, mode, |r| {
        for dtype in DataType::ALL {
            for op in OPS {
                for kind in [Kind::AllReduce, Kind::Reduce, Kind::ReduceScatter] {
                    let count = if kind == Kind::ReduceScatter { 19 } else { 37 };
                    let root = world - 1;
                    run(
                        r,
                        Case {
                            root,
                            ..Case::new(kind, dtype, op, count)
                        },
                    );
                }
            }
            let root = 1 % world;
            run(
                r,
                Case {
                    root,
                    ..Case::new(Kind::Broadcast, dtype, ReduceOp::Sum, 41)
                },
            );
            run(r, Case::new(Kind::AllGather, dtype, ReduceOp::Sum, 23));
        }
    });
}

#[test]
fn every_type_and_op_2_ranks_one_vendor() {
    every_type_and_op(2, Mode::SharedVendor);
}

#[test]
fn every_type_and_op_2_ranks_own_vendors() {
    every_type_and_op(2, Mode::OwnVendor);
}

#[test]
fn every_type_and_op_4_ranks_one_vendor() {
    every_type_and_op(4, Mode::SharedVendor);
}

#[test]
fn every_type_and_op_4_ranks_own_vendors() {
    every_type_and_op(4, Mode::OwnVendor);
}

/// Sizes spanning many chunks, not a multiple of the chunk, in place and
/// not, every kind: large enough to run directly where the communicator
/// reads its peers (all but the bf16 all-reduce).
pub(super) fn large_cases(r: &Rank<'_>) {
    let world = r.world;
    let chunk = Layout::new(world).chunk;
    let f32s = 3 * chunk / 4 + 7;
    for in_place in [false, true] {
        let case = |kind, dtype, op, count| Case {
            in_place,
            root: world / 2,
            ..Case::new(kind, dtype, op, count)
        };
        run(r, case(Kind::AllReduce, DataType::F32, ReduceOp::Sum, f32s));
        run(
            r,
            case(
                Kind::AllReduce,
                DataType::BF16,
                ReduceOp::Max,
                chunk / 2 + 3,
            ),
        );
        run(
            r,
            case(Kind::ReduceScatter, DataType::F32, ReduceOp::Sum, f32s / 2),
        );
        run(
            r,
            case(Kind::AllGather, DataType::I8, ReduceOp::Sum, 2 * chunk + 5),
        );
        run(
            r,
            case(Kind::Broadcast, DataType::U64, ReduceOp::Sum, chunk / 4 + 1),
        );
        run(
            r,
            case(Kind::Reduce, DataType::I32, ReduceOp::Prod, chunk / 2 + 9),
        );
    }
}

/// [`large_cases`] on thread ranks, read directly (the default for ranks
/// of one process) and staged (more of it in `direct.rs`).
#[test]
fn many_chunks_odd_sizes_and_in_place() {
    let runs = [
        (2, Mode::SharedVendor, Policy::Local),
        (2, Mode::OwnVendor, Policy::Local),
        (3, Mode::SharedVendor, Policy::Local),
        (4, Mode::SharedVendor, Policy::Local),
        (4, Mode::OwnVendor, Policy::Local),
        (2, Mode::OwnVendor, Policy::Off),
        (4, Mode::SharedVendor, Policy::Off),
    ];
    for (world, mode, policy) in runs {
        let body = |r: &Rank<'_>| {
            large_cases(r);
            assert_eq!(r.direct(), Some(policy == Policy::Local));
        };
        with_ranks_as(world, mode, |_| Some(policy), body);
    }
}

/// A communicator of one rank: every collective is a copy.
#[test]
fn one_rank() {
    with_ranks(1, Mode::OwnVendor, |r| {
        for kind in [
            Kind::AllReduce,
            Kind::Reduce,
            Kind::ReduceScatter,
            Kind::AllGather,
            Kind::Broadcast,
        ] {
            run(r, Case::new(kind, DataType::F64, ReduceOp::Prod, 1000));
        }
    });
}

/// Operations on created streams, several in flight, and a destroy while
/// they are still queued: the queued operations finish.
#[test]
fn queued_work_survives_destroy() {
    let host = super::vendor(2);
    let id = host.comm_get_unique_id().unwrap();
    let n = 100_000;
    std::thread::scope(|scope| {
        for rank in 0..2usize {
            let (host, id) = (&host, &id);
            scope.spawn(move || {
                host.set_device(rank as i32).unwrap();
                let comm = host.comm_init_rank(2, id, rank as i32).unwrap();
                let stream = host.stream_create(0).unwrap();
                let r = Rank {
                    host,
                    comm,
                    rank,
                    world: 2,
                };
                let data = input(DataType::I64, rank, n);
                let buf = r.upload(&data);
                // SAFETY: live buffer, stream and communicator; destroyed
                // once, after the calls are queued.
                unsafe {
                    for _ in 0..3 {
                        host.all_reduce(buf, buf, n, DataType::I64, ReduceOp::Sum, comm, stream)
                            .unwrap();
                    }
                    host.comm_destroy(comm).unwrap();
                    host.stream_synchronize(stream).unwrap();
                    host.stream_destroy(stream).unwrap();
                }
                let got = r.download(buf, n * 8);
                let sum = reduce(
                    DataType::I64,
                    ReduceOp::Sum,
                    &[input(DataType::I64, 0, n), input(DataType::I64, 1, n)],
                );
                let times4 = reduce(
                    DataType::I64,
                    ReduceOp::Sum,
                    &[sum.clone(), sum.clone(), sum.clone(), sum],
                );
                assert_eq!(got, times4);
                r.free(buf);
            });
        }
    });
    super::assert_no_segment(&id);
}
