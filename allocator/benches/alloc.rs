//! The allocate+free pair of each device allocator when it hits its cache
//! (host vendor), beside the system allocator's pair (`std::alloc`,
//! 256-byte alignment) as the baseline: report ratios, not absolute times.
//! Ids: `alloc_hit/<BF|BS|TORCH|RAW|system>/<bytes>` (one thread) and
//! `alloc_hit_2threads/...` (two threads at once on one allocator, each on
//! its own stream; the time is per pair per thread). `alloc_replay/<BF|BS|
//! TORCH|system>` replays resnet18.trace on a warm allocator (the general
//! path: splits, merges, misses), BF and BS also with `thread_caches:False`;
//! the time is per replay (7809 events).
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use std::alloc::Layout;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::Throughput;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dipu_allocator::replay::{Trace, TraceEvent};
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

/// A host vendor with 64 GiB of (uncommitted) device memory, device 0 current.
fn host_context() -> &'static DeviceContext {
    let vendor = Arc::new(
        HostVendor::new(HostConfig {
            memory_per_device: 64 << 30,
            ..HostConfig::default()
        })
        .expect("host vendor"),
    );
    let ctx = DeviceContext::new(vendor).expect("context");
    ctx.set_device(0).unwrap();
    ctx
}

fn hit_pair(c: &mut Criterion) {
    let ctx = host_context();
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

/// Runs `pair` `iters` times on each of two threads started together;
/// the slower thread's time.
fn on_two_threads(iters: u64, pair: impl Fn(usize) + Sync) -> Duration {
    let start = Barrier::new(2);
    std::thread::scope(|scope| {
        let run = |thread: usize| {
            let (start, pair) = (&start, &pair);
            move || {
                start.wait();
                let t = Instant::now();
                for _ in 0..iters {
                    pair(thread);
                }
                t.elapsed()
            }
        };
        let other = scope.spawn(run(1));
        let mine = run(0)();
        mine.max(other.join().expect("bench thread"))
    })
}

fn hit_pair_two_threads(c: &mut Criterion) {
    let ctx = host_context();
    let streams = [
        ctx.stream_from_pool(0, false).unwrap(),
        ctx.stream_from_pool(0, false).unwrap(),
    ];
    assert!(streams[0] != streams[1], "two streams");

    let mut group = c.benchmark_group("alloc_hit_2threads");
    for size in SIZES {
        for algorithm in [Algorithm::BestFit, Algorithm::BinSize, Algorithm::Torch] {
            let alloc =
                new_device_allocator(ctx, 0, algorithm, &AllocatorConfig::default()).unwrap();
            let pair = |thread: usize| {
                let a = alloc.allocate(black_box(size), streams[thread]).unwrap();
                alloc.free(black_box(a.ptr)).unwrap();
            };
            // Warm: both threads' first pairs make the segments.
            on_two_threads(10, pair);
            group.bench_function(BenchmarkId::new(algorithm.name(), size), |b| {
                b.iter_custom(|iters| on_two_threads(iters, pair))
            });
            for s in streams {
                s.synchronize().unwrap();
            }
            alloc.empty_cache().unwrap();
        }
        let layout = Layout::from_size_align(size, 256).unwrap();
        group.bench_function(BenchmarkId::new("system", size), |b| {
            b.iter_custom(|iters| {
                on_two_threads(iters, |_| {
                    // SAFETY: `layout` has a nonzero size; the block is
                    // freed once, with the same layout.
                    unsafe {
                        let p = std::alloc::alloc(black_box(layout));
                        assert!(!p.is_null(), "system allocator out of memory");
                        std::alloc::dealloc(black_box(p), layout);
                    }
                })
            })
        });
    }
    group.finish();
}

/// The trace's events with block ids renumbered densely (for a `Vec` of
/// live blocks), and how many ids there are.
fn dense_trace() -> (Vec<TraceEvent>, usize) {
    let text = include_str!("../traces/resnet18.trace");
    let trace = Trace::parse(text).expect("trace parses");
    let mut ids = std::collections::HashMap::new();
    let events: Vec<TraceEvent> = trace
        .events
        .iter()
        .map(|e| match *e {
            TraceEvent::Allocate { id, bytes } => {
                let n = ids.len() as u64;
                TraceEvent::Allocate {
                    id: *ids.entry(id).or_insert(n),
                    bytes,
                }
            }
            TraceEvent::Free { id } => TraceEvent::Free { id: ids[&id] },
        })
        .collect();
    (events, ids.len())
}

/// Replays `events` once: `allocate(bytes)` gives a pointer, `free` takes it
/// back; blocks still live at the end are freed too.
fn replay_once<P: Copy>(
    events: &[TraceEvent],
    live: &mut [Option<P>],
    mut allocate: impl FnMut(usize) -> P,
    mut free: impl FnMut(P),
) {
    for event in events {
        match *event {
            TraceEvent::Allocate { id, bytes } => {
                live[id as usize] = Some(allocate(black_box(bytes)));
            }
            TraceEvent::Free { id } => free(live[id as usize].take().expect("live block")),
        }
    }
    for p in live.iter_mut().filter_map(Option::take) {
        free(p);
    }
}

fn replay_trace(c: &mut Criterion) {
    let ctx = host_context();
    let stream = ctx.stream_from_pool(0, false).unwrap();
    let (events, ids) = dense_trace();
    let mut group = c.benchmark_group("alloc_replay");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.sample_size(20);
    let no_caches = AllocatorConfig {
        thread_caches: false,
        ..AllocatorConfig::default()
    };
    for (algorithm, config, name) in [
        (Algorithm::BestFit, &AllocatorConfig::default(), "BF"),
        (Algorithm::BestFit, &no_caches, "BF,thread_caches:False"),
        (Algorithm::BinSize, &AllocatorConfig::default(), "BS"),
        (Algorithm::BinSize, &no_caches, "BS,thread_caches:False"),
        (Algorithm::Torch, &AllocatorConfig::default(), "TORCH"),
    ] {
        let alloc = new_device_allocator(ctx, 0, algorithm, config).unwrap();
        let mut live = vec![None; ids];
        let mut run = || {
            replay_once(
                &events,
                &mut live,
                |bytes| alloc.allocate(bytes, stream).unwrap().ptr as usize,
                |p| alloc.free(p as *mut std::ffi::c_void).unwrap(),
            )
        };
        run(); // Warm: the first pass makes the segments a training loop keeps.
        group.bench_function(name, |b| b.iter(&mut run));
        assert_eq!(
            alloc.stats().allocated_bytes.current,
            0,
            "{name}: all freed"
        );
        alloc.empty_cache().unwrap();
    }
    let mut live = vec![None; ids];
    group.bench_function("system", |b| {
        b.iter(|| {
            replay_once(
                &events,
                &mut live,
                |bytes| {
                    let layout = Layout::from_size_align(bytes.max(1), 256).unwrap();
                    // SAFETY: `layout` has a nonzero size.
                    let p = unsafe { std::alloc::alloc(layout) };
                    assert!(!p.is_null(), "system allocator out of memory");
                    (p, layout)
                },
                // SAFETY: each block is freed once, with its layout.
                |(p, layout)| unsafe { std::alloc::dealloc(p, layout) },
            )
        })
    });
    group.finish();
}

criterion_group!(benches, hit_pair, hit_pair_two_threads, replay_trace);
criterion_main!(benches);
