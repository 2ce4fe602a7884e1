//! `dipu bench`: micro-benchmarks on the built-in host vendor.

use std::alloc::Layout;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use clap::Subcommand;
use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig};
use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, Stream};

use crate::Failure;

#[path = "bench_cabi.rs"]
mod bench_cabi;
#[path = "bench_comm.rs"]
mod bench_comm;
#[path = "bench_store.rs"]
mod bench_store;
#[path = "bench_sync.rs"]
mod bench_sync;

/// What `dipu bench` measures.
#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// The allocate+free pair of every device allocator when it hits the
    /// cache, beside the system allocator's pair (std::alloc, 256-byte
    /// alignment), at 512 B to 16 MiB, on 1 and 2 threads; then the C ABI's
    /// pair (dipu_malloc + dipu_free through libdipu_runtime.so) beside BF's
    /// own, on one thread, two threads on one device and two on two.
    Alloc {
        /// Timed pairs per thread for each figure, in 5 rounds (the median
        /// round is reported).
        #[arg(long, value_name = "N", default_value_t = 50_000,
              value_parser = clap::value_parser!(u32).range(5..))]
        iterations: u32,
        /// The C ABI library to time (default: libdipu_runtime.so next to
        /// `dipu`, as `cargo build --release -p dipu-ffi` leaves it).
        #[arg(long, value_name = "PATH")]
        c_abi_lib: Option<std::path::PathBuf>,
    },
    /// All-reduce (f32 sum) bus bandwidth of the host vendor's collectives,
    /// the ranks being processes, beside single-thread memcpy bandwidth.
    Comm(bench_comm::CommArgs),
    /// How fast a TCPStore server serves many clients at once (connect,
    /// set+get+add cycles, a barrier): ours, or any server that speaks
    /// torch's protocol (`--server HOST:PORT`).
    Store(bench_store::StoreArgs),
    /// How fast a thread and the host vendor's streams meet under each
    /// `DIPU_HOST_SCHEDULE`: a copy + synchronize round trip, a synchronous
    /// copy and an event record + synchronize beside a plain memcpy, and
    /// the CPU burnt while streams sit idle. With `--vendor`, the copy +
    /// synchronize round trip through the runtime on that vendor beside the
    /// same loop on the vendor's own API (OpenCL).
    Sync(bench_sync::SyncArgs),
}

/// Runs the benchmark `what` names.
pub(crate) fn run(what: &BenchCommand) -> Result<(), Failure> {
    match *what {
        BenchCommand::Alloc {
            iterations,
            ref c_abi_lib,
        } => alloc(iterations, c_abi_lib.as_deref()).map_err(Failure::from),
        BenchCommand::Comm(ref args) => bench_comm::run(args).map_err(Failure::from),
        BenchCommand::Store(ref args) => bench_store::run(args).map_err(Failure::from),
        BenchCommand::Sync(ref args) => bench_sync::run(args).map_err(Failure::from),
    }
}

/// The request sizes.
const SIZES: [usize; 5] = [512, 4 << 10, 64 << 10, 1 << 20, 16 << 20];
/// The thread counts.
const THREADS: [usize; 2] = [1, 2];
/// Timed rounds per figure; the median is reported.
const ROUNDS: u32 = 5;
/// The alignment of the system allocator's pair (the host vendor's and
/// the caching allocators' granularity is at least this).
const SYSTEM_ALIGN: usize = 256;

/// A ratio with at least two decimals and three significant digits, so a
/// small one (a system pair slowed by `mmap`) does not print as 0.00.
fn ratio_text(ratio: f64) -> String {
    let decimals = if ratio.is_finite() && ratio > 0.0 && ratio < 1.0 {
        (2.0 - ratio.log10().floor()).max(2.0) as usize
    } else {
        2
    };
    format!("{ratio:.decimals$}")
}

