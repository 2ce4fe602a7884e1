//! `dipu bench sync`: how fast a thread and the host vendor's streams meet,
//! under each `DIPU_HOST_SCHEDULE`: a 4 KiB copy + synchronize round trip, a
//! synchronous copy, an event record + synchronize, beside a plain memcpy in
//! the same run; and the CPU the process burns while its streams sit idle.
//! With `--vendor`, the round trip through the runtime on that vendor
//! beside the same loop on the vendor's own API (`bench_sync_vendor.rs`).

use std::ffi::c_void;
use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Args;
use dipu_deviceapi::{CopyKind, DeviceApi, Error, ErrorKind, Result};
use dipu_vendor_host::{HostConfig, HostVendor, Schedule};

#[path = "bench_sync_vendor.rs"]
mod vendor_loop;

/// Options of `dipu bench sync`.
#[derive(Debug, Args)]
pub(crate) struct SyncArgs {
    /// Timed round trips per figure, in 5 rounds (with `--vendor`, rounds
    /// of 100, at least 5); the median round is reported.
    #[arg(long, value_name = "N", default_value_t = 20_000,
          value_parser = clap::value_parser!(u32).range(5..))]
    iterations: u32,
    /// Seconds of idle streams over which the process's CPU time is read.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    idle: f64,
    /// Bytes per copy.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    bytes: usize,
    /// The C ABI library to time (default: libdipu_runtime.so next to
    /// `dipu`).
    #[arg(long, value_name = "PATH")]
    c_abi_lib: Option<std::path::PathBuf>,
    /// Time the copy + synchronize round trip through the runtime on this
    /// vendor (a name or a plugin path, as `dipu selftest --vendor`)
    /// instead, beside the same loop written on the vendor's own API in
    /// the same run (written for `opencl`).
    #[arg(long, value_name = "VENDOR")]
    vendor: Option<String>,
}

const ROUNDS: u32 = 5;
const SCHEDULES: [Schedule; 4] = [
    Schedule::Auto,
    Schedule::Spin,
    Schedule::Yield,
    Schedule::Block,
];

/// `dipu bench sync`.
pub(crate) fn run(args: &SyncArgs) -> Result<()> {
    if !(args.idle.is_finite() && args.idle > 0.0 && args.idle <= 60.0) {
        return Err(Error::invalid_argument(format!(
            "--idle {}: expected 0 to 60 seconds",
            args.idle
        )));
    }
    if args.bytes == 0 {
        return Err(Error::invalid_argument("--bytes must be at least 1"));
    }
    let bytes = args.bytes;
    if let Some(spec) = &args.vendor {
        return vendor_loop::run(spec, args.iterations, bytes);
    }
    crate::outln!(
        "host vendor synchronisation, {bytes}-byte copies, {} timed operations per figure in \
         {ROUNDS} rounds (median round)",
        args.iterations,
    );
    let src = vec![7u8; bytes];
    let mut dst = vec![0u8; bytes];
    let plain = time_per_op(args.iterations, || {
        // SAFETY: both buffers hold `bytes` bytes and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(black_box(src.as_ptr()), dst.as_mut_ptr(), bytes) };
        black_box(&mut dst);
        Ok(())
    })?;
    crate::outln!("plain memcpy (std): {:.3} us", plain * 1e6);
    crate::outln!();
    crate::outln!(
        "{:<9} {:>16} {:>8} {:>14} {:>8} {:>11} {:>8} {:>15} {:>9}",
        "schedule",
        "async+sync (us)",
        "ratio",
        "sync copy (us)",
        "ratio",
        "event (us)",
        "ratio",
        "tail CPU (ms)",
        "idle CPU"
    );
    for schedule in SCHEDULES {
        let row = measure(schedule, args, &src)?;
        crate::outln!(
            "{:<9} {:>16.2} {:>8.1} {:>14.2} {:>8.1} {:>11.2} {:>8.1} {:>15.2} {:>8.3}%",
            schedule.name(),
            row.round_trip * 1e6,
            row.round_trip / plain,
            row.sync_copy * 1e6,
            row.sync_copy / plain,
            row.event * 1e6,
            row.event / plain,
            row.tail_cpu * 1e3,
            row.idle_cpu * 100.0
        );
    }
    match super::bench_cabi::library_path(args.c_abi_lib.as_deref()) {
        Some(lib) => {
            let (round_trip, sync_copy) = c_abi(&lib, args.iterations, &src)?;
            crate::outln!(
                "{:<9} {:>16.2} {:>8.1} {:>14.2} {:>8.1}   (C ABI: dipu_memcpy_async + \
                 dipu_stream_synchronize, dipu_memcpy; DIPU_HOST_SCHEDULE or auto)",
                "C ABI",
                round_trip * 1e6,
                round_trip / plain,
                sync_copy * 1e6,
                sync_copy / plain,
            );
        }
        None => crate::outln!(
            "C ABI: skipped, no libdipu_runtime.so next to dipu (cargo build -p dipu-ffi)"
        ),
    }
    crate::outln!();
    crate::outln!(
        "ratio: over the plain memcpy; async+sync: memcpy_async host to device on a created \
         stream, then stream_synchronize; sync copy: memcpy host to device (the default stream); \
         event: event_record on a created stream, then event_synchronize; \
         tail CPU: the process's CPU time in the {} ms after the last operation (the streams' \
         watch phases); idle CPU: its CPU time over the next {} s, as a share of one core",
        SETTLE.as_millis(),
        args.idle
    );
    Ok(())
}

