//! All-reduce bandwidth of the host vendor with ranks as threads, next to
//! the machine's single-thread memcpy bandwidth.
//!
//! ```sh
//! cargo run --release -p dipu-vendor-host --example allreduce_bw [-- RANKS [MIB,...]]
//! ```
//!
//! Prints, for each size (default 1, 16 and 64 MiB) of f32 (sum, out of
//! place): the time per all-reduce (the best of 5 batches, each batch's
//! time being its slowest rank's), the algorithm bandwidth (bytes / time)
//! and NCCL's bus bandwidth (algbw x 2(n-1)/n, equal to algbw for 2 ranks).
//!
//! Thread ranks read each other's buffers directly; with
//! `DIPU_HOST_COMM_DIRECT=0` every byte is staged through shared memory
//! instead (the form ranks use when they cannot read each other).

use std::ffi::c_void;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use dipu_deviceapi::{CopyKind, DataType, DeviceApi, ReduceOp, StreamHandle};
use dipu_vendor_host::{HostConfig, HostVendor};

const MIB: usize = 1 << 20;

fn main() {
    let ranks: usize = std::env::args()
        .nth(1)
        .map_or(2, |a| a.parse().expect("RANKS: a number of ranks"));
    let sizes: Vec<f64> = std::env::args().nth(2).map_or(vec![1.0, 16.0, 64.0], |a| {
        a.split(',')
            .map(|m| m.parse().expect("MIB,...: sizes in MiB"))
            .collect()
    });
    println!(
        "memcpy, 1 thread, 64 MiB: {:.2} GB/s",
        memcpy_gbps(64 * MIB)
    );
    for mib in sizes {
        // Whole f32 elements.
        let bytes = ((mib * MIB as f64) as usize).max(8) / 4 * 4;
        let (per_op, algbw) = all_reduce(ranks, bytes);
        let busbw = algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64;
        println!(
            "all_reduce f32 sum, {ranks} ranks (threads), {mib:>6} MiB: {:>8.3} ms  \
             algbw {algbw:.2} GB/s  busbw {busbw:.2} GB/s",
            per_op.as_secs_f64() * 1e3
        );
    }
}

/// The best of a few single-thread copies of `bytes`, in GB/s.
fn memcpy_gbps(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let best = (0..10)
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&mut dst);
            t.elapsed()
        })
        .min()
        .unwrap_or(Duration::MAX);
    bytes as f64 / best.as_secs_f64() / 1e9
}

/// Batches timed per size.
const BATCHES: usize = 5;

/// Time per all-reduce of `bytes` over `ranks` thread ranks and the
/// algorithm bandwidth.
fn all_reduce(ranks: usize, bytes: usize) -> (Duration, f64) {
    let host = HostVendor::new(HostConfig {
        devices: ranks as i32,
        ..HostConfig::default()
    })
    .expect("host vendor");
    let id = host.comm_get_unique_id().expect("unique id");
    let iters = (128 * MIB / bytes).clamp(2, 100);
    let barrier = Barrier::new(ranks);
    let times: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..ranks)
            .map(|rank| {
                let (host, id, barrier) = (&host, &id, &barrier);
                scope.spawn(move || rank_main(host, id, barrier, (rank, ranks), bytes, iters))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("rank"))
            .collect()
    });
    let batch = |b: usize| times.iter().map(|t| t[b]).max().unwrap_or_default();
    let best = (0..BATCHES).map(batch).min().unwrap_or_default();
    let per_op = best / iters as u32;
    (per_op, bytes as f64 / per_op.as_secs_f64() / 1e9)
}

fn rank_main(
    host: &HostVendor,
    id: &[u8],
    barrier: &Barrier,
    (rank, ranks): (usize, usize),
    bytes: usize,
    iters: usize,
) -> Vec<Duration> {
    host.set_device(rank as i32).expect("set_device");
    let comm = host
        .comm_init_rank(ranks as i32, id, rank as i32)
        .expect("comm_init_rank");
    let (send, recv) = (host.malloc(bytes).unwrap(), host.malloc(bytes).unwrap());
    let values: Vec<f32> = (0..bytes / 4).map(|i| (i % 1000) as f32).collect();
    let s = StreamHandle::DEFAULT;
    let count = bytes / 4;
    // SAFETY: `send` and `recv` are live device buffers of `bytes`, the
    // stream and communicator are live, and everything is synchronised
    // before the buffers are freed.
    unsafe {
        host.memcpy(
            send,
            values.as_ptr().cast::<c_void>(),
            bytes,
            CopyKind::HostToDevice,
        )
        .unwrap();
        let run = |n| {
            for _ in 0..n {
                host.all_reduce(send, recv, count, DataType::F32, ReduceOp::Sum, comm, s)
                    .unwrap();
            }
            host.stream_synchronize(s).unwrap();
        };
        run(2); // warm up: page faults, caches
        let elapsed: Vec<Duration> = (0..BATCHES)
            .map(|_| {
                barrier.wait();
                let t = Instant::now();
                run(iters);
                t.elapsed()
            })
            .collect();
        let mut first = [0f32; 2];
        host.memcpy(first.as_mut_ptr().cast(), recv, 8, CopyKind::DeviceToHost)
            .unwrap();
        assert_eq!(first, [0.0, ranks as f32], "wrong result");
        host.comm_async_error(comm).expect("healthy");
        host.comm_destroy(comm).unwrap();
        host.free(send).unwrap();
        host.free(recv).unwrap();
        elapsed
    }
}
