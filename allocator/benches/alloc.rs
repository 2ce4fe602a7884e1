//! The allocate+free pair of each device allocator when it hits its cache
//! (host vendor, one thread), beside the system allocator's pair
//! (`std::alloc`, 256-byte alignment) as the baseline: report ratios, not
//! absolute times. Ids: `alloc_hit/<BF|BS|TORCH|RAW|system>/<bytes>`.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::alloc::Layout;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig};
use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

const SIZES: [usize; 3] = [4 << 10, 1 << 20, 16 << 20];
const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::BestFit,
    Algorithm::BinSize,
    Algorithm::Torch,
    Algorithm::Raw,
];

fn hit_pair(c: &mut Criterion) {
    let vendor = Arc::new(
        HostVendor::new(HostConfig {
            memory_per_device: 64 << 30,
            ..HostConfig::default()
        })
        .expect("host vendor"),
    );
    let ctx = DeviceContext::new(vendor).expect("context");
    ctx.set_device(0).unwrap();
    let stream = ctx.stream_from_pool(0, false).unwrap();

    let mut group = c.benchmark_group("alloc_hit");
    for size in SIZES {
        for algorithm in ALGORITHMS {
            let alloc =
                new_device_allocator(ctx, 0, algorithm, &AllocatorConfig::default()).unwrap();
            // The first pair makes the segment; every later one hits the cache.
            let a = alloc.allocate(size, stream).unwrap();
            alloc.free(a.ptr).unwrap();
            let before = alloc.stats().num_device_alloc;
            group.bench_with_input(
                BenchmarkId::new(algorithm.name(), size),
                &size,
                |b, &size| {
                    b.iter(|| {
                        let a = alloc.allocate(black_box(size), stream).unwrap();
                        alloc.free(black_box(a.ptr)).unwrap();
                    })
                },
            );
            if algorithm != Algorithm::Raw {
                assert_eq!(
                    alloc.stats().num_device_alloc,
                    before,
                    "{algorithm} at {size} bytes: every timed pair hit the cache"
                );
            }
            stream.synchronize().unwrap();
            alloc.empty_cache().unwrap();
        }
        let layout = Layout::from_size_align(size, 256).unwrap();
        group.bench_with_input(BenchmarkId::new("system", size), &layout, |b, &layout| {
            b.iter(|| {
                // SAFETY: `layout` has a nonzero size; the block is freed
                // once, with the same layout.
                unsafe {
                    let p = std::alloc::alloc(black_box(layout));
                    assert!(!p.is_null(), "system allocator out of memory");
                    std::alloc::dealloc(black_box(p), layout);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, hit_pair);
criterion_main!(benches);