struct Row {
    round_trip: f64,
    sync_copy: f64,
    event: f64,
    tail_cpu: f64,
    idle_cpu: f64,
}

fn measure(schedule: Schedule, args: &SyncArgs, src: &[u8]) -> Result<Row> {
    let host = HostVendor::new(HostConfig {
        devices: 1,
        memory_per_device: 64 << 20,
        schedule,
        ..HostConfig::default()
    })?;
    let bytes = src.len();
    let dev = host.malloc(bytes)?;
    let stream = host.stream_create(0)?;
    let event = host.event_create(false)?;
    let result = (|| {
        let from = src.as_ptr().cast::<c_void>();
        let round_trip = time_per_op(args.iterations, || {
            // SAFETY: `dev` holds `bytes` live device bytes, `src` as many
            // host bytes that stay untouched until the synchronize returns.
            unsafe {
                host.memcpy_async(dev, from, bytes, CopyKind::HostToDevice, stream)?;
                host.stream_synchronize(stream)
            }
        })?;
        let sync_copy = time_per_op(args.iterations, || {
            // SAFETY: as above; the copy is done when it returns.
            unsafe { host.memcpy(dev, from, bytes, CopyKind::HostToDevice) }
        })?;
        let event_time = time_per_op(args.iterations, || {
            // SAFETY: the event and the stream are this vendor's and alive.
            unsafe {
                host.event_record(event, stream)?;
                host.event_synchronize(event)
            }
        })?;
        let (tail_cpu, idle_cpu) = idle_cpu(Duration::from_secs_f64(args.idle))?;
        Ok(Row {
            round_trip,
            sync_copy,
            event: event_time,
            tail_cpu,
            idle_cpu,
        })
    })();
    // SAFETY: the handles and `dev` are this vendor's; nothing is queued
    // after the last synchronize.
    unsafe {
        host.event_destroy(event)?;
        host.stream_destroy(stream)?;
        host.free(dev)?;
    }
    result
}

/// Seconds per call of `op`, the median of [`ROUNDS`] rounds after a
/// warm-up.
fn time_per_op(iterations: u32, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    let per_round = (iterations / ROUNDS).max(1);
    for _ in 0..(per_round / 4).max(16) {
        op()?;
    }
    let mut rounds = Vec::with_capacity(ROUNDS as usize);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..per_round {
            op()?;
        }
        rounds.push(start.elapsed().as_secs_f64() / f64::from(per_round));
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[rounds.len() / 2])
}

/// How long streams watch for work after their last operation, at most
/// (the `spin` schedule's 10 ms), with a margin.
const SETTLE: Duration = Duration::from_millis(20);

