//! Every collective of the process group, on 2 and 4 thread ranks of the
//! host vendor, every data type and reduce operator, checked against a
//! reference computed on the host.

mod common;

use std::time::Duration;

use common::*;
use dipu_deviceapi::{DataType, ReduceOp};

const COUNT: usize = 1001;

#[test]
fn all_reduce_every_type_and_operator() {
    for n in [2, 4] {
        with_ranks(n, quick(), |pg| {
            for dtype in DataType::ALL {
                for op in ReduceOp::ALL {
                    let mine: Vec<f64> = (0..COUNT).map(|i| value(pg.rank(), i)).collect();
                    let (dev, buf) = upload(pg, dtype, &mine);
                    let work = pg.all_reduce(&buf, op).unwrap();
                    work.wait().unwrap();
                    let got = download(&dev, &buf);
                    for (i, g) in got.iter().enumerate() {
                        let want = reference(op, dtype, n, i);
                        assert_eq!(*g, want, "{n} ranks, {dtype:?} {op:?}, element {i}");
                    }
                    assert!(
                        work.is_completed() && work.is_success(),
                        "{}",
                        work.describe()
                    );
                    assert!(work.error().is_none());
                }
            }
        });
    }
}

#[test]
fn all_reduce_large_spans_many_chunks() {
    let count = 3 * 1024 * 1024 + 13; // 12 MiB of f32, not a round size
    let sums = with_ranks(2, quick(), |pg| {
        let mine: Vec<f64> = (0..count)
            .map(|i| (i % 1000) as f64 + f64::from(pg.rank()))
            .collect();
        let (dev, buf) = upload(pg, DataType::F32, &mine);
        let work = pg.all_reduce(&buf, ReduceOp::Sum).unwrap();
        work.wait_host(quick().timeout).unwrap();
        let got = download(&dev, &buf);
        let wrong = (0..count).find(|&i| got[i] != 2.0 * (i % 1000) as f64 + 1.0);
        assert_eq!(wrong, None, "first wrong element");
        work.duration().expect("a completed work has a duration")
    });
    assert!(sums.iter().all(|d| d.as_nanos() > 0));
}

#[test]
fn broadcast_and_reduce_from_every_root() {
    for n in [2, 4] {
        with_ranks(n, quick(), |pg| {
            for root in 0..n {
                let mine: Vec<f64> = (0..COUNT).map(|i| value(pg.rank(), i)).collect();
                let (dev, buf) = upload(pg, DataType::I32, &mine);
                pg.broadcast(&buf, root).unwrap().wait().unwrap();
                let want: Vec<f64> = (0..COUNT).map(|i| value(root, i)).collect();
                assert_eq!(download(&dev, &buf), want, "broadcast from {root}");

                let (dev, buf) = upload(pg, DataType::F64, &mine);
                pg.reduce(&buf, root, ReduceOp::Max)
                    .unwrap()
                    .wait()
                    .unwrap();
                let want: Vec<f64> = if pg.rank() == root {
                    (0..COUNT)
                        .map(|i| reference(ReduceOp::Max, DataType::F64, n, i))
                        .collect()
                } else {
                    mine.clone()
                };
                assert_eq!(
                    download(&dev, &buf),
                    want,
                    "reduce to {root} on rank {}",
                    pg.rank()
                );
            }
        });
    }
}

#[test]
fn all_gather_equal_uneven_and_flat() {
    for n in [2, 4] {
        with_ranks(n, quick(), |pg| {
            let size_of = |r: i32| 3 + 2 * r as usize;
            for uneven in [false, true] {
                let len = |r: i32| if uneven { size_of(r) } else { 5 };
                let mine: Vec<f64> = (0..len(pg.rank()))
                    .map(|i| value(pg.rank(), i) + 10.0 * f64::from(pg.rank()))
                    .collect();
                let (_din, input) = upload(pg, DataType::BF16, &mine);
                let outs: Vec<_> = (0..n).map(|r| zeros(pg, DataType::BF16, len(r))).collect();
                let bufs: Vec<_> = outs.iter().map(|(_, b)| *b).collect();
                pg.all_gather(&bufs, &input).unwrap().wait().unwrap();
                for (r, (dev, buf)) in outs.iter().enumerate() {
                    let r = r as i32;
                    let want: Vec<f64> = (0..len(r))
                        .map(|i| value(r, i) + 10.0 * f64::from(r))
                        .collect();
                    assert_eq!(
                        download(dev, buf),
                        want,
                        "uneven {uneven}: block of rank {r}"
                    );
                }
            }
            let mine: Vec<f64> = (0..7).map(|i| value(pg.rank(), i)).collect();
            let (_din, input) = upload(pg, DataType::U8, &mine);
            let (dout, output) = zeros(pg, DataType::U8, 7 * n as usize);
            pg.all_gather_into(&output, &input).unwrap().wait().unwrap();
            let want: Vec<f64> = (0..n)
                .flat_map(|r| (0..7).map(move |i| value(r, i)))
                .collect();
            assert_eq!(download(&dout, &output), want);
        });
    }
}

