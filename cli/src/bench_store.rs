//! `dipu bench store`: how fast a TCPStore server serves many clients at
//! once. The server is ours, in a child process of its own (`dipu bench
//! store --serve`, hidden), or any server that speaks torch's protocol
//! (`--server HOST:PORT`: torch's libuv or legacy server, say); the load is
//! the same either way: `--clients` connections of our client from this
//! process, a thread each.
//!
//! Each of [`ROUNDS`] rounds times three phases, every client at once:
//! connecting (connect, validate, ping), `--cycles` request cycles per
//! client (`set` of its own key, `get` of it, `add` on a shared counter:
//! four round trips with our client, which waits for a `PING` behind each
//! `set` and sends `WAIT` before `GET`), and one `barrier` of all the
//! clients. The median round is reported.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use dipu_comm::store::{Store, TcpStore, TcpStoreServer};
use dipu_deviceapi::{Error, ErrorKind, Result};

/// Arguments of `dipu bench store`.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Clients, each a connection on a thread of its own (1 to 1024).
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    clients: u32,
    /// Request cycles (set, get, add) per client and round.
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    cycles: u32,
    /// A running server to load instead of ours, as HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
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
    match &args.server {
        Some(address) => {
            let (host, port) = parse_address(address)?;
            report(args, &format!("the server at {address}"), &host, port)
        }
        None => {
            let child = OurServer::start()?;
            let port = child.port;
            report(args, "dipu's server (a child process)", "127.0.0.1", port)
        }
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

/// One round's phases, in seconds.
#[derive(Debug, Clone, Copy)]
struct Round {
    connect: f64,
    cycles: f64,
    barrier: f64,
}

/// Runs the rounds against `host:port` and prints the table.
fn report(args: &StoreArgs, what: &str, host: &str, port: u16) -> Result<()> {
    let clients = args.clients as usize;
    println!(
        "TCPStore load: {what}, {clients} clients, {} cycles (set+get+add) each, median of {ROUNDS} rounds",
        args.cycles
    );
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        rounds.push(one_round(host, port, clients, args.cycles, round)?);
    }
    let median = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let connect = median(|r| r.connect);
    let cycles = median(|r| r.cycles);
    let barrier = median(|r| r.barrier);
    let total = clients as f64 * f64::from(args.cycles);
    println!(
        "{:>8} {:>12} {:>14} {:>12}",
        "clients", "connect ms", "cycles/s", "barrier ms"
    );
    println!(
        "{clients:>8} {:>12.2} {:>14.0} {:>12.2}",
        connect * 1e3,
        total / cycles,
        barrier * 1e3
    );
    Ok(())
}

/// One round: every client connects, runs its cycles and meets the others
/// at a barrier; each phase is timed from the moment all clients start it
/// to the moment the last one ends it.
fn one_round(host: &str, port: u16, clients: usize, cycles: u32, round: usize) -> Result<Round> {
    let start = Barrier::new(clients + 1);
    let connected = Barrier::new(clients + 1);
    let cycled = Barrier::new(clients + 1);
    let done = Barrier::new(clients + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                let (start, connected, cycled, done) = (&start, &connected, &cycled, &done);
                scope.spawn(move || -> Result<()> {
                    // Every client passes every barrier, failed or not, so
                    // that a failure ends the round instead of hanging it.
                    let mut failure = None;
                    start.wait();
                    let store = TcpStore::connect(host, port, TIMEOUT)
                        .map_err(|e| failure = Some(e))
                        .ok();
                    connected.wait();
                    if let Some(store) = &store {
                        let key = format!("bench/{round}/{c}");
                        let value = [c as u8; 64];
                        for _ in 0..cycles {
                            let cycle = store
                                .set(&key, &value)
                                .and_then(|()| store.get(&key))
                                .and_then(|_| store.add(&format!("bench/{round}/count"), 1));
                            if let Err(e) = cycle {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    cycled.wait();
                    if let (Some(store), None) = (&store, &failure) {
                        let barrier = format!("bench/{round}/barrier");
                        failure = store.barrier(&barrier, clients, TIMEOUT).err();
                    }
                    done.wait();
                    failure.map_or(Ok(()), Err)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        connected.wait();
        let t1 = Instant::now();
        cycled.wait();
        let t2 = Instant::now();
        done.wait();
        let t3 = Instant::now();
        for worker in workers {
            worker.join().expect("a client thread panicked")?;
        }
        Ok(Round {
            connect: (t1 - t0).as_secs_f64(),
            cycles: (t2 - t1).as_secs_f64(),
            barrier: (t3 - t2).as_secs_f64(),
        })
    })
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
