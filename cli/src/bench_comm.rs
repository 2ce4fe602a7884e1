//! `dipu bench comm`: the bus bandwidth of the host vendor's all-reduce,
//! with the ranks as processes of their own, beside this machine's
//! single-thread memcpy bandwidth; with `--paths`, also the host-staged
//! collectives a vendor without collectives gets (the host vendor with
//! `DIPU_HOST_COLLECTIVES=0`, over shared memory or TCP), in the same run.
//!
//! The parent starts a TCP store server on a free loopback port and starts
//! itself once per rank in a hidden child mode (`dipu bench comm --child
//! --rank R --port P ...`). Each child makes a runtime on the built-in host
//! vendor (device 0), a process group over the store, and for each size a
//! device buffer: it checks one all-reduce's result, warms up, then times
//! `--iterations` all-reduces (f32 sum, each waited on the host with
//! `Work::wait_host`, or with `--wait stream` by synchronizing the stream
//! `Work::wait` ordered after it) in [`ROUNDS`] rounds, each round starting at a
//! barrier. Every rank writes its round times into the store; the parent
//! takes, for each round, the slowest rank's time and reports the median
//! round.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use dipu_comm::store::{PrefixStore, Store, TcpStore, TcpStoreServer};
use dipu_comm::{Buffer, Options, ProcessGroup, StagedTransport};
use dipu_deviceapi::{DataType, Error, ErrorKind, ReduceOp, Result, VendorSpec};
use dipu_runtime::{Runtime, RuntimeOptions};

#[path = "bench_comm_ranks.rs"]
mod ranks;

use ranks::{drain, RankProcess, Ranks};

/// Arguments of `dipu bench comm`.
#[derive(Debug, Args)]
pub(crate) struct CommArgs {
    /// Number of ranks, each a process of its own (2 to 64).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(2..=MAX_RANKS))]
    ranks: u32,
    /// Buffer sizes in MiB (f32 elements), comma-separated, 1 to 1024 each.
    #[arg(long, value_name = "MIB,...", value_delimiter = ',',
          default_value = "1,16,64",
          value_parser = clap::value_parser!(u32).range(1..=MAX_MIB))]
    sizes: Vec<u32>,
    /// Timed all-reduces per round, in 5 rounds (the median round is
    /// reported); default: 1 GiB worth per round, 5 to 200.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: Option<u32>,
    /// How each all-reduce is waited for: `host` (`Work::wait_host`, woken
    /// by a callback queued behind the operation on its stream) or
    /// `stream` (`Work::wait`, then synchronizing the current stream).
    #[arg(long, value_enum, default_value_t = Wait::Host)]
    wait: Wait,
    /// Which collectives to measure, one after the other: `native` (the
    /// host vendor's own), `staged-shm` and `staged-tcp` (the process
    /// group's host-staged collectives over shared memory or TCP, the
    /// vendor's hidden with `DIPU_HOST_COLLECTIVES=0`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "native")]
    paths: Vec<Path>,
    /// Internal: the path this child measures.
    #[arg(long, value_enum, hide = true, default_value_t = Path::Native)]
    path: Path,
    /// Seconds the ranks may take in all before they are killed and the
    /// benchmark fails.
    #[arg(long, value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Internal: run as one rank, started by `dipu bench comm`.
    #[arg(long, hide = true, requires_all = ["rank", "port"])]
    child: bool,
    /// Internal: this child's rank.
    #[arg(long, hide = true, requires = "child")]
    rank: Option<u32>,
    /// Internal: the parent's store port on 127.0.0.1.
    #[arg(long, hide = true, requires = "child")]
    port: Option<u16>,
}

/// How a rank waits for each all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Wait {
    /// `Work::wait_host`.
    Host,
    /// `Work::wait` (the current stream waits), then `Stream::synchronize`.
    Stream,
}

impl Wait {
    fn name(self) -> &'static str {
        match self {
            Wait::Host => "host",
            Wait::Stream => "stream",
        }
    }
}