/// The process's CPU time while its streams go idle: in the first
/// [`SETTLE`] after the last operation (the watch phases), in seconds, and
/// over `idle` after that, as a share of one core.
fn idle_cpu(idle: Duration) -> Result<(f64, f64)> {
    let start = process_cpu()?;
    std::thread::sleep(SETTLE);
    let settled = process_cpu()?;
    std::thread::sleep(idle);
    let end = process_cpu()?;
    Ok((
        (settled - start).as_secs_f64(),
        (end - settled).as_secs_f64() / idle.as_secs_f64(),
    ))
}

fn process_cpu() -> Result<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "clock_gettime(CLOCK_PROCESS_CPUTIME_ID): {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// `dipu_stream` of `include/dipu_runtime.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct CStream {
    device: i32,
    id: u32,
    raw: u64,
}

type Malloc = unsafe extern "C" fn(usize, CStream, *mut *mut c_void) -> i32;
type Free = unsafe extern "C" fn(*mut c_void) -> i32;
type FromPool = unsafe extern "C" fn(i32, i32, *mut CStream) -> i32;
type MemcpyAsync = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32, CStream) -> i32;
type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32) -> i32;
type Synchronize = unsafe extern "C" fn(CStream) -> i32;

/// The C ABI's round trip and synchronous copy through `lib`, in seconds.
fn c_abi(lib: &std::path::Path, iterations: u32, src: &[u8]) -> Result<(f64, f64)> {
    let err = |e: libloading::Error| {
        Error::new(
            ErrorKind::VendorLibraryNotFound,
            format!("{}: {e}", lib.display()),
        )
    };
    let status = |s: i32, what: &str| match s {
        0 => Ok(()),
        s => Err(Error::new(
            ErrorKind::Internal,
            format!("{what} returned status {s}"),
        )),
    };
    // SAFETY: libdipu_runtime.so's initialisers only set up Rust statics.
    let library = unsafe { libloading::Library::new(lib) }.map_err(err)?;
    // SAFETY: each symbol has the C signature of include/dipu_runtime.h
    // that its type spells; the library stays loaded while they are used.
    let (malloc, free, from_pool, memcpy_async, memcpy, synchronize) = unsafe {
        (
            *library.get::<Malloc>(b"dipu_malloc\0").map_err(err)?,
            *library.get::<Free>(b"dipu_free\0").map_err(err)?,
            *library
                .get::<FromPool>(b"dipu_stream_from_pool\0")
                .map_err(err)?,
            *library
                .get::<MemcpyAsync>(b"dipu_memcpy_async\0")
                .map_err(err)?,
            *library.get::<Memcpy>(b"dipu_memcpy\0").map_err(err)?,
            *library
                .get::<Synchronize>(b"dipu_stream_synchronize\0")
                .map_err(err)?,
        )
    };
    const HOST_TO_DEVICE: i32 = 0;
    let bytes = src.len();
    let from = src.as_ptr().cast::<c_void>();
    let mut stream = CStream::default();
    let mut dev = std::ptr::null_mut();
    // SAFETY: the out-pointers are valid for writing.
    unsafe {
        status(from_pool(0, 0, &mut stream), "dipu_stream_from_pool")?;
        status(malloc(bytes, stream, &mut dev), "dipu_malloc")?;
    }
    let round_trip = time_per_op(iterations, || {
        // SAFETY: `dev` holds `bytes` bytes; `src` stays untouched until the
        // synchronize returns.
        unsafe {
            status(
                memcpy_async(dev, from, bytes, HOST_TO_DEVICE, stream),
                "dipu_memcpy_async",
            )?;
            status(synchronize(stream), "dipu_stream_synchronize")
        }
    });
    let sync_copy = time_per_op(iterations, || {
        // SAFETY: as above; the copy is done when it returns.
        status(
            unsafe { memcpy(dev, from, bytes, HOST_TO_DEVICE) },
            "dipu_memcpy",
        )
    });
    // SAFETY: `dev` came from dipu_malloc and nothing uses it any more.
    status(unsafe { free(dev) }, "dipu_free")?;
    Ok((round_trip?, sync_copy?))
}
