//! Helpers shared by the store tests: one fixture per kind of store, so that
//! one suite runs over all of them.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_comm::store::{FileStore, HashStore, PrefixStore, Store, TcpStore, TcpStoreServer};
use dipu_deviceapi::{ErrorKind, Result};

/// A store under test, and a way to open another handle on the same data
/// (another client, another opener of the file) as a second rank would.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    peer: Box<dyn Fn() -> Arc<dyn Store> + Send + Sync>,
    /// Keeps a temporary directory alive as long as the fixture.
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// Another handle on the same store.
    pub fn peer(&self) -> Arc<dyn Store> {
        (self.peer)()
    }
}

/// A fresh store of `kind` whose blocking calls wait up to `timeout`.
pub fn fixture(kind: &str, timeout: Duration) -> Fixture {
    match kind {
        "hash" => {
            let store: Arc<dyn Store> = Arc::new(HashStore::with_timeout(timeout));
            let peer = Arc::clone(&store);
            Fixture {
                store,
                peer: Box::new(move || Arc::clone(&peer)),
                _dir: None,
            }
        }
        "file" => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("store");
            let open = move || -> Arc<dyn Store> {
                let store = FileStore::new(&path, None).expect("opening the FileStore");
                store.set_timeout(timeout);
                Arc::new(store)
            };
            Fixture {
                store: open(),
                peer: Box::new(open),
                _dir: Some(dir),
            }
        }
        "tcp" => {
            let server = TcpStoreServer::bind("127.0.0.1", 0).expect("starting a server");
            let store = TcpStore::with_server(server, "127.0.0.1", timeout).expect("connecting");
            let store = Arc::new(store);
            let first = Arc::clone(&store);
            Fixture {
                store,
                peer: Box::new(move || Arc::new(first.try_clone().expect("a second client"))),
                _dir: None,
            }
        }
        prefixed => {
            let inner = fixture(
                prefixed.strip_prefix("prefix-").expect("a known kind"),
                timeout,
            );
            let Fixture { store, peer, _dir } = inner;
            Fixture {
                store: Arc::new(PrefixStore::new("pg0", store)),
                peer: Box::new(move || Arc::new(PrefixStore::new("pg0", peer()))),
                _dir,
            }
        }
    }
}

/// Asserts that `f` fails with `Timeout`, no sooner than `timeout`, with a
/// message naming `key` (how much later depends on the machine: not
/// asserted).
pub fn assert_times_out<T: std::fmt::Debug>(
    timeout: Duration,
    key: &str,
    f: impl FnOnce() -> Result<T>,
) {
    let start = Instant::now();
    let err = f().expect_err("the call should time out");
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        err.message().contains(key),
        "the message names {key:?}: {err}"
    );
    assert!(
        took >= timeout,
        "gave up after {took:?}, before {timeout:?}"
    );
}
