//! [`TcpStore`]: the client, and torch's constructor that also starts the
//! server on the master.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use super::super::timeout::{deadline, remaining, TimeoutCell};
use super::super::{errors, kv, Store};
use super::conn::Conn;
use super::server::TcpStoreServer;
use super::wire::{query, Message, NOT_READY, READY, STOP_WAITING, WAIT_CANCELED};

/// What torch's client puts in front of every user key.
const KEY_PREFIX: &str = "/";
/// The raw key the workers count themselves on (`wait_for_workers`).
const INIT_KEY: &str = "init/";
/// Replies to requests that do not wait are expected within the store's
/// timeout, but never less than this.
const MIN_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of a TCPStore server (ours or PyTorch's), and optionally the
/// server itself, like torch's `TCPStore`.
///
/// Keys travel as `/<key>`, exactly as torch's client sends them, so a
/// dipu-rs rank and a PyTorch rank see the same keys. Unlike torch's
/// client, `set`, `append` and `multi_set` return only once the server has
/// applied them (a `PING` follows them on the wire), so any client that looks
/// afterwards sees the write. Calls from several
/// threads take turns on the one connection (a `get` that waits holds it);
/// [`TcpStore::try_clone`] opens another. After a failed call the next call
/// reconnects.
pub struct TcpStore {
    host: String,
    port: u16,
    conn: Mutex<Option<Conn>>,
    timeout: TimeoutCell,
    server: Option<Arc<TcpStoreServer>>,
}

impl fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStore")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("timeout", &self.timeout.get())
            .field("server", &self.server.as_ref().map(|s| s.local_addr()))
            .finish()
    }
}

impl TcpStore {
    /// Connects to the server at `host:port`, retrying until `timeout` (the
    /// server may start after the client), which also becomes the timeout of
    /// blocking calls.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self> {
        let conn = Conn::connect(host, port, timeout)?;
        Ok(TcpStore {
            host: host.to_owned(),
            port,
            conn: Mutex::new(Some(conn)),
            timeout: TimeoutCell::new(timeout),
            server: None,
        })
    }

    /// torch's `TCPStore(host, port, world_size, is_master, timeout,
    /// wait_for_workers)`: when `is_master`, starts a server on `port` of
    /// every local address (port 0: a free one, see [`TcpStore::port`]);
    /// then connects to `host:port`. With `wait_for_workers` and a
    /// `world_size`, every store counts itself on the key `init/`, and the
    /// master's constructor returns only once `world_size` stores have.
    pub fn new(
        host: &str,
        port: u16,
        world_size: Option<usize>,
        is_master: bool,
        timeout: Duration,
        wait_for_workers: bool,
    ) -> Result<Self> {
        let (server, port) = if is_master {
            let server = TcpStoreServer::bind_all(port)?;
            let port = server.port();
            (Some(Arc::new(server)), port)
        } else {
            (None, port)
        };
        let mut store = TcpStore::connect(host, port, timeout)?;
        store.server = server;
        if let (true, Some(n)) = (wait_for_workers, world_size) {
            store.wait_for_workers(n)?;
        }
        Ok(store)
    }

    /// A client of a server started in this process (`server.port()` on
    /// `host`, e.g. `"127.0.0.1"`), keeping the server alive as long as this
    /// store or a clone of it lives.
    pub fn with_server(server: TcpStoreServer, host: &str, timeout: Duration) -> Result<Self> {
        let mut store = TcpStore::connect(host, server.port(), timeout)?;
        store.server = Some(Arc::new(server));
        Ok(store)
    }

    /// Another client of the same server, on its own connection (torch's
    /// `clone()`), sharing this one's server if it has one.
    pub fn try_clone(&self) -> Result<Self> {
        let mut store = TcpStore::connect(&self.host, self.port, self.timeout())?;
        store.server = self.server.clone();
        Ok(store)
    }

    /// The host the client connects to.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server this store started (on the master), if any.
    pub fn server(&self) -> Option<&TcpStoreServer> {
        self.server.as_deref()
    }

    /// Runs `op` on the connection (made anew if an earlier call broke it)
    /// with the timeout for plain replies.
    fn call<T>(&self, op: impl FnOnce(&mut Conn, Duration) -> Result<T>) -> Result<T> {
        let mut guard = self.conn.lock();
        let conn = match &mut *guard {
            Some(conn) => conn,
            empty => empty.insert(Conn::connect(&self.host, self.port, self.timeout())?),
        };
        let result = op(conn, self.timeout().max(MIN_REPLY_TIMEOUT));
        if conn.is_broken() {
            *guard = None;
        }
        result
    }

    fn add_raw(&self, key: &str, delta: i64) -> Result<i64> {
        self.call(|conn, reply_timeout| {
            let m = Message::query(query::ADD).bytes(key.as_bytes()).i64(delta);
            conn.send(&m.into_bytes(), "ADD")?;
            conn.read(
                reply_timeout,
                &format!("the reply to ADD on key {key:?}"),
                |f| f.i64(),
            )
        })
    }

    fn get_raw(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.call(|conn, reply_timeout| {
            wait_raw(conn, &[key], timeout, reply_timeout)?;
            let m = Message::query(query::GET).bytes(key.as_bytes());
            conn.send(&m.into_bytes(), "GET")?;
            conn.read(
                reply_timeout,
                &format!("the reply to GET of key {key:?}"),
                |f| f.blob(),
            )
        })
    }

    /// Counts this store on `init/`; the master then waits for
    /// `world_size` stores to have done so.
    fn wait_for_workers(&self, world_size: usize) -> Result<()> {
        self.add_raw(INIT_KEY, 1)?;
        if self.server.is_none() {
            return Ok(());
        }
        let timeout = self.timeout();
        let at = deadline(timeout);
        loop {
            let value = self.get_raw(INIT_KEY, remaining(at))?;
            let joined = kv::parse_counter(&value).unwrap_or(0);
            if joined >= world_size as i64 {
                return Ok(());
            }
            if remaining(at).is_zero() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "TCPStore master on port {}: timed out after {} waiting for workers: {joined} of {world_size} joined",
                        self.port,
                        errors::show_duration(timeout)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10).min(remaining(at)));
        }
    }
}

