//! The cost of the runtime trace on an allocate + free pair through
//! `Runtime` (BF, a cache hit): no hooks (the trace's and the checker's
//! branches compiled out), trace off, and trace on, in one run.
//!
//! As in `benches/memcheck.rs`, a paired measurement alternates short
//! blocks of two variants and prints the median of the per-round ratios,
//! so that the machine's drifting load affects both alike.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_runtime::profiler as prof;
use dipu_runtime::{Algorithm, Runtime, RuntimeOptions, Stream};

/// Which pair to run, and whether the trace records.
#[derive(Clone, Copy)]
enum Variant {
    /// The hooks compiled out.
    NoHooks,
    /// `Runtime::allocate_raw` + `free_raw`, the trace off.
    Off,
    /// The same, the trace on (two events a pair).
    On,
}

#[inline(always)]
fn one_pair(rt: &Arc<Runtime>, stream: Stream, v: Variant) {
    match v {
        Variant::NoHooks => {
            let p = rt
                .bench_allocate_without_checker(black_box(4096), stream)
                .unwrap();
            rt.bench_free_raw_without_checker(0, p).unwrap();
        }
        Variant::Off | Variant::On => {
            let p = rt.allocate_raw(black_box(4096), stream).unwrap();
            rt.free_raw(0, p).unwrap();
        }
    }
}

fn set(v: Variant) {
    match v {
        Variant::On => prof::start(),
        _ => prof::stop(),
    }
}

/// Nanoseconds per pair of `n` pairs of `v`.
fn block(rt: &Arc<Runtime>, stream: Stream, v: Variant, n: u32) -> f64 {
    set(v);
    let t = Instant::now();
    for _ in 0..n {
        one_pair(rt, stream, v);
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
    prof::stop();
    ns
}

/// Alternates blocks of `a` and `b` and prints the medians and the median
/// of the per-round ratios b / a.
fn paired(rt: &Arc<Runtime>, stream: Stream, name: &str, a: Variant, b: Variant, n: u32) {
    const ROUNDS: usize = 101;
    let (mut ta, mut tb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS + 4 {
        let (x, y) = if round % 2 == 0 {
            let x = block(rt, stream, a, n);
            (x, block(rt, stream, b, n))
        } else {
            let y = block(rt, stream, b, n);
            (block(rt, stream, a, n), y)
        };
        if round >= 4 {
            ta.push(x);
            tb.push(y);
            ratios.push(y / x);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ma, mb, mr) = (median(&mut ta), median(&mut tb), median(&mut ratios));
    let (lo, hi) = (ratios[ROUNDS / 4], ratios[3 * ROUNDS / 4]);
    println!(
        "paired {name}: {ma:.1} ns -> {mb:.1} ns per pair (medians of {ROUNDS} rounds of \
         {n}); ratio median {mr:.3} (quartiles {lo:.3}..{hi:.3})"
    );
}

fn pair(c: &mut Criterion) {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    prof::set_capacity(prof::DEFAULT_CAPACITY).unwrap();
    let mut g = c.benchmark_group("profiler_alloc_free");
    for (name, v) in [
        ("no_hooks", Variant::NoHooks),
        ("off", Variant::Off),
        ("on", Variant::On),
    ] {
        set(v);
        g.bench_function(name, |b| b.iter(|| one_pair(&rt, stream, v)));
        prof::stop();
    }
    g.finish();
    paired(
        &rt,
        stream,
        "no_hooks -> off",
        Variant::NoHooks,
        Variant::Off,
        20_000,
    );
    paired(&rt, stream, "off -> on", Variant::Off, Variant::On, 20_000);
    prof::clear();
}

criterion_group!(benches, pair);
criterion_main!(benches);
