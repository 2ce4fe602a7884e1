//! The cost of the memory history on a BF cache-hit pair (host vendor):
//! `history/bare` (the allocator alone, the baseline), `history/off`
//! (wrapped, not recording), `history/on` (recording into a ring of
//! 100 000 events) and `history/on_stacks` (with short stacks). Each
//! iteration is one allocate+free pair, i.e. two recorded events when on:
//! report ratios to `bare`, and per event (on - bare) / 2.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use dipu_allocator::history::History;
use dipu_allocator::{new_device_allocator_in, Algorithm, AllocatorConfig, SegmentMap};
use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

fn history(c: &mut Criterion) {
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).expect("host vendor"));
    let ctx = DeviceContext::new(vendor).expect("context");
    let stream = ctx.stream_from_pool(0, false).unwrap();
    let mut group = c.benchmark_group("history");
    for (name, record, stacks) in [
        ("bare", None, false),
        ("off", Some(0), false),
        ("on", Some(100_000), false),
        ("on_stacks", Some(100_000), true),
    ] {
        let segments = Arc::new(SegmentMap::new());
        let inner = new_device_allocator_in(
            ctx,
            0,
            Algorithm::BestFit,
            &AllocatorConfig::default(),
            Arc::clone(&segments),
        )
        .unwrap();
        let h = History::new();
        let alloc = match record {
            None => inner,
            Some(n) => {
                let wrapped = h.wrap(0, inner, segments);
                h.record(n, stacks);
                wrapped
            }
        };
        let a = alloc.allocate(4096, stream).unwrap();
        alloc.free(a.ptr).unwrap();
        group.bench_function(name, |b| {
            b.iter(|| {
                let a = alloc.allocate(black_box(4096), stream).unwrap();
                alloc.free(a.ptr).unwrap();
            })
        });
    }
    group.finish();
}

criterion_group!(benches, history);
criterion_main!(benches);