#[test]
fn reduce_scatter_equal_uneven_and_flat() {
    for n in [2, 4] {
        with_ranks(n, quick(), |pg| {
            for (op, uneven) in [
                (ReduceOp::Sum, false),
                (ReduceOp::Avg, false),
                (ReduceOp::Min, true),
                (ReduceOp::Avg, true),
            ] {
                let len = |r: i32| if uneven { 2 + r as usize } else { 6 };
                // Block r of every rank's input: value(rank, r * 100 + i).
                let inputs: Vec<_> = (0..n)
                    .map(|r| {
                        let v: Vec<f64> = (0..len(r))
                            .map(|i| value(pg.rank(), r as usize * 100 + i))
                            .collect();
                        upload(pg, DataType::F32, &v)
                    })
                    .collect();
                let bufs: Vec<_> = inputs.iter().map(|(_, b)| *b).collect();
                let (dout, output) = zeros(pg, DataType::F32, len(pg.rank()));
                pg.reduce_scatter(&output, &bufs, op)
                    .unwrap()
                    .wait()
                    .unwrap();
                let want: Vec<f64> = (0..len(pg.rank()))
                    .map(|i| reference(op, DataType::F32, n, pg.rank() as usize * 100 + i))
                    .collect();
                assert_eq!(download(&dout, &output), want, "{op:?}, uneven {uneven}");
            }
            let flat: Vec<f64> = (0..4 * n as usize).map(|i| value(pg.rank(), i)).collect();
            let (_din, input) = upload(pg, DataType::I64, &flat);
            let (dout, output) = zeros(pg, DataType::I64, 4);
            pg.reduce_scatter_from(&output, &input, ReduceOp::Prod)
                .unwrap()
                .wait()
                .unwrap();
            let want: Vec<f64> = (0..4)
                .map(|i| reference(ReduceOp::Prod, DataType::I64, n, pg.rank() as usize * 4 + i))
                .collect();
            assert_eq!(download(&dout, &output), want);
        });
    }
}

/// The element rank `from` sends to rank `to` at position `i`.
fn a2a(from: i32, to: i32, i: usize) -> f64 {
    f64::from(from * 100 + to * 10) + i as f64
}

#[test]
fn all_to_all_equal_and_uneven() {
    for n in [2, 4] {
        with_ranks(n, quick(), |pg| {
            let me = pg.rank();
            // Equal: 3 elements per peer.
            let input: Vec<f64> = (0..n)
                .flat_map(|to| (0..3).map(move |i| a2a(me, to, i)))
                .collect();
            let (_din, ib) = upload(pg, DataType::I16, &input);
            let (dout, ob) = zeros(pg, DataType::I16, input.len());
            pg.all_to_all(&ob, &ib, None, None).unwrap().wait().unwrap();
            let want: Vec<f64> = (0..n)
                .flat_map(|from| (0..3).map(move |i| a2a(from, me, i)))
                .collect();
            assert_eq!(download(&dout, &ob), want, "equal splits");
            // Uneven: rank `from` sends `from + to` elements to rank `to` (zero included).
            let send_counts: Vec<usize> = (0..n).map(|to| (me + to) as usize).collect();
            let recv_counts: Vec<usize> = (0..n).map(|from| (from + me) as usize).collect();
            let input: Vec<f64> = (0..n)
                .flat_map(|to| (0..send_counts[to as usize]).map(move |i| a2a(me, to, i)))
                .collect();
            let (_din, ib) = upload(pg, DataType::F32, &input);
            let total: usize = recv_counts.iter().sum();
            let (dout, ob) = zeros(pg, DataType::F32, total);
            pg.all_to_all(&ob, &ib, Some(&recv_counts), Some(&send_counts))
                .unwrap()
                .wait()
                .unwrap();
            let want: Vec<f64> = (0..n)
                .flat_map(|from| (0..recv_counts[from as usize]).map(move |i| a2a(from, me, i)))
                .collect();
            assert_eq!(download(&dout, &ob), want, "uneven splits");
        });
    }
}

#[test]
fn gather_and_scatter() {
    for n in [2, 4] {
        with_ranks(n, quick(), |pg| {
            let me = pg.rank();
            for root in 0..n {
                let mine: Vec<f64> = (0..5).map(|i| a2a(me, root, i)).collect();
                let (_din, input) = upload(pg, DataType::F64, &mine);
                let outs: Vec<_> = if me == root {
                    (0..n).map(|_| zeros(pg, DataType::F64, 5)).collect()
                } else {
                    vec![]
                };
                let bufs: Vec<_> = outs.iter().map(|(_, b)| *b).collect();
                pg.gather(&bufs, &input, root).unwrap().wait().unwrap();
                for (r, (dev, buf)) in outs.iter().enumerate() {
                    let want: Vec<f64> = (0..5).map(|i| a2a(r as i32, root, i)).collect();
                    assert_eq!(download(dev, buf), want, "gather at {root}, block {r}");
                }

                let ins: Vec<_> = if me == root {
                    (0..n)
                        .map(|to| {
                            upload(
                                pg,
                                DataType::U32,
                                &(0..4).map(|i| a2a(root, to, i)).collect::<Vec<_>>(),
                            )
                        })
                        .collect()
                } else {
                    vec![]
                };
                let bufs: Vec<_> = ins.iter().map(|(_, b)| *b).collect();
                let (dout, output) = zeros(pg, DataType::U32, 4);
                pg.scatter(&output, &bufs, root).unwrap().wait().unwrap();
                let want: Vec<f64> = (0..4).map(|i| a2a(root, me, i)).collect();
                assert_eq!(download(&dout, &output), want, "scatter from {root}");
            }
        });
    }
}

