//! The cost of the memory checker on an allocate + free pair through
//! `Runtime` (BF): no checker (its branches compiled out), checker off,
//! on, and on with backtraces, in one run.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_runtime::memcheck::MemCheck;
use dipu_runtime::{Algorithm, Runtime, RuntimeOptions};

fn pair(c: &mut Criterion) {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    // Warm-up and measurement times come from the command line.
    let mut g = c.benchmark_group("memcheck_alloc_free");
    // The baseline: the same pair with the checker's branches compiled out
    // (`Runtime::allocate` and `free_raw` instantiated without them), so
    // `off` minus `no_checker` is what the off checker costs.
    MemCheck::disable();
    g.bench_function("no_checker", |b| {
        b.iter(|| {
            let p = rt
                .bench_allocate_without_checker(black_box(4096), stream)
                .unwrap()
                .into_raw();
            rt.bench_free_raw_without_checker(0, p).unwrap();
        })
    });
    for (name, on, backtraces) in [
        ("off", false, false),
        ("on", true, false),
        ("on_backtrace", true, true),
    ] {
        MemCheck::disable();
        if on {
            MemCheck::enable(backtraces);
        }
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = rt.allocate(black_box(4096), stream).unwrap().into_raw();
                rt.free_raw(0, p).unwrap();
            })
        });
    }
    MemCheck::disable();
    MemCheck::clear();
    g.finish();
}

criterion_group!(benches, pair);
criterion_main!(benches);
