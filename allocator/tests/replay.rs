//! Replaying the resnet18 trace through every algorithm.

use std::sync::Arc;

use dipu_allocator::reference;
use dipu_allocator::replay::{replay, Trace};
use dipu_allocator::{
    new_device_allocator, Algorithm, AllocatorConfig, BlockState, DeviceAllocator,
};
use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

fn trace() -> Trace {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/traces/resnet18.trace"
    ))
    .unwrap();
    Trace::parse(&text).unwrap()
}

/// Reserved memory always equals what is cached, allocated and pending.
fn accounted(alloc: &dyn DeviceAllocator) -> dipu_deviceapi::Result<()> {
    let snap = alloc.snapshot();
    let stats = alloc.stats();
    assert_eq!(snap.reserved() as u64, stats.reserved_bytes.current);
    if snap.segments.iter().any(|s| s.pool == "expandable") {
        // Free blocks of expandable segments may span unmapped address space.
        assert!(snap.bytes_in(BlockState::Allocated) <= snap.reserved());
        return Ok(());
    }
    let parts = snap.bytes_in(BlockState::Free)
        + snap.bytes_in(BlockState::Allocated)
        + snap.bytes_in(BlockState::Pending);
    assert_eq!(snap.reserved() as u64, stats.reserved_bytes.current);
    assert_eq!(parts, snap.reserved());
    assert_eq!(
        snap.bytes_in(BlockState::Allocated) as u64,
        stats.allocated_bytes.current
    );
    Ok(())
}

#[test]
fn resnet18_replays_through_every_algorithm() {
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
    let ctx = DeviceContext::new(vendor).unwrap();
    let trace = trace();
    let expandable = AllocatorConfig::parse("expandable_segments:True").unwrap();
    let runs = Algorithm::ALL
        .into_iter()
        .map(|a| (a, AllocatorConfig::default()))
        .chain([
            (Algorithm::BestFit, expandable.clone()),
            (Algorithm::Torch, expandable),
        ]);
    for (algorithm, config) in runs {
        for streams in [1usize, 3] {
            let alloc = new_device_allocator(ctx, 0, algorithm, &config).unwrap();
            let pool: Vec<_> = (0..streams)
                .map(|_| ctx.stream_from_pool(0, false).unwrap())
                .collect();
            let mut step = 0usize;
            let report = replay(&trace, alloc.as_ref(), &pool, |a| {
                step += 1;
                if step % 97 == 0 {
                    accounted(a)?;
                }
                Ok(())
            })
            .unwrap();
            println!(
                "{algorithm:>5} {} streams {streams}: peak requested {:.1} MiB, peak reserved {:.1} MiB, ratio {:.3}, \
                 segments {}, vendor mallocs {}, alloc {:?}, free {:?}",
                if config.expandable_segments { "expandable" } else { "" },
                report.peak_requested as f64 / 1048576.0,
                report.peak_reserved as f64 / 1048576.0,
                report.ratio(),
                report.segments,
                report.vendor_mallocs,
                report.allocate_time,
                report.free_time
            );
            assert_eq!(report.events, trace.events.len());
            assert!(report.ratio() >= 1.0);
            for s in &pool {
                s.synchronize().unwrap();
            }
            alloc.empty_cache().unwrap();
            let stats = alloc.stats();
            assert_eq!(
                stats.allocated_bytes.current, 0,
                "{algorithm}: every block returned"
            );
            assert_eq!(
                stats.active_bytes.current, 0,
                "{algorithm}: nothing pending after sync"
            );
            assert_eq!(
                stats.reserved_bytes.current, 0,
                "{algorithm}: empty_cache returns every segment"
            );
        }
    }
}

/// Peak reserved bytes of a one-stream replay of `trace` with `algorithm`.
fn peak_reserved(ctx: &'static DeviceContext, trace: &Trace, algorithm: Algorithm) -> u64 {
    let alloc = new_device_allocator(ctx, 0, algorithm, &AllocatorConfig::default()).unwrap();
    let stream = ctx.stream_from_pool(0, false).unwrap();
    let report = replay(trace, alloc.as_ref(), &[stream], |_| Ok(())).unwrap();
    stream.synchronize().unwrap();
    alloc.empty_cache().unwrap();
    report.peak_reserved
}

#[test]
fn bf_and_bs_reserve_less_than_the_models_of_dipus_own() {
    const MIB: f64 = 1048576.0;
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
    let ctx = DeviceContext::new(vendor).unwrap();
    let trace = trace();
    let dipu_bf = reference::dipu_bf(&trace);
    let dipu_bs = reference::dipu_bs(&trace);
    // The figures a separate script modelling the same rules gave.
    assert_eq!(dipu_bf.peak_reserved, 512 << 20, "DIPU BF model");
    assert_eq!(dipu_bf.vendor_mallocs, 5, "DIPU BF model: 8 to 256 MiB");
    assert_eq!(
        format!("{:.2}", dipu_bs.peak_reserved as f64 / MIB),
        "689.28",
        "DIPU BS model"
    );
    let bf = peak_reserved(ctx, &trace, Algorithm::BestFit);
    let bs = peak_reserved(ctx, &trace, Algorithm::BinSize);
    assert!(
        bf < dipu_bf.peak_reserved,
        "BF {} MiB against DIPU's {} MiB",
        bf as f64 / MIB,
        dipu_bf.peak_reserved as f64 / MIB
    );
    assert!(
        bs < dipu_bs.peak_reserved,
        "BS {} MiB against DIPU's {} MiB",
        bs as f64 / MIB,
        dipu_bs.peak_reserved as f64 / MIB
    );
}
