//! `dipu bench store`: how fast a TCPStore server serves many clients at
//! once. The server is ours, in a child process of its own (`dipu bench
//! store --serve`, hidden), or any server that speaks torch's protocol
//! (`--server HOST:PORT`: torch's libuv or legacy server, say; with
//! `--server-pid` its memory and CPU time are read from `/proc`); the load
//! is the same either way: `--clients` connections from this process,
//! driven without blocking by a few threads (`bench_store_load.rs`).
//!
//! Each of [`ROUNDS`] rounds times three phases, every client at once:
//! connecting (connect, validate, ping), `--cycles` request cycles per
//! client (`set` of its own key with a `ping` behind it, `wait` for the
//! key, `get` of it, `add` on a shared counter: four round trips, the
//! requests our client sends for `set`, `get` and `add`), one `barrier` of
//! all the clients, and closing: every client shuts its connection and
//! waits until the server has closed its side, so that the server's
//! teardown of one round never falls into the next one's connecting. The
//! median round is reported, with the server's
//! resident memory per idle client (connected, before the cycles) and the
//! share of a core the server and this generator each used in the cycles.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use dipu_comm::store::TcpStoreServer;
use dipu_deviceapi::{Error, ErrorKind, Result};

#[path = "bench_store_load.rs"]
mod load;
use load::{handshake, q, Driver, Msg, Reply};

/// Arguments of `dipu bench store`.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Clients, each a connection (1 to 16384).
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=16384))]
    clients: u32,
    /// Threads of the load generator, each driving its share of the
    /// clients without blocking (default: the number of cores).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: Option<u32>,
    /// Request cycles (set, get, add) per client and round.
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    cycles: u32,
    /// A running server to load instead of ours, as HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// The process id of the `--server`, to report its memory and CPU
    /// time.
    #[arg(long, value_name = "PID", requires = "server")]
    server_pid: Option<u32>,
    /// Internal: serve on a free loopback port, print `PORT <n>`, and stop
    /// when standard input closes.
    #[arg(long, hide = true, conflicts_with = "server")]
    serve: bool,
}

/// Timed rounds; the median is reported.
const ROUNDS: usize = 5;
/// How long a client may wait on the server before the run fails.
const TIMEOUT: Duration = Duration::from_secs(120);

/// `dipu bench store`.
pub(crate) fn run(args: &StoreArgs) -> Result<()> {
    if args.serve {
        return serve();
    }
    raise_descriptor_limit();
    match &args.server {
        Some(address) => {
            let (host, port) = parse_address(address)?;
            let addr = resolve(&host, port)?;
            report(
                args,
                &format!("the server at {address}"),
                addr,
                args.server_pid,
            )
        }
        None => {
            let child = OurServer::start()?;
            let addr = SocketAddr::from(([127, 0, 0, 1], child.port));
            let pid = child.child.id();
            report(args, "dipu's server (a child process)", addr, Some(pid))
        }
    }
}

/// The first address of `host:port`.
fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::invalid_argument(format!("--server {host}:{port}: no address")))
}

/// Raises this process's soft limit on open descriptors to the hard one:
/// thousands of clients need as many sockets (our server's child inherits
/// it).
fn raise_descriptor_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit read just above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// `HOST:PORT`, split.
fn parse_address(address: &str) -> Result<(String, u16)> {
    address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
        .filter(|(host, _)| !host.is_empty())
        .ok_or_else(|| Error::invalid_argument(format!("--server {address:?}: expected HOST:PORT")))
}

/// Serves until standard input closes (the child mode).
fn serve() -> Result<()> {
    let server = TcpStoreServer::bind("127.0.0.1", 0)?;
    println!("PORT {}", server.port());
    std::io::stdout().flush().ok();
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink).ok();
    drop(server);
    Ok(())
}

/// Our server in a child process; it stops when this handle drops (its
/// standard input closes).
struct OurServer {
    child: std::process::Child,
    port: u16,
}

impl OurServer {
    fn start() -> Result<OurServer> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::new(ErrorKind::Internal, format!("finding dipu itself: {e}")))?;
        let mut child = Command::new(exe)
            .args(["bench", "store", "--serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::new(ErrorKind::Internal, format!("starting the server: {e}")))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut line).ok();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok());
        match port {
            Some(port) => Ok(OurServer { child, port }),
            None => {
                child.kill().ok();
                child.wait().ok();
                Err(Error::new(
                    ErrorKind::Internal,
                    format!("the server child printed {line:?}, not PORT <n>"),
                ))
            }
        }
    }
}