/// `dipu bench alloc`.
fn alloc(iterations: u32, c_abi_lib: Option<&std::path::Path>) -> Result<()> {
    let started = Instant::now();
    crate::outln!(
        "allocate+free pairs on the host vendor, warmed up so every caching allocator hits its \
         cache; {iterations} timed pairs per thread per figure in {ROUNDS} rounds, median round"
    );
    crate::outln!(
        "ns/pair: per pair per thread (each thread its own pooled stream, one allocator shared); \
         ratio: over the system allocator (std::alloc, {SYSTEM_ALIGN}-byte alignment) at the same \
         size and thread count (measured first in the run); vendor mallocs: during the timed \
         pairs (0: every pair hit the cache)"
    );
    crate::outln!();
    crate::outln!(
        "{:>8} {:>7}  {:<9} {:>9} {:>8} {:>15}",
        "size",
        "threads",
        "allocator",
        "ns/pair",
        "ratio",
        "vendor mallocs"
    );
    // The system allocator's pairs first, before the host vendor starts,
    // so what the device allocators and the vendor leave in glibc's heap
    // does not change the baseline.
    let mut system = Vec::with_capacity(SIZES.len() * THREADS.len());
    for size in SIZES {
        for threads in THREADS {
            system.push(system_pair(size, threads, iterations)?);
        }
    }
    let mut system = system.into_iter();
    let ctx = crate::vendor::host_context()?;
    let streams: Vec<Stream> = (0..THREADS[THREADS.len() - 1])
        .map(|_| ctx.stream_from_pool(0, false))
        .collect::<Result<_>>()?;
    for size in SIZES {
        for threads in THREADS {
            let system = system.next().unwrap_or(f64::NAN);
            crate::outln!(
                "{:>8} {:>7}  {:<9} {:>9.1} {:>8.2} {:>15}",
                human(size),
                threads,
                "system",
                system,
                1.0,
                "-"
            );
            for algorithm in Algorithm::ALL {
                let (ns, mallocs) =
                    device_pair(ctx, algorithm, size, &streams[..threads], iterations)
                        .map_err(|e| e.context(format_args!("{algorithm}, {}", human(size))))?;
                crate::outln!(
                    "{:>8} {:>7}  {:<9} {:>9.1} {:>8} {:>15}",
                    human(size),
                    threads,
                    algorithm.name(),
                    ns,
                    ratio_text(ns / system),
                    mallocs
                );
            }
        }
        crate::outln!();
    }
    crate::outln!(
        "note: glibc's aligned pair takes about 50 ns or about 130-165 ns depending on the \
         state of its heap (so on what ran before), and at 16 MiB on a thread's arena it maps a \
         fresh heap every pair; read ratios against the fast figure"
    );
    crate::outln!();
    match bench_cabi::library_path(c_abi_lib) {
        Some(lib) => {
            crate::outln!(
                "the C ABI pair: dipu_malloc + dipu_free through {} (BF, pooled streams), beside \
                 BF's own pair (one allocator per device), alternated {} times, median; x1thr: \
                 per-thread throughput over the same pair's one-thread figure",
                lib.display(),
                bench_cabi::REPEATS
            );
            bench_cabi::run(ctx, &lib, iterations)?;
        }
        None => crate::outln!(
            "the C ABI pair: not measured, no libdipu_runtime.so next to this binary (build it \
             with `cargo build --release -p dipu-ffi`, or pass --c-abi-lib PATH)"
        ),
    }
    crate::outln!("took {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// ns per pair of `algorithm`'s allocator at `size`, one thread per
/// stream, and the vendor mallocs made while timing (0 for a cache hit).
fn device_pair(
    ctx: &'static DeviceContext,
    algorithm: Algorithm,
    size: usize,
    streams: &[Stream],
    iterations: u32,
) -> Result<(f64, u64)> {
    let alloc = new_device_allocator(ctx, 0, algorithm, &AllocatorConfig::default())?;
    let pair = |thread: usize| -> Result<()> {
        let a = alloc.allocate(size, streams[thread])?;
        alloc.free(black_box(a.ptr))
    };
    let mallocs = || alloc.stats().num_device_alloc;
    let result = measure(streams.len(), iterations, &pair, &mallocs);
    for s in streams {
        s.synchronize()?;
    }
    alloc.empty_cache()?;
    result
}

/// ns per pair of the system allocator at `size` on `threads` threads.
fn system_pair(size: usize, threads: usize, iterations: u32) -> Result<f64> {
    let layout = Layout::from_size_align(size, SYSTEM_ALIGN)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("layout of {size} bytes: {e}")))?;
    let pair = |_thread: usize| -> Result<()> {
        // SAFETY: `layout` has a nonzero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!("the system allocator refused {size} bytes"),
            ));
        }
        // SAFETY: `p` came from `alloc` with `layout` and is freed once;
        // `black_box` keeps the pair from being optimised away.
        unsafe { std::alloc::dealloc(black_box(p), layout) };
        Ok(())
    };
    measure(threads, iterations, &pair, &|| 0).map(|(ns, _)| ns)
}

