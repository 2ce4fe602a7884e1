//! TcpStore beyond the shared suite: the server against raw sockets
//! (handshake, malformed input, clients leaving mid-request), connection
//! retries, torch's constructor with `wait_for_workers`, and the env://
//! rendezvous across processes.

mod store_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_comm::store::{EnvRendezvous, Store, TcpStore, TcpStoreServer, TORCH_VALIDATION_MAGIC};
use dipu_deviceapi::ErrorKind;
use store_common::assert_times_out;

const LONG: Duration = Duration::from_secs(30);

/// How long a test waits for something that must happen before calling it
/// a hang: never reached by a machine that is merely slow.
const HANG: Duration = Duration::from_secs(120);

fn server() -> TcpStoreServer {
    TcpStoreServer::bind("127.0.0.1", 0).expect("starting a server")
}

fn client(server: &TcpStoreServer) -> TcpStore {
    TcpStore::connect("127.0.0.1", server.port(), LONG).expect("connecting")
}

/// A raw socket to `server`, optionally past the `VALIDATE` handshake.
fn raw(server: &TcpStoreServer, validate: bool) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.set_read_timeout(Some(HANG)).unwrap();
    if validate {
        let mut hello = vec![0u8];
        hello.extend_from_slice(&TORCH_VALIDATION_MAGIC.to_le_bytes());
        s.write_all(&hello).unwrap();
    }
    s
}

/// A `u64`-length-prefixed field.
fn field(bytes: &[u8]) -> Vec<u8> {
    let mut v = (bytes.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(bytes);
    v
}

/// Waits (up to [`HANG`]) for the server to close `s`: reads until EOF.
fn assert_closed_by_server(mut s: TcpStream, what: &str) {
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("the server did not close the connection after {what}: {e}"),
        }
    }
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

#[test]
fn the_handshake_is_validate_then_ping() {
    let srv = server();
    let mut s = raw(&srv, true);
    let mut ping = vec![13u8];
    ping.extend_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
    s.write_all(&ping).unwrap();
    let mut echo = [0u8; 4];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(u32::from_le_bytes(echo), 0xDEAD_BEEF);
    // A SET with the raw key "/k" is the key "k" of a client.
    let mut set = vec![1u8];
    set.extend(field(b"/k"));
    set.extend(field(b"raw"));
    s.write_all(&set).unwrap();
    assert_eq!(client(&srv).get("k").unwrap(), b"raw");
}

#[test]
fn malformed_input_disconnects_only_that_client() {
    let srv = server();
    let good = client(&srv);
    good.set("kept", b"yes").unwrap();
    let mut bad_magic = vec![0u8];
    bad_magic.extend_from_slice(&0x1234_5678u32.to_le_bytes());
    let mut oversized_key = vec![1u8];
    oversized_key.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let mut too_many_keys = vec![6u8];
    too_many_keys.extend_from_slice(&u64::MAX.to_le_bytes());
    let mut huge_value = vec![1u8];
    huge_value.extend(field(b"/k"));
    huge_value.extend_from_slice(&(9u64 << 20).to_le_bytes());
    let cases: Vec<(&str, bool, Vec<u8>)> = vec![
        ("wrong magic", false, bad_magic),
        ("no VALIDATE first", false, vec![1, 0, 0, 0, 0, 0, 0, 0, 0]),
        (
            "garbage before VALIDATE",
            false,
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        ),
        ("unknown query type", true, vec![200]),
        ("VALIDATE twice", true, {
            let mut v = vec![0u8];
            v.extend_from_slice(&TORCH_VALIDATION_MAGIC.to_le_bytes());
            v
        }),
        ("a key of 1 TiB", true, oversized_key),
        ("2^64 keys to WAIT for", true, too_many_keys),
        ("a 9 MiB value", true, huge_value),
    ];
    for (what, validate, bytes) in cases {
        let mut s = raw(&srv, validate);
        s.write_all(&bytes).unwrap();
        assert_closed_by_server(s, what);
        assert_eq!(good.get("kept").unwrap(), b"yes", "after {what}");
    }
    // ADD on a value that is not a number: torch's server drops the client too.
    good.set("text", b"abc").unwrap();
    let mut s = raw(&srv, true);
    let mut add = vec![4u8];
    add.extend(field(b"/text"));
    add.extend_from_slice(&1i64.to_le_bytes());
    s.write_all(&add).unwrap();
    assert_closed_by_server(s, "ADD on text");
    assert_eq!(good.get("text").unwrap(), b"abc");
    await_clients(&srv, 1);
}

