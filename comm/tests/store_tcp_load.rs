//! The TCPStore server under hostile or heavy load: a client that stops
//! reading, thousands of idle connections, and random bytes from a thousand
//! connections at once. Each test checks that the server goes on serving
//! the well-behaved clients.
//!
//! These tests open thousands of sockets, so they raise the soft descriptor
//! limit to the hard one first, and take turns. The 10 000 idle clients
//! talk to a server in a child process (this test binary again), so that
//! each side has a process's descriptors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use dipu_comm::store::{Store, TcpStore, TcpStoreServer, TORCH_VALIDATION_MAGIC};

/// How long a well-behaved client waits on the server before its call
/// fails: a server blocked by a bad client fails the test instead of
/// hanging it.
const PATIENCE: Duration = Duration::from_secs(20);

/// How long a test waits for something that must happen before calling it
/// a hang: never reached by a machine that is merely slow.
const HANG: Duration = Duration::from_secs(120);

/// The tests take turns: each may use most of the descriptors.
static SERIAL: Mutex<()> = Mutex::new(());

fn server() -> TcpStoreServer {
    TcpStoreServer::bind("127.0.0.1", 0).expect("starting a server")
}

fn client(server: &TcpStoreServer) -> TcpStore {
    TcpStore::connect("127.0.0.1", server.port(), PATIENCE).expect("connecting")
}

/// `VALIDATE` with torch's magic.
fn hello() -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&TORCH_VALIDATION_MAGIC.to_le_bytes());
    v
}

/// A `u64`-length-prefixed field.
fn field(bytes: &[u8]) -> Vec<u8> {
    let mut v = (bytes.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(bytes);
    v
}

/// Raises the soft limit on open descriptors to the hard one; returns it.
fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raising RLIMIT_NOFILE");
    hard
}