impl Drop for OurServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        self.child.wait().ok();
    }
}

/// One round's phases, in seconds, and the server's figures.
#[derive(Debug, Clone, Copy)]
struct Round {
    connect: f64,
    cycles: f64,
    barrier: f64,
    close: f64,
    /// Server resident bytes per connected idle client.
    rss_per_client: Option<f64>,
    /// Cores the server and this process used during the cycles.
    server_cpu: Option<f64>,
    own_cpu: Option<f64>,
}

/// Runs the rounds against `addr` and prints the table.
fn report(args: &StoreArgs, what: &str, addr: SocketAddr, pid: Option<u32>) -> Result<()> {
    let clients = args.clients as usize;
    let threads = args
        .threads
        .map_or_else(
            || std::thread::available_parallelism().map_or(2, |n| n.get()),
            |t| t as usize,
        )
        .min(clients);
    println!(
        "TCPStore load: {what}, {clients} clients, {} cycles (set+get+add) each, median of \
         {ROUNDS} rounds; the load from {threads} threads",
        args.cycles
    );
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        rounds.push(one_round(addr, pid, clients, threads, args.cycles, round)?);
    }
    let median = |f: &dyn Fn(&Round) -> Option<f64>| {
        let mut v: Vec<f64> = rounds.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let connect = median(&|r| Some(r.connect)).unwrap_or(0.0);
    let cycles = median(&|r| Some(r.cycles)).unwrap_or(0.0);
    let barrier = median(&|r| Some(r.barrier)).unwrap_or(0.0);
    let close = median(&|r| Some(r.close)).unwrap_or(0.0);
    // The first round's: later ones reuse memory the server freed.
    let rss = rounds[0].rss_per_client;
    let show =
        |v: Option<f64>, scale: f64| v.map_or("-".to_owned(), |v| format!("{:.1}", v * scale));
    println!(
        "server: {} KiB resident per idle client (first round); in the cycles the server \
         used {}% of a core, the load generator {}%",
        show(rss, 1.0 / 1024.0),
        show(median(&|r| r.server_cpu), 100.0),
        show(median(&|r| r.own_cpu), 100.0),
    );
    let total = clients as f64 * f64::from(args.cycles);
    println!(
        "{:>8} {:>12} {:>14} {:>12} {:>10}",
        "clients", "connect ms", "cycles/s", "barrier ms", "close ms"
    );
    println!(
        "{clients:>8} {:>12.2} {:>14.0} {:>12.2} {:>10.2}",
        connect * 1e3,
        total / cycles,
        barrier * 1e3,
        close * 1e3
    );
    Ok(())
}

/// The steps of phase `phase` for client `c` in round `round`.
fn steps(
    phase: usize,
    round: usize,
    clients: usize,
    cycles: u32,
) -> impl Fn(usize, usize) -> Option<Step> {
    move |c, k| match phase {
        0 => (k == 0).then(|| handshake(c as u32)),
        1 => {
            if k >= 4 * cycles as usize {
                return None;
            }
            let key = format!("/bench/{round}/{c}");
            let m = Msg::default();
            Some(match k % 4 {
                0 => m
                    .query(q::SET)
                    .bytes(key.as_bytes())
                    .bytes(&[c as u8; 64])
                    .query(q::PING)
                    .u32(1)
                    .expect(Reply::Fixed(4)),
                1 => m
                    .query(q::WAIT)
                    .i64(1)
                    .bytes(key.as_bytes())
                    .expect(Reply::Fixed(1)),
                2 => m.query(q::GET).bytes(key.as_bytes()).expect(Reply::Value),
                _ => m
                    .query(q::ADD)
                    .bytes(format!("/bench/{round}/count").as_bytes())
                    .i64(1)
                    .expect(Reply::Fixed(8)),
            })
        }
        _ => (k == 0).then(|| {
            Msg::default()
                .query(q::BARRIER)
                .bytes(format!("/bench/{round}/barrier").as_bytes())
                .i64(clients as i64)
                .expect(Reply::Fixed(1))
        }),
    }
}

