//! The observers' flag with every observer off, against the same pairs
//! with it compiled out, in one run (4 KiB, BF, host vendor, cache hits):
//!
//! - the hit path `dipu_malloc` and `dipu_free` try first:
//!   `Runtime::allocate_cached` + `free_cached` against
//!   `DeviceAllocators::allocate_cached` + `free_cached`;
//! - the full pair: `Runtime::allocate_raw` + `free_raw` against the same
//!   instantiated without the observers' branches (`bench_*_without_checker`).
//!
//! As in `benches/memcheck.rs`, short blocks of the two variants
//! alternate (their order swapped every round) and the median of the
//! per-round ratios is printed, so that the load of a shared machine
//! drifts alike for both. No criterion rows: the ratios are the figure.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use dipu_runtime::{Algorithm, Runtime, RuntimeOptions, Stream};

/// Which pair to run.
#[derive(Clone, Copy)]
enum Variant {
    /// The hit path without the observers' test.
    HitCompiledOut,
    /// The hit path with it.
    Hit,
    /// The full pair without the observers' branches.
    PairCompiledOut,
    /// The full pair with them.
    Pair,
}

#[inline(always)]
fn one_pair(rt: &Arc<Runtime>, stream: Stream, v: Variant) {
    match v {
        Variant::HitCompiledOut => {
            let all = rt.allocators();
            let p = all
                .allocate_cached(black_box(4096), stream)
                .unwrap_or_else(|| rt.allocate_raw(4096, stream).unwrap());
            if !all.free_cached(p) {
                rt.free_raw(0, p).unwrap();
            }
        }
        Variant::Hit => {
            let p = rt
                .allocate_cached(black_box(4096), stream)
                .unwrap_or_else(|| rt.allocate_raw(4096, stream).unwrap());
            if !rt.free_cached(p) {
                rt.free_raw(0, p).unwrap();
            }
        }
        Variant::PairCompiledOut => {
            let p = rt
                .bench_allocate_without_checker(black_box(4096), stream)
                .unwrap();
            rt.bench_free_raw_without_checker(0, p).unwrap();
        }
        Variant::Pair => {
            let p = rt.allocate_raw(black_box(4096), stream).unwrap();
            rt.free_raw(0, p).unwrap();
        }
    }
}

/// Nanoseconds per pair of `n` pairs of `v`.
fn block(rt: &Arc<Runtime>, stream: Stream, v: Variant, n: u32) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        one_pair(rt, stream, v);
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Alternates blocks of `a` (compiled out) and `b` and prints the medians
/// and the median and quartiles of the per-round ratios b / a.
fn paired(rt: &Arc<Runtime>, stream: Stream, name: &str, a: Variant, b: Variant) {
    const ROUNDS: usize = 201;
    const N: u32 = 20_000;
    let (mut ta, mut tb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS + 4 {
        let (x, y) = if round % 2 == 0 {
            let x = block(rt, stream, a, N);
            (x, block(rt, stream, b, N))
        } else {
            let y = block(rt, stream, b, N);
            (block(rt, stream, a, N), y)
        };
        if round >= 4 {
            ta.push(x);
            tb.push(y);
            ratios.push(y / x);
        }
    }
    for v in [&mut ta, &mut tb, &mut ratios] {
        v.sort_by(f64::total_cmp);
    }
    let mid = ROUNDS / 2;
    println!(
        "{name}: compiled out {:.2} ns, observers off {:.2} ns per pair (medians of {ROUNDS} \
         rounds of {N}); ratio median {:.3} (quartiles {:.3}..{:.3})",
        ta[mid],
        tb[mid],
        ratios[mid],
        ratios[ROUNDS / 4],
        ratios[3 * ROUNDS / 4]
    );
}

/// `--count VARIANT N`: only `N` pairs of one variant (`hit`,
/// `hit-compiled-out`, `pair`, `pair-compiled-out`), untimed, for
/// instruction counts under callgrind (scripts/bench-observers-callgrind.sh).
fn count_only(rt: &Arc<Runtime>, stream: Stream) -> bool {
    let args: Vec<String> = std::env::args().collect();
    let Some(i) = args.iter().position(|a| a == "--count") else {
        return false;
    };
    let v = match args.get(i + 1).map(String::as_str) {
        Some("hit") => Variant::Hit,
        Some("hit-compiled-out") => Variant::HitCompiledOut,
        Some("pair") => Variant::Pair,
        Some("pair-compiled-out") => Variant::PairCompiledOut,
        other => {
            panic!("--count takes hit, hit-compiled-out, pair or pair-compiled-out, not {other:?}")
        }
    };
    let n: u32 = args
        .get(i + 2)
        .and_then(|n| n.parse().ok())
        .expect("--count VARIANT N: N pairs");
    for _ in 0..n {
        one_pair(rt, stream, v);
    }
    println!("{n} pairs");
    true
}

fn main() {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    if count_only(&rt, stream) {
        return;
    }
    paired(
        &rt,
        stream,
        "hit path (allocate_cached + free_cached)",
        Variant::HitCompiledOut,
        Variant::Hit,
    );
    paired(
        &rt,
        stream,
        "full pair (allocate_raw + free_raw)",
        Variant::PairCompiledOut,
        Variant::Pair,
    );
}
