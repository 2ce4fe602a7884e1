//! TcpStore against the real PyTorch (from PyPI, installed by
//! `scripts/torch-env.sh` into `.venv-torch`): our client on torch's server
//! (libuv and legacy back ends), and torch's client on our server. The
//! Python side is `comm/tests/interop/torch_peer.py`.
//!
//! The Python interpreter is `$DIPU_TORCH_PYTHON`, by default
//! `<repo>/.venv-torch/bin/python`; when it is missing these tests fail and
//! say how to install it.

mod store_common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dipu_comm::store::{Store, TcpStore, TcpStoreServer};
use dipu_deviceapi::ErrorKind;
use store_common::assert_times_out;

/// The PyTorch version the protocol notes in `comm/src/store/mod.rs` were
/// checked against; `scripts/torch-env.sh` installs it.
const TORCH_VERSION: &str = "2.15.0";
/// Python starts slowly on a busy machine (importing torch takes seconds).
const PYTHON_TIMEOUT: Duration = Duration::from_secs(180);
const LONG: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// The interpreter with torch, or a failure that says how to get one.
fn python() -> PathBuf {
    let python = std::env::var_os("DIPU_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv-torch/bin/python"));
    assert!(
        python.exists(),
        "{} does not exist: the TCPStore interop tests need PyTorch. Run scripts/torch-env.sh \
         (installs torch {TORCH_VERSION} from PyPI into .venv-torch), or set DIPU_TORCH_PYTHON \
         to a Python that has torch {TORCH_VERSION}.",
        python.display()
    );
    python
}

/// A running `torch_peer.py`, killed if the test fails before it exits.
struct Peer {
    child: Child,
    lines: mpsc::Receiver<String>,
    what: String,
}

impl Peer {
    fn start(args: &[&str]) -> Peer {
        let script = repo().join("comm/tests/interop/torch_peer.py");
        let mut child = Command::new(python())
            .arg(&script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting torch_peer.py");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Peer {
            child,
            lines,
            what: format!("torch_peer.py {}", args.join(" ")),
        }
    }

    /// The next line the script prints.
    fn line(&mut self) -> String {
        match self.lines.recv_timeout(PYTHON_TIMEOUT) {
            Ok(line) => line,
            Err(_) => {
                let err = self.stderr_now();
                panic!("{} printed nothing: {err}", self.what)
            }
        }
    }

    fn stderr_now(&mut self) -> String {
        let _ = self.child.kill();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }

    /// Waits for `key`, failing with Python's complaint if it exits first.
    fn await_key(&mut self, store: &TcpStore, key: &str) {
        let start = Instant::now();
        while let Err(e) = store.wait(&[key], Duration::from_millis(250)) {
            assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
            if let Some(status) = self.child.try_wait().expect("polling python") {
                let err = self.stderr_now();
                panic!(
                    "{} exited ({status}) before setting {key}:\n{err}",
                    self.what
                );
            }
            if start.elapsed() > PYTHON_TIMEOUT {
                let err = self.stderr_now();
                panic!("{} did not set {key}: {err}", self.what);
            }
        }
    }

    /// Tells the script we are done (closes its stdin), waits for it to exit
    /// and asserts that it succeeded.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        // Its standard output closes when it exits (lines after the last
        // one the test read are of no interest).
        loop {
            match self.lines.recv_timeout(PYTHON_TIMEOUT) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let err = self.stderr_now();
                    panic!("{} did not finish: {err}", self.what);
                }
            }
        }
        let status = self.child.wait().expect("waiting for python");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        assert!(status.success(), "{} failed ({status}):\n{err}", self.what);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Rust half of the exchange `torch_peer.py` plays the other half of;