/// Which collectives a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Path {
    /// The host vendor's collectives.
    Native,
    /// Host-staged, over shared memory.
    StagedShm,
    /// Host-staged, over TCP on loopback.
    StagedTcp,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Native => "native",
            Path::StagedShm => "staged-shm",
            Path::StagedTcp => "staged-tcp",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Path::Native => "the host vendor's own collectives (shared memory)",
            Path::StagedShm => {
                "host-staged (DIPU_HOST_COLLECTIVES=0: device -> pinned -> shared memory -> device)"
            }
            Path::StagedTcp => {
                "host-staged (DIPU_HOST_COLLECTIVES=0: device -> pinned -> TCP -> device)"
            }
        }
    }

    /// The process group's transport for the host-staged paths.
    fn transport(self) -> Option<StagedTransport> {
        match self {
            Path::Native => None,
            Path::StagedShm => Some(StagedTransport::Shm),
            Path::StagedTcp => Some(StagedTransport::Tcp),
        }
    }
}

/// The most ranks (the host vendor's largest communicator).
const MAX_RANKS: i64 = dipu_vendor_host::MAX_WORLD as i64;
/// The largest size, in MiB.
const MAX_MIB: i64 = 1024;
/// Timed rounds per size; the median is reported.
const ROUNDS: usize = 5;
/// The memcpy baseline's buffer.
const MEMCPY_BYTES: usize = 64 << 20;
/// Where the ranks meet.
const HOST: &str = "127.0.0.1";
/// How long a rank waits for the store (the others to join, a key).
const STORE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one collective may take before the rank fails it.
const OP_TIMEOUT: Duration = Duration::from_secs(120);
/// Store key of `rank`'s round times at `mib` on `path`.
fn result_key(path: Path, rank: u32, mib: u32) -> String {
    format!("bench-comm/result/{}/{rank}/{mib}", path.name())
}

/// Runs `dipu bench comm` (or one rank of it, in child mode).
pub(crate) fn run(args: &CommArgs) -> Result<()> {
    if args.child {
        let (Some(rank), Some(port)) = (args.rank, args.port) else {
            return Err(Error::invalid_argument(
                "--child needs --rank and --port (it is started by `dipu bench comm`)",
            ));
        };
        return child(args, rank, port);
    }
    parent(args)
}

/// Timed all-reduces per round at `mib` MiB.
fn iterations(args: &CommArgs, mib: u32) -> u32 {
    args.iterations
        .unwrap_or_else(|| (1024 / mib).clamp(5, 200))
}

/// The parent: baseline, then each path's ranks and table, then the
/// paths side by side.
fn parent(args: &CommArgs) -> Result<()> {
    let started = Instant::now();
    // The baseline first, while nothing else of ours runs.
    let memcpy = memcpy_gbps();

    let server = TcpStoreServer::bind(HOST, 0)?;
    let port = server.port();
    let store = TcpStore::with_server(server, HOST, STORE_TIMEOUT)?;
    let mut paths: Vec<Path> = Vec::new();
    for p in &args.paths {
        if !paths.contains(p) {
            paths.push(*p);
        }
    }
    let mut busbw = Vec::new();
    for &path in &paths {
        run_ranks(args, path, port)?;
        busbw.push(table(args, &store, path, memcpy)?);
    }
    if paths.len() > 1 {
        crate::outln!(
            "bus bandwidth of each path, and its ratio to the first ({})",
            paths[0].name()
        );
        let mut head = format!("{:>8}", "size");
        for path in &paths {
            head.push_str(&format!(" {:>12} {:>7}", path.name(), "ratio"));
        }
        crate::outln!("{head}");
        for (i, &mib) in args.sizes.iter().enumerate() {
            let mut line = format!("{:>8}", human((mib as usize) << 20));
            for row in &busbw {
                line.push_str(&format!(" {:>12.3} {:>7.2}", row[i], row[i] / busbw[0][i]));
            }
            crate::outln!("{line}");
        }
        crate::outln!();
    }
    crate::outln!(
        "memcpy: {memcpy:.3} GB/s (one thread, {}; bytes copied per second: the memory moves \
         twice that, a read and a write)",
        human(MEMCPY_BYTES)
    );
    crate::outln!("took {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Starts the ranks of `path` and waits until all have written their times.
fn run_ranks(args: &CommArgs, path: Path, port: u16) -> Result<()> {
    let n = args.ranks;
    let sizes: Vec<String> = args.sizes.iter().map(u32::to_string).collect();
    let mut ranks = Ranks::default();
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("finding dipu's own path: {e}")))?;
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(["bench", "comm", "--child"])
            .args(["--rank", &rank.to_string()])
            .args(["--port", &port.to_string()])
            .args(["--ranks", &n.to_string()])
            .args(["--sizes", &sizes.join(",")])
            .args(["--wait", args.wait.name()])
            .args(["--path", path.name()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if path != Path::Native {
            cmd.env(dipu_vendor_host::ENV_COLLECTIVES, "0");
        }
        if let Some(it) = args.iterations {
            cmd.args(["--iterations", &it.to_string()]);
        }
        let mut child = cmd.spawn().map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("starting rank {rank} ({}): {e}", exe.display()),
            )
        })?;
        let stderr = child.stderr.take().map(drain);
        ranks.0.push(RankProcess {
            rank,
            child,
            stderr,
            status: None,
        });
    }
    ranks.wait_all(Duration::from_secs(args.timeout))?;
    ranks.forward_stderr();
    Ok(())
}

