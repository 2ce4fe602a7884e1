//! `dipu bench sync --vendor <name>`: the round trip of a host-to-device
//! copy and a stream synchronisation through the runtime on a loaded
//! vendor, beside the same loop written directly on the vendor's API in
//! the same run (OpenCL: [`raw_opencl`]), on the same queue and the same
//! device memory, in interleaved rounds.

use std::ffi::c_void;
use std::time::Instant;

use dipu_deviceapi::{CopyKind, DeviceApi, Error, ErrorKind, Result};
use dipu_stream::Stream;

#[path = "bench_sync_opencl.rs"]
mod raw_opencl;

/// Round trips per timed round, at most: short rounds, alternating between
/// the loops, so a change of the machine's load touches every loop alike.
const ROUND: u32 = 100;
/// Timed rounds per loop, at least; the median round is reported.
const MIN_ROUNDS: u32 = 5;

/// One timed loop: what it runs, and its body.
struct Loop<'a> {
    name: &'static str,
    /// The byte it copies, so the device shows which loop ran last.
    fill: u8,
    /// Round trips run, warm-up included.
    runs: u64,
    body: Box<dyn FnMut(*const c_void) -> Result<()> + 'a>,
}

/// `dipu bench sync --vendor spec`: `iterations` timed round trips of
/// `bytes`-byte copies per loop.
pub(crate) fn run(spec: &str, iterations: u32, bytes: usize) -> Result<()> {
    let ctx = crate::vendor::context_for(spec)?;
    let api = ctx.api().clone();
    let stream = ctx.stream_from_pool(0, false)?;
    let dev = api.malloc(bytes)?;
    let result = measure(&*api, stream, dev, iterations, bytes);
    // SAFETY: `dev` came from this vendor's malloc; every loop ended with
    // a synchronize, so nothing queued uses it.
    let freed = unsafe { api.free(dev) };
    result.and(freed)
}

fn measure(
    api: &dyn DeviceApi,
    stream: Stream,
    dev: *mut c_void,
    iterations: u32,
    bytes: usize,
) -> Result<()> {
    crate::outln!("vendor {}: {}", api.name(), api.version());
    crate::outln!(
        "{bytes}-byte host-to-device copy + stream synchronize on one pooled stream of device 0, \
         the same device memory for every loop; {iterations} timed round trips per loop in \
         {} interleaved rounds (median round)",
        rounds(iterations)
    );
    let raw = match api.name() {
        "opencl" => {
            let queue = api.native_stream(stream.raw())?;
            Some(raw_opencl::Raw::open(queue as *mut c_void)?)
        }
        _ => None,
    };
    let mut loops = vec![Loop {
        name: "runtime: DeviceApi::memcpy_async + Stream::synchronize",
        fill: 1,
        runs: 0,
        body: Box::new(|from| {
            // SAFETY: `dev` holds `bytes` device bytes and `from` as many
            // host bytes, untouched until the synchronize returns.
            unsafe { api.memcpy_async(dev, from, bytes, CopyKind::HostToDevice, stream.raw())? };
            stream.synchronize()
        }),
    }];
    if let Some(raw) = &raw {
        loops.push(Loop {
            name: "raw OpenCL: clEnqueueSVMMemcpy + clFinish",
            fill: 2,
            runs: 0,
            // SAFETY: as for the runtime's loop; the queue is the stream's.
            body: Box::new(|from| unsafe { raw.copy_finish(dev, from, bytes) }),
        });
        loops.push(Loop {
            name: "raw OpenCL, the vendor's calls: + marker, clFlush, clWaitForEvents",
            fill: 3,
            runs: 0,
            // SAFETY: as above.
            body: Box::new(|from| unsafe { raw.copy_marker_wait(dev, from, bytes) }),
        });
    }
    let medians = time_loops(&mut loops, iterations, bytes, api, dev)?;
    crate::outln!();
    crate::outln!(
        "{:<70} {:>10} {:>8} {:>11}",
        "loop",
        "us/trip",
        "ratio",
        "round trips"
    );
    let baseline = medians.get(1).copied().unwrap_or(medians[0]);
    for (l, median) in loops.iter().zip(&medians) {
        crate::outln!(
            "{:<70} {:>10.2} {:>8.3} {:>11}",
            l.name,
            median * 1e6,
            median / baseline,
            l.runs
        );
    }
    crate::outln!();
    match raw {
        Some(_) => crate::outln!(
            "runtime / raw (clFinish): {:.3}; every loop's bytes were read back from the device \
             after it ran",
            medians[0] / medians[1]
        ),
        None => crate::outln!(
            "raw: no loop on vendor {:?}'s own API is written (only opencl's); ratio over the \
             runtime's loop",
            api.name()
        ),
    }
    Ok(())
}

/// The median seconds per round trip of each loop, rounds interleaved (in
/// a rotating order) so a change of load touches every loop alike. After each round of a loop the
/// device memory is read back and must hold that loop's bytes.
fn time_loops(
    loops: &mut [Loop<'_>],
    iterations: u32,
    bytes: usize,
    api: &dyn DeviceApi,
    dev: *mut c_void,
) -> Result<Vec<f64>> {
    let count = rounds(iterations);
    let per_round = (iterations / count).max(1);
    let warm_up = (per_round / 4).max(16);
    let mut times = vec![Vec::with_capacity(count as usize); loops.len()];
    let n_loops = loops.len();
    for round in 0..=count {
        // Each round starts with another loop, so none always follows the
        // same one.
        for k in 0..n_loops {
            let i = (round as usize + k) % n_loops;
            let l = &mut loops[i];
            let src = vec![l.fill; bytes];
            let from = src.as_ptr().cast::<c_void>();
            let n = if round == 0 { warm_up } else { per_round };
            let start = Instant::now();
            for _ in 0..n {
                (l.body)(from)?;
                l.runs += 1;
            }
            let elapsed = start.elapsed().as_secs_f64();
            if round > 0 {
                times[i].push(elapsed / f64::from(n));
            }
            check_device(api, dev, bytes, l)?;
        }
    }
    Ok(times
        .into_iter()
        .map(|mut r| {
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect())
}

/// The number of timed rounds for `iterations` round trips per loop.
fn rounds(iterations: u32) -> u32 {
    (iterations / ROUND).max(MIN_ROUNDS)
}

/// Reads `bytes` of `dev` back and checks they are `l`'s.
fn check_device(api: &dyn DeviceApi, dev: *mut c_void, bytes: usize, l: &Loop<'_>) -> Result<()> {
    let mut back = vec![0u8; bytes];
    // SAFETY: `dev` holds at least `bytes` device bytes and the loop ended
    // with a synchronize; `back` holds `bytes` host bytes.
    unsafe { api.memcpy(back.as_mut_ptr().cast(), dev, bytes, CopyKind::DeviceToHost)? };
    match back.iter().position(|&b| b != l.fill) {
        None => Ok(()),
        Some(at) => Err(Error::new(
            ErrorKind::Internal,
            format!(
                "after the loop {:?} the device holds {} at byte {at}, not its {}",
                l.name, back[at], l.fill
            ),
        )),
    }
}