/// The key torch's client sends for user key `key`.
fn wire_key(key: &str) -> String {
    format!("{KEY_PREFIX}{key}")
}

/// Sends a request that has no reply (`SET`, `APPEND`, `MULTI_SET`) and a
/// `PING` behind it, and returns once the `PING` comes back: the server
/// handles a connection's requests in order, so the write has been applied
/// and every client now sees it. (torch's client does not wait, so a key it
/// sets may reach the server after another client's later `CHECK`.)
fn send_applied(conn: &mut Conn, m: Message, what: &str, reply_timeout: Duration) -> Result<()> {
    static NONCE: AtomicU32 = AtomicU32::new(1);
    let nonce = NONCE.fetch_add(1, Ordering::Relaxed);
    let mut bytes = m.into_bytes();
    bytes.extend(Message::query(query::PING).u32(nonce).into_bytes());
    conn.send(&bytes, what)?;
    let echoed = conn.read(reply_timeout, &format!("the PING behind {what}"), |f| {
        f.u32()
    })?;
    if echoed != nonce {
        return Err(conn.fail(&format!(
            "PING behind {what} answered {echoed}, not {nonce}"
        )));
    }
    Ok(())
}

/// Sends `WAIT` for `keys` (wire keys) and waits up to `timeout` for
/// `STOP_WAITING`; on expiry cancels the wait as torch's client does.
fn wait_raw(
    conn: &mut Conn,
    keys: &[&str],
    timeout: Duration,
    reply_timeout: Duration,
) -> Result<()> {
    let mut m = Message::query(query::WAIT).u64(keys.len() as u64);
    for key in keys {
        m = m.bytes(key.as_bytes());
    }
    await_stop_waiting(conn, m, "WAIT", keys, timeout, reply_timeout)
}

