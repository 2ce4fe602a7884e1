//! Hot paths of the stream layer on the host vendor, each beside a plain
//! thread-local read as the baseline (report ratios, not absolute times).
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::cell::Cell;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_stream::{DeviceContext, DeviceGuard, Event, EventFlag};
use dipu_vendor_host::{HostConfig, HostVendor};

thread_local! {
    static BASELINE: Cell<u64> = const { Cell::new(7) };
}

fn hot_paths(c: &mut Criterion) {
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).expect("host vendor"));
    let ctx = DeviceContext::new(vendor).expect("context");
    ctx.set_device(0).unwrap();
    ctx.stream_from_pool(0, false).unwrap(); // create the pool outside the timing

    let mut group = c.benchmark_group("stream");
    group.bench_function("baseline_thread_local_read", |b| {
        b.iter(|| BASELINE.with(|v| black_box(v.get())))
    });
    group.bench_function("device_guard_same_device", |b| {
        b.iter(|| black_box(DeviceGuard::new(ctx, black_box(0)).unwrap()))
    });
    group.bench_function("stream_from_pool", |b| {
        b.iter(|| black_box(ctx.stream_from_pool(0, false).unwrap()))
    });
    group.bench_function("current_stream", |b| {
        b.iter(|| black_box(ctx.current_stream(black_box(0)).unwrap()))
    });
    let stream = ctx.stream_from_pool(0, false).unwrap();
    let mut event = Event::new(ctx, EventFlag::NoTiming);
    group.bench_function("event_record_and_query", |b| {
        b.iter(|| {
            event.record(&stream).unwrap();
            black_box(event.query().unwrap())
        })
    });
    group.finish();
    stream.synchronize().unwrap();
}

criterion_group!(benches, hot_paths);
criterion_main!(benches);