#[test]
fn random_bytes_never_bring_the_server_down() {
    let srv = server();
    let good = client(&srv);
    // A fixed xorshift stream: the same bytes every run.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for round in 0..200 {
        let mut bytes = Vec::new();
        for _ in 0..(round % 64 + 1) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(x as u8 % 24);
        }
        let mut s = raw(&srv, round % 2 == 0);
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(Shutdown::Write);
        drop(s);
    }
    good.set("alive", b"1").unwrap();
    assert_eq!(good.add("n", 1).unwrap(), 1);
    assert_eq!(client(&srv).get("alive").unwrap(), b"1");
}

#[test]
fn a_client_leaving_mid_request_or_mid_wait_is_forgotten() {
    let srv = server();
    let good = client(&srv);
    // Half a SET: the key, but not the value.
    let mut s = raw(&srv, true);
    let mut half = vec![1u8];
    half.extend(field(b"/half"));
    half.extend_from_slice(&100u64.to_le_bytes());
    half.extend_from_slice(b"only part");
    s.write_all(&half).unwrap();
    await_clients(&srv, 2);
    drop(s);
    await_clients(&srv, 1);
    // A client waiting for a key, gone before it is set.
    let mut w = raw(&srv, true);
    let mut wait = vec![6u8];
    wait.extend_from_slice(&1u64.to_le_bytes());
    wait.extend(field(b"/later"));
    w.write_all(&wait).unwrap();
    await_clients(&srv, 2);
    drop(w);
    await_clients(&srv, 1);
    assert!(!good.check(&["half"]).unwrap());
    good.set("later", b"1").unwrap();
    assert_eq!(good.get("later").unwrap(), b"1");
}

#[test]
fn clients_retry_until_the_server_starts() {
    let port = free_port();
    // The server starts 300 ms late, so the client's first tries are
    // refused (the subject of the test, hence a sleep).
    let start = Instant::now();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        TcpStoreServer::bind("127.0.0.1", port).unwrap()
    });
    let store = TcpStore::connect("127.0.0.1", port, LONG).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(300));
    let srv = starter.join().unwrap();
    store.set("k", b"v").unwrap();
    assert_eq!(store.get("k").unwrap(), b"v");
    drop(srv);
}

#[test]
fn a_waiting_client_is_cancelled_cleanly_and_keeps_working() {
    let srv = server();
    let store = Arc::new(client(&srv));
    for round in 0..5 {
        let key = format!("never{round}");
        assert_times_out(Duration::from_millis(100), &key, || {
            store.wait(&[&key], Duration::from_millis(100))
        });
        assert_eq!(store.add("rounds", 1).unwrap(), round + 1);
    }
    // The key appearing exactly as the wait runs out still reads right.
    let setter = client(&srv);
    for round in 0..10 {
        let key = format!("race{round}");
        let t = std::thread::spawn({
            let setter = setter.try_clone().unwrap();
            let key = key.clone();
            move || {
                std::thread::sleep(Duration::from_millis(50));
                setter.set(&key, b"1").unwrap();
            }
        });
        let _ = store.wait(&[&key], Duration::from_millis(50));
        t.join().unwrap();
        assert_eq!(store.get(&key).unwrap(), b"1");
    }
}