/// `queues` when the server has them (not torch's legacy one).
fn exchange(store: &TcpStore, peer: &mut Peer, queues: bool) {
    store.set("rust/set", b"from-rust").unwrap();
    assert_eq!(store.add("rust/counter", 5).unwrap(), 5);
    assert_eq!(store.add("rust/counter", 2).unwrap(), 7);
    assert_eq!(store.compare_set("rust/cas", b"", b"v1").unwrap(), b"v1");
    assert_eq!(store.compare_set("rust/cas", b"v1", b"v2").unwrap(), b"v2");
    assert_eq!(store.compare_set("rust/cas", b"v1", b"v3").unwrap(), b"v2");
    let all_bytes: Vec<u8> = (0..=255).collect();
    store.set("rust/bin", &all_bytes).unwrap();
    store.set("rust/empty", b"").unwrap();
    store.append("rust/app", b"ab").unwrap();
    store.append("rust/app", b"cd").unwrap();
    store
        .multi_set(&["rust/m1", "rust/m2"], &[b"one", b"two"])
        .unwrap();
    store.set("rust/deleted", b"x").unwrap();
    assert!(store.delete_key("rust/deleted").unwrap());
    assert!(!store.delete_key("rust/deleted").unwrap());
    assert!(store.check(&["rust/set", "rust/counter"]).unwrap());
    assert!(!store.check(&["rust/deleted"]).unwrap());

    // A wait that runs out is cancelled; the connection goes on working.
    let short = Duration::from_millis(200);
    assert_times_out(short, "rust/never", || store.wait(&["rust/never"], short));
    store.set_timeout(short);
    assert_times_out(short, "rust/never", || store.get("rust/never"));
    store.set_timeout(LONG);

    // Counting rust/num_keys itself, which is set next.
    let n = store.num_keys().unwrap();
    store
        .set("rust/num_keys", (n + 1).to_string().as_bytes())
        .unwrap();
    store.set("rust/ready", b"1").unwrap();

    peer.await_key(store, "py/ready");
    assert_eq!(store.get("py/set").unwrap(), b"from-python");
    assert_eq!(store.get("py/counter").unwrap(), b"3");
    assert_eq!(store.add("py/counter", 1).unwrap(), 4);
    assert_eq!(store.get("py/cas").unwrap(), b"a");
    let reversed: Vec<u8> = (0..=255).rev().collect();
    assert_eq!(store.get("py/bin").unwrap(), reversed);
    assert!(!store.check(&["py/tmp"]).unwrap());
    assert_eq!(
        store.multi_get(&["py/m2", "py/m1"]).unwrap(),
        vec![b"dos".to_vec(), b"uno".to_vec()]
    );
    assert_eq!(store.get("py/app").unwrap(), b"xyz");
    assert_eq!(store.get("rust/counter").unwrap(), b"17");
    // Set by Python half a second after py/ready: this get waits for it.
    assert_eq!(store.get("py/late").unwrap(), b"late");

    // A queue each way and a barrier with the torch client.
    if queues {
        store.queue_push("rust/q", b"r1").unwrap();
        store.queue_push("rust/q", b"r2").unwrap();
        assert_eq!(store.queue_pop("py/to-rust", true).unwrap(), b"p1");
        assert_eq!(store.queue_len("py/to-rust").unwrap(), 0);
    }
    store.barrier("both/b", 2, LONG).unwrap();
    peer.await_key(store, "py/done");
    let keys = store.list_keys().unwrap();
    for key in ["py/set", "py/after-timeout", "rust/ready"] {
        assert!(
            keys.iter().any(|k| k == key),
            "list_keys lacks {key}: {keys:?}"
        );
    }
}

/// Our client against torch's server with back end `backend`.
fn our_client_on_torch_server(backend: &str) {
    let mut peer = Peer::start(&["server", backend]);
    let line = peer.line();
    let port: u16 = line
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("torch_peer.py printed {line:?}, not PORT <n>"));
    let store = TcpStore::connect("127.0.0.1", port, LONG).unwrap();
    exchange(&store, &mut peer, backend == "libuv");
    if backend == "legacy" {
        // The legacy server drops a connection that asks for a queue; the
        // next call reconnects.
        let err = store.queue_len("rust/q").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::VendorError, "{err}");
        assert_eq!(store.get("py/set").unwrap(), b"from-python");
    }
    peer.finish();
}

#[test]
fn our_client_on_torch_libuv_server() {
    our_client_on_torch_server("libuv");
}

#[test]
fn our_client_on_torch_legacy_server() {
    our_client_on_torch_server("legacy");
}

#[test]
fn torch_client_on_our_server() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port().to_string();
    let store = TcpStore::with_server(server, "127.0.0.1", LONG).unwrap();
    let mut peer = Peer::start(&["client", &port]);
    exchange(&store, &mut peer, true);
    // Our server serves until Python is done with its queue and barrier calls.
    peer.finish();
}

#[test]
fn the_installed_torch_is_the_documented_version() {
    let mut peer = Peer::start(&["version"]);
    let version = peer.line();
    peer.finish();
    assert!(
        version.starts_with(TORCH_VERSION),
        "torch {version} is installed, but the protocol was checked against {TORCH_VERSION}: \
         re-check comm/src/store/mod.rs against the new version and update TORCH_VERSION"
    );
}