use load::Step;

/// One round: every client connects, runs its cycles and meets the others
/// at a barrier; each phase is timed from the moment all generator threads
/// start it to the moment the last one ends it.
fn one_round(
    addr: SocketAddr,
    pid: Option<u32>,
    clients: usize,
    threads: usize,
    cycles: u32,
    round: usize,
) -> Result<Round> {
    let phases = 3;
    // Start, then after each phase (and once more after connecting, while
    // the clients are idle and the server's memory is read), and after
    // disconnecting.
    let gates: Vec<Barrier> = (0..phases + 3).map(|_| Barrier::new(threads + 1)).collect();
    let rss_before = pid.and_then(proc::rss);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let gates = &gates;
                let first = clients * t / threads;
                let n = clients * (t + 1) / threads - first;
                scope.spawn(move || -> Result<()> {
                    // Every thread passes every gate, failed or not, so that
                    // a failure ends the round instead of hanging it.
                    let mut failure = None;
                    gates[0].wait();
                    let mut driver = Driver::connect(addr, first, n)
                        .map_err(|e| failure = Some(e))
                        .ok();
                    for phase in 0..phases {
                        if phase == 1 {
                            gates[1].wait();
                        }
                        if let (Some(d), None) = (&mut driver, &failure) {
                            failure = d.run(steps(phase, round, clients, cycles), TIMEOUT).err();
                        }
                        gates[phase + 2].wait();
                    }
                    // The server closes every connection before the next
                    // round connects anew.
                    if let (Some(d), None) = (driver, &failure) {
                        failure = d.disconnect(TIMEOUT).err();
                    }
                    gates[phases + 2].wait();
                    failure.map_or(Ok(()), |e| {
                        Err(Error::new(ErrorKind::VendorError, format!("a client: {e}")))
                    })
                })
            })
            .collect();
        gates[0].wait();
        let t0 = Instant::now();
        gates[2].wait(); // connected
        let t1 = Instant::now();
        let rss_connected = pid.and_then(proc::rss);
        let cpu0 = (pid.and_then(proc::cpu), proc::cpu(std::process::id()));
        gates[1].wait(); // go
        let t1b = Instant::now();
        gates[3].wait(); // cycled
        let t2 = Instant::now();
        let cpu1 = (pid.and_then(proc::cpu), proc::cpu(std::process::id()));
        gates[4].wait(); // barrier passed
        let t3 = Instant::now();
        gates[5].wait(); // every connection closed by the server
        let t4 = Instant::now();
        for worker in workers {
            worker.join().expect("a client thread panicked")?;
        }
        let busy = |a: Option<f64>, b: Option<f64>| Some((b? - a?) / (t2 - t1b).as_secs_f64());
        Ok(Round {
            connect: (t1 - t0).as_secs_f64(),
            cycles: (t2 - t1b).as_secs_f64(),
            barrier: (t3 - t2).as_secs_f64(),
            close: (t4 - t3).as_secs_f64(),
            rss_per_client: rss_before
                .zip(rss_connected)
                .map(|(a, b)| (b as f64 - a as f64) / clients as f64),
            server_cpu: busy(cpu0.0, cpu1.0),
            own_cpu: busy(cpu0.1, cpu1.1),
        })
    })
}

/// What `/proc` tells of a process.
mod proc {
    /// Resident bytes of process `pid`.
    pub(super) fn rss(pid: u32) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// CPU seconds (user and system) process `pid` has used.
    pub(super) fn cpu(pid: u32) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces).
        let rest = &stat[stat.rfind(')')? + 2..];
        let mut fields = rest.split_whitespace().skip(11);
        let utime: f64 = fields.next()?.parse().ok()?;
        let stime: f64 = fields.next()?.parse().ok()?;
        // SAFETY: sysconf only reads a system constant.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (ticks > 0).then(|| (utime + stime) / ticks as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_at_the_last_colon() {
        assert_eq!(
            parse_address("127.0.0.1:29500").unwrap(),
            ("127.0.0.1".into(), 29500)
        );
        assert_eq!(parse_address("::1:80").unwrap(), ("::1".into(), 80));
        for bad in ["nohost", ":80", "host:", "host:99999"] {
            let err = parse_address(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad}: {err}");
        }
    }
}