/// Waits until the server counts `n` clients (it has no event to block on:
/// looks every 5 ms, up to [`HANG`]).
fn await_clients(server: &TcpStoreServer, n: usize) {
    let start = Instant::now();
    while server.num_clients() != n {
        assert!(
            start.elapsed() < HANG,
            "{} clients, not {n}",
            server.num_clients()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The well-behaved client's work: values, a counter, a wait.
fn exercise(store: &TcpStore, tag: &str) {
    store.set(&format!("{tag}/v"), b"value").unwrap();
    assert_eq!(store.get(&format!("{tag}/v")).unwrap(), b"value");
    assert_eq!(store.add(&format!("{tag}/n"), 2).unwrap(), 2);
    store.wait(&[&format!("{tag}/v")], PATIENCE).unwrap();
}

#[test]
fn a_client_that_stops_reading_does_not_delay_the_others() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let srv = server();
    let good = client(&srv);
    let big = vec![7u8; 4 << 20];
    good.set("big", &big).unwrap();
    let mut get = vec![3u8];
    get.extend(field(b"/big"));

    // 32 MiB of replies that the client never reads: under the 64 MiB bound.
    let mut deaf = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    deaf.write_all(&hello()).unwrap();
    for _ in 0..8 {
        deaf.write_all(&get).unwrap();
    }
    // Everyone else is served meanwhile, and the deaf client stays.
    let other = client(&srv);
    for round in 0..20 {
        exercise(&good, &format!("a{round}"));
        exercise(&other, &format!("b{round}"));
    }
    assert_eq!(srv.num_clients(), 3, "the deaf client is still connected");
    drop(other);

    // 64 MiB more: over the bound (and any kernel buffer), so the server
    // drops it, and still serves the others.
    for _ in 0..16 {
        deaf.write_all(&get).unwrap();
    }
    await_clients(&srv, 1);
    exercise(&good, "after");
    assert_eq!(client(&srv).get("big").unwrap().len(), big.len());
    // What the deaf client finds: part of its replies, then the end.
    deaf.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let mut got = 0usize;
    loop {
        match deaf.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the deaf client was not disconnected: {e}"),
        }
    }
    assert!(
        got < 24 * (big.len() + 8),
        "{got} bytes: all replies were sent"
    );
}

/// Our server in a child process (`idle_server_child`), so that the
/// 10 000 client ends and the 10 000 server ends each have a process's
/// descriptors.
struct ServerChild {
    child: Child,
    lines: BufReader<ChildStdout>,
    port: u16,
    /// The child's standard error, line by line as it logs them.
    log: mpsc::Receiver<String>,
    /// The lines taken from `log` so far.
    logged: String,
}

impl ServerChild {
    /// Starts the child; `nofile`: its descriptor limit (else the hard one).
    fn start(nofile: Option<u64>) -> ServerChild {
        let nofile = nofile.map_or(String::new(), |n| n.to_string());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "idle_server_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DIPU_STORE_TEST_CHILD", nofile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, log) = mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let port = loop {
            let mut line = String::new();
            assert!(
                lines.read_line(&mut line).unwrap() > 0,
                "the server child ended"
            );
            if let Some((_, port)) = line.trim().split_once("PORT ") {
                break port.parse().unwrap();
            }
        };
        ServerChild {
            child,
            lines,
            port,
            log,
            logged: String::new(),
        }
    }

    /// Waits until the child logs a line containing `what` (up to [`HANG`]).
    fn await_log(&mut self, what: &str) {
        loop {
            let line = self.log.recv_timeout(HANG).unwrap_or_else(|_| {
                panic!(
                    "the server child never logged {what:?}; it logged:\n{}",
                    self.logged
                )
            });
            self.logged.push_str(&line);
            self.logged.push('\n');
            if line.contains(what) {
                return;
            }
        }
    }

    /// The clients the child's server counts now.
    fn clients(&mut self) -> usize {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"count\n").unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.lines.read_line(&mut line).unwrap() > 0,
                "the server child ended"
            );
            if let Some((_, n)) = line.trim().split_once("CLIENTS ") {
                return n.parse().unwrap();
            }
        }
    }

    /// Waits until the child's server counts `n` clients (asking every
    /// 20 ms: it has no event to block on; up to [`HANG`]).
    fn await_clients(&mut self, n: usize) {
        let start = Instant::now();
        loop {
            let now = self.clients();
            if now == n {
                return;
            }
            assert!(start.elapsed() < HANG, "{now} clients, not {n}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl ServerChild {
    /// Stops the child and returns what it logged.
    fn finish(mut self) -> String {
        drop(self.child.stdin.take());
        // Until the child's standard error closes: it has exited.
        let rest: Vec<String> = self.log.iter().collect();
        let mut log = std::mem::take(&mut self.logged);
        for line in rest {
            log.push_str(&line);
            log.push('\n');
        }
        log
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        // A closed standard input stops the child; after a failure, so
        // does a kill, in case it is stuck.
        drop(self.child.stdin.take());
        if std::thread::panicking() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The server of `ten_thousand_idle_clients_and_a_new_one_is_still_served`
/// and of `out_of_descriptors_the_server_waits_and_serves_on` (does nothing
/// unless started by them; `DIPU_STORE_TEST_CHILD`: the descriptor limit,
/// or empty for the hard one): prints `PORT <n>`, answers each
/// `count` line on standard input with `CLIENTS <n>`, logs warnings to
/// standard error, and stops when standard input closes.
#[test]
fn idle_server_child() {
    if std::env::var_os("DIPU_STORE_TEST_CHILD").is_none() {
        return;
    }
    let hard = raise_descriptor_limit();
    if let Some(Ok(n)) = std::env::var("DIPU_STORE_TEST_CHILD")
        .ok()
        .map(|v| v.parse())
    {
        use nix::sys::resource::{setrlimit, Resource};
        setrlimit(Resource::RLIMIT_NOFILE, n, hard).expect("lowering RLIMIT_NOFILE");
    }
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let srv = server();
    println!("PORT {}", srv.port());
    for line in std::io::stdin().lines() {
        if line.unwrap().trim() == "count" {
            println!("CLIENTS {}", srv.num_clients());
        }
    }
}

#[test]
fn ten_thousand_idle_clients_and_a_new_one_is_still_served() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let hard = raise_descriptor_limit();
    let n = 10_000.min(usize::try_from(hard.saturating_sub(256)).unwrap_or(usize::MAX));
    eprintln!("RLIMIT_NOFILE {hard}: {n} idle connections");
    let mut srv = ServerChild::start(None);
    let mut idle = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", srv.port))
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        if i % 2 == 0 {
            s.write_all(&hello()).unwrap();
        }
        idle.push(s);
    }
    srv.await_clients(n);
    let fresh = TcpStore::connect("127.0.0.1", srv.port, PATIENCE).unwrap();
    exercise(&fresh, "fresh");
    // One of the idle ones wakes up and is served too.
    let mut s = idle.pop().unwrap();
    if n % 2 == 0 {
        s.write_all(&hello()).unwrap();
    }
    let mut ping = vec![13u8];
    ping.extend_from_slice(&77u32.to_le_bytes());
    s.write_all(&ping).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(u32::from_le_bytes(echo), 77);
    drop(idle);
    srv.await_clients(2);
}

#[test]
fn out_of_descriptors_the_server_waits_and_serves_on() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The server's process may hold 128 descriptors: fewer than the
    // clients that connect.
    let started = Instant::now();
    let mut srv = ServerChild::start(Some(128));
    let mut clients = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
        s.write_all(&hello()).unwrap();
        clients.push(s);
    }
    // The server says when an accept is refused for want of descriptors.
    srv.await_log("cannot accept more clients");
    let at_limit = srv.clients();
    assert!(at_limit < 128, "{at_limit} clients in 128 descriptors");
    // Those waiting in the listen queue are served as descriptors free up.
    clients.drain(..100);
    srv.await_clients(100);
    for (i, s) in clients.iter_mut().enumerate() {
        let mut ping = vec![13u8];
        ping.extend_from_slice(&u32::try_from(i).unwrap().to_le_bytes());
        s.write_all(&ping).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut echo = [0u8; 4];
        s.read_exact(&mut echo).unwrap();
        assert_eq!(u32::from_le_bytes(echo) as usize, i);
    }
    let fresh = TcpStore::connect("127.0.0.1", srv.port, PATIENCE).unwrap();
    exercise(&fresh, "fresh");
    srv.await_clients(101);
    drop((clients, fresh));
    // One burst of refused accepts (retried every 50 ms meanwhile, and
    // again as the drained clients' descriptors free up one by one): one
    // warning. A burst ends only after 10 s without a refusal, so a
    // machine that stalled that long may see one more per 10 s, never
    // one per refusal.
    let log = srv.finish();
    let warnings = log.matches("cannot accept more clients").count();
    let most = 1 + started.elapsed().as_secs() / 10;
    assert!(
        (1..=most).contains(&(warnings as u64)),
        "{warnings} warnings (at most {most}):\n{log}"
    );
}