/// Runs `pair(thread)` on `threads` threads at once (one: the calling
/// thread): a warm-up, then
/// [`ROUNDS`] rounds of `iterations / ROUNDS` timed pairs per thread, the
/// threads starting each round together. Returns the median round's mean
/// ns per pair per thread, and how much `counter` grew over the timed
/// rounds.
fn measure<F>(
    threads: usize,
    iterations: u32,
    pair: &F,
    counter: &(dyn Fn() -> u64 + Sync),
) -> Result<(f64, u64)>
where
    F: Fn(usize) -> Result<()> + Sync,
{
    let per_round = (iterations / ROUNDS).max(1);
    let warm_up = (per_round / 4).max(16);
    let barrier = Barrier::new(threads);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        failed.store(true, Ordering::Relaxed);
        first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let counts = Mutex::new((0u64, 0u64));
    // rounds[thread][round]: ns per pair.
    // One thread's part: warm-up, then the timed rounds (ns per pair each).
    // Every thread reaches every barrier, even after an error, so none
    // waits forever.
    let worker = |thread: usize| -> Vec<f64> {
        for _ in 0..warm_up {
            if let Err(e) = pair(thread) {
                fail(e);
                break;
            }
        }
        barrier.wait();
        if thread == 0 {
            counts.lock().unwrap_or_else(|p| p.into_inner()).0 = counter();
        }
        let mut times = Vec::with_capacity(ROUNDS as usize);
        for _ in 0..ROUNDS {
            barrier.wait();
            if failed.load(Ordering::Relaxed) {
                continue;
            }
            let start = Instant::now();
            for _ in 0..per_round {
                if let Err(e) = pair(thread) {
                    fail(e);
                    break;
                }
            }
            times.push(start.elapsed().as_nanos() as f64 / f64::from(per_round));
        }
        barrier.wait();
        if thread == 0 {
            counts.lock().unwrap_or_else(|p| p.into_inner()).1 = counter();
        }
        times
    };
    // One thread runs on the calling (main) thread, as single-threaded
    // programs allocate; more run on threads of their own.
    let rounds: Vec<Vec<f64>> = if threads == 1 {
        vec![worker(0)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let worker = &worker;
                    scope.spawn(move || worker(thread))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut per_round: Vec<f64> = (0..ROUNDS as usize)
        .map(|r| rounds.iter().map(|t| t[r]).sum::<f64>() / threads as f64)
        .collect();
    per_round.sort_by(f64::total_cmp);
    let (before, after) = counts.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok((per_round[per_round.len() / 2], after - before))
}

/// `512 B`, `4 KiB`, `16 MiB`.
fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::ratio_text;

    #[test]
    fn small_ratios_keep_three_significant_digits() {
        assert_eq!(ratio_text(1.4), "1.40");
        assert_eq!(ratio_text(0.5), "0.500");
        assert_eq!(ratio_text(0.0023), "0.00230");
        assert_eq!(ratio_text(0.0), "0.00");
        assert_eq!(ratio_text(f64::NAN), "NaN");
    }
}
