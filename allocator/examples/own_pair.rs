//! N allocate+free pairs of SIZE bytes through `BF`'s own allocator on a
//! pooled stream of the host vendor's device 0 (cache hits after the
//! first): the baseline of `scripts/alloc_pair.c`, which makes the same
//! pairs through the C ABI. Instructions per pair under callgrind, as
//! docs/benchmarks.md ("The C ABI's pair") does:
//!
//! ```sh
//! cargo build --release -p dipu-allocator --example own_pair
//! valgrind --tool=callgrind target/release/examples/own_pair 40000 4096
//! ```
//!
//! Usage: `own_pair [N [SIZE]]` (default 1000 pairs of 4096 bytes).

use std::hint::black_box;
use std::sync::Arc;

use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig};
use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

fn main() -> dipu_deviceapi::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4096);
    let ctx = DeviceContext::new(Arc::new(HostVendor::new(HostConfig::default())?))?;
    let alloc = new_device_allocator(ctx, 0, Algorithm::BestFit, &AllocatorConfig::default())?;
    let stream = ctx.stream_from_pool(0, false)?;
    for _ in 0..n {
        let a = alloc.allocate(size, stream)?;
        alloc.free(black_box(a.ptr))?;
    }
    println!("{n} pairs of {size} bytes");
    Ok(())
}
