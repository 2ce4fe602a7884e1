//! The cost of the memory checker on an allocate + free pair through
//! `Runtime` (BF): no checker (its branches compiled out), checker off,
//! on, and on with backtraces, in one run; and the hit path the C ABI
//! tries first (`allocate_cached` + `free_cached`) without and with the
//! checker's test, the checker off.
//!
//! Besides criterion's rows (each measured in its own time window), a
//! paired measurement alternates short blocks of two variants many times
//! and prints the median of the per-round ratios: on a shared machine the
//! load drifts between criterion's windows, while the two blocks of one
//! round see the same load.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_runtime::memcheck::MemCheck;
use dipu_runtime::{Algorithm, Runtime, RuntimeOptions, Stream};

/// Which pair to run.
#[derive(Clone, Copy)]
enum Variant {
    /// The checker's branches compiled out.
    NoChecker,
    /// `Runtime::allocate` + `free_raw`, the checker as set.
    Runtime,
    /// The hit path `dipu_malloc` and `dipu_free` try first, without the
    /// checker's test (`DeviceAllocators::allocate_cached` + `free_cached`).
    CachedNoChecker,
    /// `Runtime::allocate_cached` + `free_cached` (the checker's test
    /// included), the full path when they miss.
    Cached,
}

#[inline(always)]
fn one_pair(rt: &Arc<Runtime>, stream: Stream, v: Variant) {
    match v {
        Variant::NoChecker => {
            let p = rt
                .bench_allocate_without_checker(black_box(4096), stream)
                .unwrap();
            rt.bench_free_raw_without_checker(0, p).unwrap();
        }
        Variant::Runtime => {
            let p = rt.allocate_raw(black_box(4096), stream).unwrap();
            rt.free_raw(0, p).unwrap();
        }
        Variant::CachedNoChecker => {
            let all = rt.allocators();
            let p = all
                .allocate_cached(black_box(4096), stream)
                .unwrap_or_else(|| rt.allocate_raw(4096, stream).unwrap());
            if !all.free_cached(p) {
                rt.free_raw(0, p).unwrap();
            }
        }
        Variant::Cached => {
            let p = rt
                .allocate_cached(black_box(4096), stream)
                .unwrap_or_else(|| rt.allocate_raw(4096, stream).unwrap());
            if !rt.free_cached(p) {
                rt.free_raw(0, p).unwrap();
            }
        }
    }
}

/// The checker's state for a row: (on, backtraces).
fn set_checker(on: bool, backtraces: bool) {
    MemCheck::disable();
    if on {
        MemCheck::enable(backtraces);
    }
}

/// Nanoseconds per pair of `n` pairs of `v` with the checker as `checker`.
fn block(rt: &Arc<Runtime>, stream: Stream, v: Variant, checker: (bool, bool), n: u32) -> f64 {
    set_checker(checker.0, checker.1);
    let t = Instant::now();
    for _ in 0..n {
        one_pair(rt, stream, v);
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Alternates blocks of `a` and `b` (their order swapped every round) and
/// prints the medians and the median of the per-round ratios b / a.
fn paired(
    rt: &Arc<Runtime>,
    stream: Stream,
    name: &str,
    a: (Variant, (bool, bool)),
    b: (Variant, (bool, bool)),
    n: u32,
) {
    const ROUNDS: usize = 101;
    let (mut ta, mut tb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS + 4 {
        let (x, y) = if round % 2 == 0 {
            let x = block(rt, stream, a.0, a.1, n);
            (x, block(rt, stream, b.0, b.1, n))
        } else {
            let y = block(rt, stream, b.0, b.1, n);
            (block(rt, stream, a.0, a.1, n), y)
        };
        if round >= 4 {
            // The first rounds warm the caches and the unwinder up.
            ta.push(x);
            tb.push(y);
            ratios.push(y / x);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ma, mb) = (median(&mut ta), median(&mut tb));
    let mr = median(&mut ratios);
    let (lo, hi) = (ratios[ROUNDS / 4], ratios[3 * ROUNDS / 4]);
    println!(
        "paired {name}: {ma:.1} ns -> {mb:.1} ns per pair (medians of {ROUNDS} rounds of \
         {n}); ratio median {mr:.3} (quartiles {lo:.3}..{hi:.3})"
    );
}

fn pair(c: &mut Criterion) {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    // Warm-up and measurement times come from the command line.
    let mut g = c.benchmark_group("memcheck_alloc_free");
    // The baseline: the same pair with the checker's branches compiled out
    // (`Runtime::allocate` and `free_raw` instantiated without them), so
    // `off` minus `no_checker` is what the off checker costs.
    for (name, variant, on, backtraces) in [
        ("no_checker", Variant::NoChecker, false, false),
        ("off", Variant::Runtime, false, false),
        ("on", Variant::Runtime, true, false),
        ("on_backtrace", Variant::Runtime, true, true),
    ] {
        set_checker(on, backtraces);
        g.bench_function(name, |b| b.iter(|| one_pair(&rt, stream, variant)));
    }
    g.finish();

    let none = (Variant::NoChecker, (false, false));
    let off = (Variant::Runtime, (false, false));
    let on = (Variant::Runtime, (true, false));
    let traced = (Variant::Runtime, (true, true));
    paired(&rt, stream, "no_checker -> off", none, off, 20_000);
    let cached_none = (Variant::CachedNoChecker, (false, false));
    let cached_off = (Variant::Cached, (false, false));
    paired(
        &rt,
        stream,
        "hit path: no_checker -> off",
        cached_none,
        cached_off,
        20_000,
    );
    paired(&rt, stream, "off -> on", off, on, 20_000);
    paired(&rt, stream, "off -> on_backtrace", off, traced, 2_000);
    MemCheck::disable();
    MemCheck::clear();
}

criterion_group!(benches, pair);
criterion_main!(benches);