/// Prints `path`'s table; returns its bus bandwidth per size.
fn table(args: &CommArgs, store: &TcpStore, path: Path, memcpy: f64) -> Result<Vec<f64>> {
    let n = args.ranks;
    crate::outln!(
        "all-reduce (f32 sum) on the host vendor, {n} ranks as processes, {}; per size: 1 \
         checked all-reduce, a warm-up, then {ROUNDS} rounds of timed all-reduces (each waited \
         for: {}), every round starting at a barrier; a round's time is its slowest rank's; \
         median round",
        path.words(),
        match args.wait {
            Wait::Host => "Work::wait_host",
            Wait::Stream => "Work::wait + Stream::synchronize",
        }
    );
    crate::outln!(
        "algbw: bytes / time; busbw: algbw * 2(n-1)/n (NCCL's bus bandwidth); \
         GB/s: 10^9 bytes/s; memcpy: one thread, copy_from_slice of {} (measured first in the run)",
        human(MEMCPY_BYTES)
    );
    crate::outln!();
    crate::outln!(
        "{:>8} {:>10} {:>15} {:>12} {:>12} {:>13}",
        "size",
        "iterations",
        "time/op",
        "algbw GB/s",
        "busbw GB/s",
        "busbw/memcpy"
    );
    let mut all = Vec::new();
    for &mib in &args.sizes {
        let mut rounds = [0f64; ROUNDS];
        for rank in 0..n {
            let text = store.get(&result_key(path, rank, mib)).map_err(|e| {
                e.context(format_args!("reading rank {rank}'s result at {mib} MiB"))
            })?;
            let times = parse_times(&text).ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    format!(
                        "rank {rank}'s result at {mib} MiB is not {ROUNDS} times: {:?}",
                        String::from_utf8_lossy(&text)
                    ),
                )
            })?;
            for (slowest, t) in rounds.iter_mut().zip(times) {
                *slowest = slowest.max(t);
            }
        }
        rounds.sort_by(f64::total_cmp);
        let seconds = rounds[ROUNDS / 2];
        let bytes = (mib as usize) << 20;
        let algbw = bytes as f64 / seconds / 1e9;
        let busbw = algbw * 2.0 * f64::from(n - 1) / f64::from(n);
        crate::outln!(
            "{:>8} {:>10} {:>12.3} ms {:>12.3} {:>12.3} {:>13.2}",
            human(bytes),
            iterations(args, mib),
            seconds * 1e3,
            algbw,
            busbw,
            busbw / memcpy
        );
        all.push(busbw);
    }
    crate::outln!();
    Ok(all)
}

/// One rank's round times in seconds, as the child writes them.
fn parse_times(text: &[u8]) -> Option<Vec<f64>> {
    let times: Vec<f64> = std::str::from_utf8(text)
        .ok()?
        .split_whitespace()
        .map(|t| t.parse().ok().filter(|t: &f64| t.is_finite() && *t > 0.0))
        .collect::<Option<_>>()?;
    (times.len() == ROUNDS).then_some(times)
}

