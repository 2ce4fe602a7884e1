//! The host-staged collectives of a vendor without collectives (here the
//! host vendor with `DIPU_HOST_COLLECTIVES=0`), on thread ranks, through
//! both host transports: every collective, a peer that aborts, a missing
//! rank. scripts/test.sh also runs the other process-group tests this way.

mod common;

use std::sync::{Arc, Once};
use std::time::Duration;

use common::*;
use dipu_comm::store::{HashStore, Store};
use dipu_comm::{Buffer, ProcessGroup, StagedTransport};
use dipu_deviceapi::{Capabilities, DataType, ErrorKind, ReduceOp};
use dipu_runtime::Runtime;

const TRANSPORTS: [StagedTransport; 2] = [StagedTransport::Shm, StagedTransport::Tcp];

/// The test binary's runtime, its host vendor's collectives hidden.
fn staged_runtime() -> Arc<Runtime> {
    static HIDE: Once = Once::new();
    HIDE.call_once(|| {
        // SAFETY: set once, before any runtime exists, by the first test to
        // get here; every test comes here first and waits for it.
        std::env::set_var("DIPU_HOST_COLLECTIVES", "0");
    });
    let rt = runtime();
    assert!(
        !rt.api().capabilities().contains(Capabilities::COLLECTIVES),
        "the vendor must have no collectives for these tests"
    );
    rt
}

/// Rank `from`'s element `i` for rank `to`.
fn a2a(from: i32, to: i32, i: usize) -> f64 {
    f64::from(from * 100 + to * 10) + i as f64
}

#[test]
fn every_collective_through_both_transports() {
    staged_runtime();
    for transport in TRANSPORTS {
        with_ranks(3, quick().with_staged_transport(transport), |pg| {
            let (me, n) = (pg.rank(), pg.world_size());
            all_reduce_every_type_and_op(pg, 37);

            // 1 MiB per rank: large enough for the host vendor's direct
            // path, and for many TCP segments.
            let big: Vec<f64> = (0..3 << 18).map(|i| value(me, i)).collect();
            let (dev, buf) = upload(pg, DataType::F32, &big);
            pg.all_reduce(&buf, ReduceOp::Sum).unwrap().wait().unwrap();
            let got = download(&dev, &buf);
            let wrong =
                (0..big.len()).find(|&i| got[i] != reference(ReduceOp::Sum, DataType::F32, n, i));
            assert_eq!(wrong, None, "{transport:?}: the large all-reduce");

            let mine: Vec<f64> = (0..9).map(|i| value(me, i)).collect();
            let (dev, buf) = upload(pg, DataType::I64, &mine);
            pg.broadcast(&buf, 1).unwrap().wait().unwrap();
            assert_eq!(
                download(&dev, &buf),
                (0..9).map(|i| value(1, i)).collect::<Vec<_>>()
            );
            let (dev, buf) = upload(pg, DataType::BF16, &mine);
            pg.reduce(&buf, 2, ReduceOp::Max).unwrap().wait().unwrap();
            let want: Vec<f64> = if me == 2 {
                (0..9)
                    .map(|i| reference(ReduceOp::Max, DataType::BF16, n, i))
                    .collect()
            } else {
                mine.clone()
            };
            assert_eq!(download(&dev, &buf), want, "reduce to rank 2");

            // All-gather, uneven (a group of broadcasts) and flat.
            let len = |r: i32| 2 + r as usize;
            let (_di, input) = upload(
                pg,
                DataType::I16,
                &(0..len(me)).map(|i| a2a(me, 0, i)).collect::<Vec<_>>(),
            );
            let outs: Vec<_> = (0..n).map(|r| zeros(pg, DataType::I16, len(r))).collect();
            let bufs: Vec<Buffer> = outs.iter().map(|(_, b)| *b).collect();
            pg.all_gather(&bufs, &input).unwrap().wait().unwrap();
            for (r, (d, b)) in outs.iter().enumerate() {
                let r = r as i32;
                assert_eq!(
                    download(d, b),
                    (0..len(r)).map(|i| a2a(r, 0, i)).collect::<Vec<_>>()
                );
            }
            let (_di, input) = upload(pg, DataType::U8, &mine);
            let (dout, output) = zeros(pg, DataType::U8, 9 * n as usize);
            pg.all_gather_into(&output, &input).unwrap().wait().unwrap();
            let want: Vec<f64> = (0..n)
                .flat_map(|r| (0..9).map(move |i| value(r, i)))
                .collect();
            assert_eq!(download(&dout, &output), want, "all_gather_into");

            // Reduce-scatter of a flat buffer, averaged.
            let flat: Vec<f64> = (0..4 * n as usize).map(|i| value(me, i)).collect();
            let (_di, input) = upload(pg, DataType::F64, &flat);
            let (dout, output) = zeros(pg, DataType::F64, 4);
            pg.reduce_scatter_from(&output, &input, ReduceOp::Avg)
                .unwrap()
                .wait()
                .unwrap();
            let want: Vec<f64> = (0..4)
                .map(|i| reference(ReduceOp::Avg, DataType::F64, n, me as usize * 4 + i))
                .collect();
            assert_eq!(download(&dout, &output), want, "reduce_scatter_from");

            // All-to-all with uneven splits (zero included).
            let sends: Vec<usize> = (0..n).map(|to| (me + to) as usize).collect();
            let recvs: Vec<usize> = (0..n).map(|from| (from + me) as usize).collect();
            let input: Vec<f64> = (0..n)
                .flat_map(|to| (0..sends[to as usize]).map(move |i| a2a(me, to, i)))
                .collect();
            let (_di, ib) = upload(pg, DataType::F32, &input);
            let (dout, ob) = zeros(pg, DataType::F32, recvs.iter().sum());
            pg.all_to_all(&ob, &ib, Some(&recvs), Some(&sends))
                .unwrap()
                .wait()
                .unwrap();
            let want: Vec<f64> = (0..n)
                .flat_map(|from| (0..recvs[from as usize]).map(move |i| a2a(from, me, i)))
                .collect();
            assert_eq!(download(&dout, &ob), want, "all_to_all");

            // Gather and scatter at rank 1.
            let (_di, input) = upload(
                pg,
                DataType::I32,
                &(0..5).map(|i| a2a(me, 1, i)).collect::<Vec<_>>(),
            );
            let outs: Vec<_> = if me == 1 {
                (0..n).map(|_| zeros(pg, DataType::I32, 5)).collect()
            } else {
                vec![]
            };
            let bufs: Vec<Buffer> = outs.iter().map(|(_, b)| *b).collect();
            pg.gather(&bufs, &input, 1).unwrap().wait().unwrap();
            for (r, (d, b)) in outs.iter().enumerate() {
                assert_eq!(
                    download(d, b),
                    (0..5).map(|i| a2a(r as i32, 1, i)).collect::<Vec<_>>()
                );
            }
            let ins: Vec<_> = if me == 1 {
                (0..n)
                    .map(|to| {
                        upload(
                            pg,
                            DataType::U32,
                            &(0..4).map(|i| a2a(1, to, i)).collect::<Vec<_>>(),
                        )
                    })
                    .collect()
            } else {
                vec![]
            };
            let bufs: Vec<Buffer> = ins.iter().map(|(_, b)| *b).collect();
            let (dout, output) = zeros(pg, DataType::U32, 4);
            pg.scatter(&output, &bufs, 1).unwrap().wait().unwrap();
            assert_eq!(
                download(&dout, &output),
                (0..4).map(|i| a2a(1, me, i)).collect::<Vec<_>>()
            );

            // A ring exchange in a coalesced batch that receives before it
            // sends (the batch must not deadlock), then standalone send and
            // recv between ranks 0 and 2 (their own pair communicator).
            let (to, from) = ((me + 1) % n, (me + n - 1) % n);
            let (_ds, sbuf) = upload(pg, DataType::F16, &[f64::from(me); 100]);
            let (dr, rbuf) = zeros(pg, DataType::F16, 100);
            pg.start_coalescing().unwrap();
            pg.recv(&rbuf, from, 0).unwrap();
            pg.send(&sbuf, to, 0).unwrap();
            pg.end_coalescing().unwrap().wait().unwrap();
            assert_eq!(
                download(&dr, &rbuf),
                vec![f64::from(from); 100],
                "ring exchange"
            );
            if me != 1 {
                let peer = 2 - me;
                let (_ds, sbuf) = upload(pg, DataType::F32, &[f64::from(me) + 0.5; 7]);
                let (dr, rbuf) = zeros(pg, DataType::F32, 7);
                let works = if me == 0 {
                    [
                        pg.send(&sbuf, peer, 0).unwrap(),
                        pg.recv(&rbuf, peer, 0).unwrap(),
                    ]
                } else {
                    [
                        pg.recv(&rbuf, peer, 0).unwrap(),
                        pg.send(&sbuf, peer, 0).unwrap(),
                    ]
                };
                for w in works {
                    w.wait_host(Duration::from_secs(20)).unwrap();
                }
                assert_eq!(
                    download(&dr, &rbuf),
                    vec![f64::from(peer) + 0.5; 7],
                    "send/recv"
                );
            }
            pg.barrier().unwrap();
        });
    }
}