/// Sends `request` (`WAIT` or `BARRIER`, on wire keys `keys`) and waits up
/// to `timeout` for `STOP_WAITING`; on expiry cancels the wait as torch's
/// client does.
fn await_stop_waiting(
    conn: &mut Conn,
    request: Message,
    what: &str,
    keys: &[&str],
    timeout: Duration,
    reply_timeout: Duration,
) -> Result<()> {
    conn.send(&request.into_bytes(), what)?;
    match conn.poll_byte(timeout, &format!("the reply to {what}"))? {
        Some(STOP_WAITING) => return Ok(()),
        Some(other) => return Err(conn.fail(&format!("{what} answered {other}, not STOP_WAITING"))),
        None => {}
    }
    conn.send(
        &Message::query(query::CANCEL_WAIT).into_bytes(),
        "CANCEL_WAIT",
    )?;
    let what = "the reply to CANCEL_WAIT";
    match conn.read(reply_timeout, what, |f| f.u8())? {
        WAIT_CANCELED => {
            let user: Vec<&str> = keys
                .iter()
                .map(|k| k.strip_prefix(KEY_PREFIX).unwrap_or(k))
                .collect();
            let store = format!("TCPStore at {}", conn.peer());
            Err(errors::wait_timeout(&store, &user, timeout))
        }
        // The keys arrived as the time ran out: the wait succeeded after all.
        STOP_WAITING => match conn.read(reply_timeout, what, |f| f.u8())? {
            WAIT_CANCELED => Ok(()),
            other => Err(conn.fail(&format!("CANCEL_WAIT answered {other}, not WAIT_CANCELED"))),
        },
        other => Err(conn.fail(&format!("CANCEL_WAIT answered {other}"))),
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let m = Message::query(query::SET)
            .bytes(wire_key(key).as_bytes())
            .bytes(value);
        self.call(|conn, reply_timeout| send_applied(conn, m, "SET", reply_timeout))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.get_raw(&wire_key(key), self.timeout())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.add_raw(&wire_key(key), delta)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let m = Message::query(query::COMPARE_SET)
            .bytes(wire_key(key).as_bytes())
            .bytes(expected)
            .bytes(desired);
        self.call(|conn, reply_timeout| {
            conn.send(&m.into_bytes(), "COMPARE_SET")?;
            let what = format!("the reply to COMPARE_SET of key {key:?}");
            conn.read(reply_timeout, &what, |f| f.blob())
        })
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        let m = Message::query(query::DELETE_KEY).bytes(wire_key(key).as_bytes());
        self.call(|conn, reply_timeout| {
            conn.send(&m.into_bytes(), "DELETE_KEY")?;
            let what = format!("the reply to DELETE_KEY of key {key:?}");
            Ok(conn.read(reply_timeout, &what, |f| f.i64())? == 1)
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let mut m = Message::query(query::CHECK).u64(keys.len() as u64);
        for key in keys {
            m = m.bytes(wire_key(key).as_bytes());
        }
        self.call(|conn, reply_timeout| {
            conn.send(&m.into_bytes(), "CHECK")?;
            match conn.read(reply_timeout, "the reply to CHECK", |f| f.u8())? {
                READY => Ok(true),
                NOT_READY => Ok(false),
                other => Err(conn.fail(&format!("CHECK answered {other}, not READY or NOT_READY"))),
            }
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        if timeout.is_zero() {
            return match self.check(keys)? {
                true => Ok(()),
                false => Err(errors::wait_timeout(
                    &format!("TCPStore at {}:{}", self.host, self.port),
                    keys,
                    timeout,
                )),
            };
        }
        let wire: Vec<String> = keys.iter().map(|k| wire_key(k)).collect();
        let wire: Vec<&str> = wire.iter().map(String::as_str).collect();
        self.call(|conn, reply_timeout| wait_raw(conn, &wire, timeout, reply_timeout))
    }

    fn num_keys(&self) -> Result<i64> {
        self.call(|conn, reply_timeout| {
            conn.send(
                &Message::query(query::GETNUMKEYS).into_bytes(),
                "GETNUMKEYS",
            )?;
            conn.read(reply_timeout, "the reply to GETNUMKEYS", |f| f.i64())
        })
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let m = Message::query(query::APPEND)
            .bytes(wire_key(key).as_bytes())
            .bytes(value);
        self.call(|conn, reply_timeout| send_applied(conn, m, "APPEND", reply_timeout))
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        let wire: Vec<String> = keys.iter().map(|k| wire_key(k)).collect();
        let wire: Vec<&str> = wire.iter().map(String::as_str).collect();
        let timeout = self.timeout();
        self.call(|conn, reply_timeout| {
            wait_raw(conn, &wire, timeout, reply_timeout)?;
            let mut m = Message::query(query::MULTI_GET).u64(wire.len() as u64);
            for key in &wire {
                m = m.bytes(key.as_bytes());
            }
            conn.send(&m.into_bytes(), "MULTI_GET")?;
            conn.read(reply_timeout, "the reply to MULTI_GET", |f| {
                (0..wire.len()).map(|_| f.blob()).collect()
            })
        })
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        errors::check_multi_set(keys, values)?;
        let mut m = Message::query(query::MULTI_SET).i64(keys.len() as i64);
        for (key, value) in keys.iter().zip(values) {
            m = m.bytes(wire_key(key).as_bytes()).bytes(value);
        }
        self.call(|conn, reply_timeout| send_applied(conn, m, "MULTI_SET", reply_timeout))
    }

    /// Keys set by torch's or our client; keys without the `/` prefix, such
    /// as `init/`, are left out as torch does.
    fn list_keys(&self) -> Result<Vec<String>> {
        self.call(|conn, reply_timeout| {
            conn.send(&Message::query(query::LIST_KEYS).into_bytes(), "LIST_KEYS")?;
            conn.read(reply_timeout, "the reply to LIST_KEYS", |f| {
                let n = f.i64()?;
                let mut keys = Vec::new();
                for _ in 0..n.max(0) {
                    let key = f.blob()?;
                    if let Some(user) = key.strip_prefix(KEY_PREFIX.as_bytes()) {
                        keys.push(String::from_utf8_lossy(user).into_owned());
                    }
                }
                Ok(keys)
            })
        })
    }

    /// Needs a server with queues: ours, or torch's libuv server (torch's
    /// legacy server drops the connection: `VendorError`).
    fn queue_push(&self, key: &str, value: &[u8]) -> Result<()> {
        let m = Message::query(query::QUEUE_PUSH)
            .bytes(wire_key(key).as_bytes())
            .bytes(value);
        self.call(|conn, reply_timeout| send_applied(conn, m, "QUEUE_PUSH", reply_timeout))
    }

    fn queue_pop(&self, key: &str, block: bool) -> Result<Vec<u8>> {
        let wire = wire_key(key);
        let timeout = self.timeout();
        let at = deadline(timeout);
        self.call(|conn, reply_timeout| loop {
            if block {
                wait_raw(conn, &[&wire], remaining(at), reply_timeout).map_err(|e| {
                    match e.kind() {
                        // Name the whole timeout, not what was left of it.
                        ErrorKind::Timeout => errors::wait_timeout(
                            &format!("TCPStore at {}", conn.peer()),
                            &[key],
                            timeout,
                        ),
                        _ => e,
                    }
                })?;
            }
            let m = Message::query(query::QUEUE_POP).bytes(wire.as_bytes());
            conn.send(&m.into_bytes(), "QUEUE_POP")?;
            let what = format!("the reply to QUEUE_POP of queue {key:?}");
            let value = conn.read(reply_timeout, &what, |f| match f.i64()? {
                0 => Ok(None),
                _ => f.blob().map(Some),
            })?;
            match value {
                Some(value) => return Ok(value),
                // Another client took it between the WAIT and the POP (or
                // a value of that name, not a queue, answered the WAIT).
                None if block => {
                    if remaining(at).is_zero() {
                        let store = format!("TCPStore at {}", conn.peer());
                        return Err(errors::wait_timeout(&store, &[key], timeout));
                    }
                    std::thread::sleep(Duration::from_millis(5).min(remaining(at)));
                }
                None => {
                    return Err(errors::queue_empty(
                        &format!("TCPStore at {}", conn.peer()),
                        key,
                    ))
                }
            }
        })
    }

    fn queue_len(&self, key: &str) -> Result<i64> {
        let m = Message::query(query::QUEUE_LEN).bytes(wire_key(key).as_bytes());
        self.call(|conn, reply_timeout| {
            conn.send(&m.into_bytes(), "QUEUE_LEN")?;
            let what = format!("the reply to QUEUE_LEN of queue {key:?}");
            conn.read(reply_timeout, &what, |f| f.i64())
        })
    }

    /// One `BARRIER` request, torch's: the server counts the arrivals at
    /// the key and answers everyone once `world_size` have come.
    fn barrier(&self, key: &str, world_size: usize, timeout: Duration) -> Result<()> {
        errors::check_world_size(world_size)?;
        let wire = wire_key(key);
        let m = Message::query(query::BARRIER)
            .bytes(wire.as_bytes())
            .i64(i64::try_from(world_size).unwrap_or(i64::MAX));
        self.call(|conn, reply_timeout| {
            await_stop_waiting(conn, m, "BARRIER", &[&wire], timeout, reply_timeout)
        })
        .map_err(|e| match e.kind() {
            ErrorKind::Timeout => Error::new(
                ErrorKind::Timeout,
                format!("barrier {key:?} of {world_size}: {}", e.message()),
            ),
            _ => e,
        })
    }
}