#[test]
fn one_client_shared_by_threads_stays_consistent() {
    let srv = server();
    let store = client(&srv);
    std::thread::scope(|s| {
        for t in 0..8 {
            let store = &store;
            s.spawn(move || {
                for i in 0..50 {
                    store.add("shared", 1).unwrap();
                    let key = format!("t{t}-{i}");
                    store.set(&key, key.as_bytes()).unwrap();
                    assert_eq!(store.get(&key).unwrap(), key.as_bytes());
                }
            });
        }
    });
    assert_eq!(store.add("shared", 0).unwrap(), 400);
    assert_eq!(store.num_keys().unwrap(), 401);
    let mut keys = store.list_keys().unwrap();
    keys.sort();
    assert_eq!(keys.len(), 401);
    assert_eq!(keys[0], "shared");
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn torch_constructor_waits_for_workers() {
    let port = free_port();
    let stores: Vec<TcpStore> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..3)
            .map(|rank| {
                s.spawn(move || {
                    // Workers start first and retry until the master serves.
                    if rank == 0 {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    TcpStore::new("127.0.0.1", port, Some(3), rank == 0, LONG, true).unwrap()
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert!(stores[0].server().is_some() && stores[1].server().is_none());
    assert_eq!(stores[0].port(), port);
    // Only the bookkeeping key `init/` exists, and it is not a user key.
    assert_eq!(stores[1].num_keys().unwrap(), 1);
    assert!(stores[2].list_keys().unwrap().is_empty());
}

#[test]
fn the_master_gives_up_on_missing_workers() {
    let timeout = Duration::from_millis(300);
    let start = Instant::now();
    let err = TcpStore::new("127.0.0.1", 0, Some(2), true, timeout, true).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.message().contains("1 of 2 joined"), "{err}");
    assert!(start.elapsed() >= timeout, "gave up before its timeout");
}

#[test]
fn dropping_the_server_fails_clients_instead_of_hanging() {
    let srv = server();
    let store = client(&srv);
    store.set("k", b"v").unwrap();
    drop(srv);
    store.set_timeout(Duration::from_millis(500));
    assert!(store.get("k").is_err());
}

#[test]
fn env_rendezvous_across_processes() {
    let port = free_port();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..3)
        .map(|rank| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "env_rank_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("DIPU_STORE_TEST_CHILD", "1")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "3")
                .env_remove("TORCHELASTIC_USE_AGENT_STORE")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map(|c| KillOnDrop(Some(c)))
                .unwrap()
        })
        .collect();
    // Every rank's output before any assertion; a failed test kills the
    // ranks still running (the guards' drops).
    let outputs: Vec<_> = children.iter_mut().map(KillOnDrop::output).collect();
    for (rank, out) in outputs.into_iter().enumerate() {
        assert!(
            out.status.success(),
            "rank {rank} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A child process, killed and reaped when dropped before it was waited for.
struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    /// Waits for the child: its status and everything it printed.
    fn output(&mut self) -> std::process::Output {
        let child = self.0.take().expect("waited for once");
        child.wait_with_output().expect("wait for a rank")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The body of one rank of `env_rendezvous_across_processes` (does nothing
/// unless started by it).
#[test]
fn env_rank_child() {
    if std::env::var_os("DIPU_STORE_TEST_CHILD").is_none() {
        return;
    }
    let env = EnvRendezvous::from_env().unwrap();
    let store = TcpStore::from_env().unwrap();
    assert_eq!(store.server().is_some(), env.rank == 0);
    store
        .set(
            &format!("rank{}", env.rank),
            env.rank.to_string().as_bytes(),
        )
        .unwrap();
    for peer in 0..env.world_size {
        assert_eq!(
            store.get(&format!("rank{peer}")).unwrap(),
            peer.to_string().as_bytes()
        );
    }
    // Rank 0 hosts the server: it leaves last, once the last rank to be
    // done says so.
    if store.add("done", 1).unwrap() == env.world_size as i64 {
        store.set("all done", b"").unwrap();
    }
    if env.rank == 0 {
        store.wait(&["all done"], LONG).unwrap();
    }
}