#[test]
fn a_peer_that_aborts_fails_the_others_with_its_error() {
    staged_runtime();
    for transport in TRANSPORTS {
        // A timeout far beyond the test: the failure must come from the
        // peer, as a vendor error, not from the timeout.
        let options = options()
            .with_timeout(Duration::from_secs(120))
            .with_staged_transport(transport);
        let errors = with_ranks(2, options, |pg| {
            let (_dev, buf) = upload(pg, DataType::F32, &[1.0; 64]);
            let wait = Duration::from_secs(120);
            pg.all_reduce(&buf, ReduceOp::Sum)
                .unwrap()
                .wait_host(wait)
                .unwrap();
            if pg.rank() == 1 {
                pg.abort("rank 1 leaves");
                return None;
            }
            pg.all_reduce(&buf, ReduceOp::Sum)
                .and_then(|w| w.wait_host(wait))
                .err()
        });
        let err = errors[0]
            .clone()
            .expect("rank 0's second all-reduce must fail");
        assert_eq!(err.kind(), ErrorKind::VendorError, "{transport:?}: {err}");
        assert!(err.to_string().contains("all_reduce #1"), "{err}");
    }
}

#[test]
fn a_missing_rank_times_out() {
    let rt = staged_runtime();
    for transport in TRANSPORTS {
        let store: Arc<dyn Store> = Arc::new(HashStore::new());
        let options = options()
            .with_timeout(Duration::from_millis(300))
            .with_staged_transport(transport);
        let pg = ProcessGroup::new(Arc::clone(&rt), store, 0, 2, 0, options).unwrap();
        let (_dev, buf) = upload(&pg, DataType::F32, &[1.0; 16]);
        let work = pg.all_reduce(&buf, ReduceOp::Sum).unwrap();
        let err = work.wait_host(Duration::from_secs(60)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{transport:?}: {err}");
        assert!(err.to_string().contains("timeout 0.300 s"), "{err}");
        assert!(pg.failure().is_some(), "the group is aborted");
    }
}
