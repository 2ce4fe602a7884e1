//! What one recorded event costs: an allocator-style event (timestamps,
//! the thread's track, three arguments) pushed into the ring, with the
//! trace on (the ring full, so each push also drops the oldest) and off.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_profiler::{self as prof, Args, Category, Track};

#[inline(always)]
fn one_event(i: u64) {
    if prof::enabled() {
        let t0 = prof::now_ns();
        prof::complete(
            "allocate",
            Category::Allocator,
            Track::current_thread(),
            t0,
            prof::now_ns() - t0,
            Args::new()
                .u64("bytes", black_box(4096))
                .hex("ptr", black_box(i))
                .hex("stream", 0),
        );
    }
}

fn record(c: &mut Criterion) {
    prof::set_capacity(100_000).unwrap();
    let mut g = c.benchmark_group("profiler_record");
    prof::stop();
    let mut i = 0u64;
    g.bench_function("off", |b| {
        b.iter(|| {
            i += 1;
            one_event(i)
        })
    });
    prof::start();
    // Fill the ring first: the steady state drops the oldest event.
    for i in 0..100_000 {
        one_event(i);
    }
    g.bench_function("on", |b| {
        b.iter(|| {
            i += 1;
            one_event(i)
        })
    });
    prof::stop();
    prof::clear();
    g.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