/// A fixed xorshift stream: the same bytes every run.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u8
    }
}

#[test]
fn random_bytes_from_a_thousand_clients_each_get_disconnected() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    raise_descriptor_limit();
    let srv = server();
    let good = client(&srv);
    exercise(&good, "before");
    let mut random = Bytes(0x9E37_79B9_7F4A_7C15);
    let mut bad = Vec::new();
    for i in 0..1000 {
        let mut s = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
        let mut bytes = Vec::new();
        if i % 2 == 1 {
            // Past the handshake, starting with a real query type.
            bytes.extend(hello());
            bytes.push(random.next() % 19);
        }
        for _ in 0..(1 + usize::from(random.next()) * 4) {
            bytes.push(random.next());
        }
        // Whatever request the random bytes leave unfinished, 0xFF bytes
        // complete it into a length over the limit or an unknown query.
        bytes.extend([0xFF; 24]);
        s.write_all(&bytes).unwrap();
        bad.push(s);
    }
    exercise(&good, "during");
    for (i, mut s) in bad.into_iter().enumerate() {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut sink = [0u8; 4096];
        loop {
            match s.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("random client {i} was not disconnected: {e}"),
            }
        }
    }
    await_clients(&srv, 1);
    exercise(&good, "after");
    exercise(&client(&srv), "new");
}
