//! Replaying the resnet18 trace through every algorithm.

use std::sync::Arc;

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