/// One rank: measures every size and writes its round times to the store.
fn child(args: &CommArgs, rank: u32, port: u16) -> Result<()> {
    die_with_parent();
    let n = args.ranks;
    let context = |e: Error| e.context(format_args!("rank {rank} of {n}"));
    let store = TcpStore::connect(HOST, port, STORE_TIMEOUT).map_err(|e| {
        context(e.context(format_args!("connecting to the store at {HOST}:{port}")))
    })?;
    let store: Arc<dyn Store> = Arc::new(store);
    // Each path's groups under their own prefix: a later path's ranks must
    // not read an earlier one's communicator keys.
    let group_store: Arc<dyn Store> =
        Arc::new(PrefixStore::new(args.path.name(), Arc::clone(&store)));
    let rt = Runtime::new(RuntimeOptions::default().with_vendor(VendorSpec::parse("host")?))
        .map_err(context)?;
    rt.set_device(0).map_err(context)?;
    let mut options = Options::default().with_timeout(OP_TIMEOUT);
    if let Some(transport) = args.path.transport() {
        options = options.with_staged_transport(transport);
    }
    let pg = ProcessGroup::new(
        Arc::clone(&rt),
        group_store,
        rank as i32,
        n as i32,
        0,
        options,
    )
    .map_err(context)?;
    if pg.host_staged() != (args.path != Path::Native) {
        return Err(context(Error::new(
            ErrorKind::Internal,
            format!(
                "the {} path, but the process group is {}host-staged",
                args.path.name(),
                if pg.host_staged() { "" } else { "not " }
            ),
        )));
    }
    let stream = rt.context().current_stream(0).map_err(context)?;
    // A one-element all-reduce: the barrier before every round.
    let one_dev = rt.allocate(4, stream).map_err(context)?;
    one_dev.fill(0, None).map_err(context)?;
    let one = Buffer::from_device_buffer(&one_dev, DataType::F32).map_err(context)?;
    let all_reduce = |buffer: &Buffer| -> Result<()> {
        let work = pg.all_reduce(buffer, ReduceOp::Sum)?;
        match args.wait {
            Wait::Host => work.wait_host(OP_TIMEOUT),
            Wait::Stream => {
                work.wait()?;
                stream.synchronize()
            }
        }
    };
    for &mib in &args.sizes {
        let context = |e: Error| context(e.context(format_args!("{mib} MiB")));
        let bytes = (mib as usize) << 20;
        let dev = rt.allocate(bytes, stream).map_err(context)?;
        let buffer = Buffer::from_device_buffer(&dev, DataType::F32).map_err(context)?;

        // One checked all-reduce: rank r contributes r + 1 everywhere.
        let mine = (rank as f32 + 1.0).to_le_bytes();
        let host: Vec<u8> = mine.iter().copied().cycle().take(bytes).collect();
        dev.copy_from_host(&host, None).map_err(context)?;
        all_reduce(&buffer).map_err(context)?;
        let mut back = host;
        dev.copy_to_host(&mut back, None).map_err(context)?;
        let want = (n * (n + 1) / 2) as f32;
        if let Some(i) = back
            .chunks_exact(4)
            .position(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) != want)
        {
            return Err(context(Error::new(
                ErrorKind::Internal,
                format!("the checked all-reduce gave a wrong element {i} (want {want})"),
            )));
        }
        drop(back);

        // Zeros from here on: sums stay finite and normal.
        dev.fill(0, None).map_err(context)?;
        let per_round = iterations(args, mib);
        for _ in 0..(per_round / 4).max(2) {
            all_reduce(&buffer).map_err(context)?;
        }
        let mut times = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            all_reduce(&one).map_err(context)?;
            let start = Instant::now();
            for _ in 0..per_round {
                all_reduce(&buffer).map_err(context)?;
            }
            times.push(start.elapsed().as_secs_f64() / f64::from(per_round));
        }
        let text: Vec<String> = times.iter().map(|t| format!("{t:e}")).collect();
        store
            .set(&result_key(args.path, rank, mib), text.join(" ").as_bytes())
            .map_err(context)?;
    }
    // Every rank leaves together: no communicator is torn down while a peer
    // still uses it.
    all_reduce(&one).map_err(context)?;
    Ok(())
}

/// A child dies with its parent (killed or crashed), not left running.
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no
    // memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
}

/// Single-thread memcpy bandwidth of a [`MEMCPY_BYTES`] buffer, GB/s
/// (bytes copied per second): the median of 5 rounds of 8 copies.
fn memcpy_gbps() -> f64 {
    let src = vec![1u8; MEMCPY_BYTES];
    let mut dst = vec![0u8; MEMCPY_BYTES];
    // Warm-up: fault every page in.
    dst.copy_from_slice(&src);
    const COPIES: u32 = 8;
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..COPIES {
                std::hint::black_box(&mut dst).copy_from_slice(std::hint::black_box(&src));
            }
            start.elapsed().as_secs_f64() / f64::from(COPIES)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    MEMCPY_BYTES as f64 / rounds[ROUNDS / 2] / 1e9
}

/// `1 MiB`, `64 MiB`.
fn human(bytes: usize) -> String {
    format!("{} MiB", bytes >> 20)
}
