//! The cost of the memory checker on an allocate + free pair through
//! `Runtime` (BF): checker off, on, and on with backtraces, in one run.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_runtime::memcheck::MemCheck;
use dipu_runtime::{Algorithm, Runtime, RuntimeOptions};

fn pair(c: &mut Criterion) {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    let mut g = c.benchmark_group("memcheck_alloc_free");
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
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
