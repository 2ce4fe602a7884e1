//! N allocate + free pairs of SIZE bytes through `Runtime` (BF) with the
//! memory checker on and GUARD guard bytes (0: none), on a pooled stream of
//! the host vendor's device 0, its stream idle: the pairs of
//! `benches/memcheck_guards.rs` without the clock, for instruction counts
//! under callgrind
//! (docs/benchmarks.md, "Memory checker"):
//!
//! ```sh
//! cargo build --release -p dipu-runtime --example guarded_pair
//! valgrind --tool=callgrind --separate-threads=yes target/release/examples/guarded_pair 64 20000 4096
//! ```
//!
//! Per pair: (instructions of the main thread at 2N - at N) / N.
//! Usage: `guarded_pair [GUARD [N [SIZE]]]` (default 64 guard bytes, 1000
//! pairs of 4096 bytes).

use std::hint::black_box;

use dipu_runtime::memcheck::{self, MemCheck};
use dipu_runtime::{Algorithm, Runtime, RuntimeOptions};

fn main() -> dipu_runtime::Result<()> {
    let mut args = std::env::args().skip(1);
    let guard: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4096);
    MemCheck::enable(false);
    memcheck::set_options(guard, false);
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit))?;
    let stream = rt.context().stream_from_pool(0, false)?;
    // One pair, then the guards' first fill is waited for: every pair
    // after it finds the stream idle, as on a machine whose stream keeps
    // up (under valgrind, which runs one thread at a time, the worker might
    // otherwise never catch up, and every reuse would take the busy path).
    let p = rt.allocate_raw(size, stream)?;
    rt.free_raw(0, p)?;
    stream.synchronize()?;
    for _ in 0..n {
        let p = rt.allocate_raw(black_box(size), stream)?;
        rt.free_raw(0, black_box(p))?;
    }
    let violations = rt.check_guards()?;
    println!("{n} pairs of {size} bytes, {guard} guard bytes, {violations} violations");
    MemCheck::disable();
    Ok(())
}