#[test]
fn send_recv_ring_and_barrier() {
    with_ranks(4, quick(), |pg| {
        let me = pg.rank();
        let n = pg.world_size();
        let mine: Vec<f64> = (0..300_000).map(|i| a2a(me, 0, i % 1000)).collect();
        let (_ds, sbuf) = upload(pg, DataType::F32, &mine);
        let (dr, rbuf) = zeros(pg, DataType::F32, mine.len());
        // Even ranks send first, odd ranks receive first: pairs never wait on each other.
        let (to, from) = ((me + 1) % n, (me + n - 1) % n);
        let works = if me % 2 == 0 {
            vec![
                pg.send(&sbuf, to, 0).unwrap(),
                pg.recv(&rbuf, from, 0).unwrap(),
            ]
        } else {
            vec![
                pg.recv(&rbuf, from, 0).unwrap(),
                pg.send(&sbuf, to, 0).unwrap(),
            ]
        };
        for w in &works {
            w.wait().unwrap();
        }
        let want: Vec<f64> = (0..300_000).map(|i| a2a(from, 0, i % 1000)).collect();
        assert_eq!(download(&dr, &rbuf), want);
        pg.barrier().unwrap();
    });
}

/// Two reduce-scatters of lists in one coalesced batch: each packs its
/// inputs into a scratch buffer that the vendor may read only when the
/// batch ends (NCCL and its fake launch a group's collectives at
/// `ncclGroupEnd`), so the first one's scratch must not go to the second,
/// which would fill it first.
#[test]
fn coalesced_reduce_scatters_keep_their_scratch_until_the_batch_ends() {
    with_ranks(2, quick(), |pg| {
        // Op k's inputs on rank r are all 10 k + r + 1.
        let inputs = |k: usize| -> Vec<_> {
            let v = vec![(10 * k) as f64 + f64::from(pg.rank()) + 1.0; 64];
            (0..2).map(|_| upload(pg, DataType::F32, &v)).collect()
        };
        let (first, second) = (inputs(0), inputs(1));
        let bufs = |x: &[(_, dipu_comm::Buffer)]| x.iter().map(|(_, b)| *b).collect::<Vec<_>>();
        let (d1, o1) = zeros(pg, DataType::F32, 64);
        let (d2, o2) = zeros(pg, DataType::F32, 64);
        pg.start_coalescing().unwrap();
        pg.reduce_scatter(&o1, &bufs(&first), ReduceOp::Sum)
            .unwrap();
        pg.reduce_scatter(&o2, &bufs(&second), ReduceOp::Sum)
            .unwrap();
        pg.end_coalescing().unwrap().wait().unwrap();
        // Sums over ranks 0 and 1: 1 + 2, then 11 + 12.
        assert_eq!(
            download(&d1, &o1),
            vec![3.0; 64],
            "the first reduce-scatter"
        );
        assert_eq!(
            download(&d2, &o2),
            vec![23.0; 64],
            "the second reduce-scatter"
        );
    });
}

#[test]
fn coalesced_batch_is_one_work() {
    with_ranks(2, quick(), |pg| {
        let a: Vec<f64> = (0..10).map(|i| value(pg.rank(), i)).collect();
        let (da, ba) = upload(pg, DataType::F32, &a);
        let (db, bb) = upload(pg, DataType::I32, &a);
        pg.start_coalescing().unwrap();
        let w1 = pg.all_reduce(&ba, ReduceOp::Sum).unwrap();
        let w2 = pg.all_reduce(&bb, ReduceOp::Max).unwrap();
        assert!(
            w1.wait().is_err() && w1.wait_host(Duration::from_secs(5)).is_err(),
            "waiting inside an open batch is an error"
        );
        let batch = pg.end_coalescing().unwrap();
        batch.wait().unwrap();
        let want: Vec<f64> = (0..10)
            .map(|i| reference(ReduceOp::Sum, DataType::F32, 2, i))
            .collect();
        assert_eq!(download(&da, &ba), want);
        let want: Vec<f64> = (0..10)
            .map(|i| reference(ReduceOp::Max, DataType::I32, 2, i))
            .collect();
        assert_eq!(download(&db, &bb), want);
        // The downloads ran on the current stream, after the batch.
        assert!(
            w1.is_completed() && w2.is_completed(),
            "the ops complete with their batch"
        );
        assert!(batch.duration().is_some());
        assert!(pg.end_coalescing().is_err(), "no batch is open");
    });
}
