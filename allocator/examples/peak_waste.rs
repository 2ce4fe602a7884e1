//! Where the reserved-but-unallocated memory is at the moment of peak
//! reserved memory, when a trace is replayed through one algorithm:
//! `cargo run --release -p dipu-allocator --example peak_waste -- TRACE [ALGO] [CONF]`.
//! Prints every segment at that moment with its allocated and free bytes.

use std::sync::Arc;

use dipu_allocator::replay::{replay, Trace};
use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig, BlockState, Snapshot};
use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: peak_waste TRACE [ALGO] [CONF]")?;
    let algorithm: Algorithm = args.next().as_deref().unwrap_or("BF").parse()?;
    let config = AllocatorConfig::parse(args.next().as_deref().unwrap_or(""))?;
    let trace = Trace::parse(&std::fs::read_to_string(path)?)?;
    let vendor = Arc::new(HostVendor::new(HostConfig {
        memory_per_device: 64 << 30,
        ..HostConfig::default()
    })?);
    let ctx = DeviceContext::new(vendor)?;
    let alloc = new_device_allocator(ctx, 0, algorithm, &config)?;
    let stream = ctx.stream_from_pool(0, false)?;
    let (mut peak, mut at_peak, mut event) = (0u64, Snapshot::default(), 0usize);
    let mut n = 0usize;
    let report = replay(&trace, alloc.as_ref(), &[stream], |a| {
        n += 1;
        let reserved = a.stats().reserved_bytes.current;
        if reserved > peak {
            (peak, at_peak, event) = (reserved, a.snapshot(), n);
        }
        Ok(())
    })?;
    let mib = |b: usize| b as f64 / f64::from(1 << 20);
    println!(
        "{algorithm}: peak reserved {:.2} MiB after event {event}, peak requested {:.2} MiB, ratio {:.3}, vendor mallocs {}",
        mib(peak as usize),
        mib(report.peak_requested),
        report.ratio(),
        report.vendor_mallocs
    );
    let (allocated, free) = (
        at_peak.bytes_in(BlockState::Allocated),
        at_peak.bytes_in(BlockState::Free),
    );
    let requested: usize = at_peak
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .map(|b| b.requested)
        .sum();
    println!(
        "at the peak: allocated {:.2} MiB (requested {:.2}), free {:.2} MiB in {} segments",
        mib(allocated),
        mib(requested),
        mib(free),
        at_peak.segments.len()
    );
    println!("segment MiB | allocated blocks (MiB) | free blocks (MiB)");
    for s in &at_peak.segments {
        let list = |state: BlockState| {
            s.blocks
                .iter()
                .filter(|b| b.state == state)
                .map(|b| format!("{:.3}", mib(b.size)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{:>8.2} {:<6} | {} | {}",
            mib(s.size),
            s.pool,
            list(BlockState::Allocated),
            list(BlockState::Free)
        );
    }
    Ok(())
}
