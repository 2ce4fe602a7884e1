//! [`TcpStoreServer`]: the store's server, on background threads of the
//! process that starts it.

use std::collections::HashMap;
use std::io::{self, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use dipu_deviceapi::Result;
use parking_lot::Mutex;

use super::super::errors;
use super::outbox::Outbox;
use super::request::Request;
use super::state::{ClientId, State};
use super::wire::{query, Fields, WireError, TORCH_VALIDATION_MAGIC};

/// A TCPStore server speaking torch.distributed's protocol, serving any
/// number of clients (dipu-rs [`super::TcpStore`]s or PyTorch's
/// `TCPStore`s) on background threads: one thread accepts, and each client
/// gets a reader and a writer thread.
///
/// It behaves as torch's default (libuv) server: the same limits (8 KiB
/// keys, 8 MiB values, 131072 keys a request), an empty value for `GET` of a
/// missing key, and a client that sends anything malformed is disconnected
/// while the others carry on. Dropping the server stops it and disconnects
/// every client.
#[derive(Debug)]
pub struct TcpStoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

/// What the server's threads share.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Every connected client's socket, to disconnect them at shutdown.
    clients: Mutex<HashMap<ClientId, TcpStream>>,
    next_id: AtomicU64,
    stopping: AtomicBool,
}

impl TcpStoreServer {
    /// Starts a server listening on `host` (an address to bind such as
    /// `"127.0.0.1"`, `"0.0.0.0"` or `"::"`, or a host name) and `port`
    /// (0: a free port, see [`TcpStoreServer::port`]).
    pub fn bind(host: &str, port: u16) -> Result<Self> {
        let listener = TcpListener::bind((host, port))
            .map_err(|e| errors::io(format!("TCPStore server: binding {host}:{port}"), &e))?;
        TcpStoreServer::start(listener)
    }

    /// Starts a server on `port` of every local address, as torch's server
    /// does: IPv6 and IPv4 (`[::]`), or IPv4 only (`0.0.0.0`) where there is
    /// no IPv6.
    pub fn bind_all(port: u16) -> Result<Self> {
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
        let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        let listener = TcpListener::bind(v6)
            .or_else(|_| TcpListener::bind(v4))
            .map_err(|e| errors::io(format!("TCPStore server: binding port {port}"), &e))?;
        TcpStoreServer::start(listener)
    }

    /// Starts a server on a listening socket.
    pub fn start(listener: TcpListener) -> Result<Self> {
        let addr = listener
            .local_addr()
            .map_err(|e| errors::io("TCPStore server: reading the bound address", &e))?;
        // The standard library listens with a queue of 128: when more ranks
        // than that connect at once, the kernel drops their SYNs and each
        // retries a second later. Listen again with the system's largest
        // queue, as torch's server does.
        let most = nix::sys::socket::Backlog::MAXALLOWABLE;
        if let Err(e) = nix::sys::socket::listen(&listener, most) {
            tracing::warn!(%addr, "TCPStore server: the listen queue stays at 128: {e}");
        }
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("dipu-store-accept".into())
                .spawn(move || accept_loop(&listener, &shared))
                .map_err(|e| errors::io("TCPStore server: starting its thread", &e))?
        };
        tracing::debug!(%addr, "TCPStore server started");
        Ok(TcpStoreServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many clients are connected now.
    pub fn num_clients(&self) -> usize {
        self.shared.clients.lock().len()
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accepting thread with a connection of our own.
        let ip = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let woke = TcpStream::connect_timeout(
            &SocketAddr::new(ip, self.addr.port()),
            Duration::from_secs(1),
        );
        if let (Ok(_), Some(acceptor)) = (woke, self.acceptor.take()) {
            let _ = acceptor.join();
        }
        for (_, socket) in self.shared.clients.lock().drain() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((socket, peer)) => {
                if let Err(e) = admit(shared, socket) {
                    tracing::warn!(%peer, "TCPStore server: could not serve a client: {e}");
                }
            }
            Err(e) => {
                // Out of descriptors and the like: let clients go away.
                tracing::warn!("TCPStore server: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Registers a new client and starts its reader and writer threads.
fn admit(shared: &Arc<Shared>, socket: TcpStream) -> io::Result<()> {
    socket.set_nodelay(true)?;
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let outbox = Arc::new(Outbox::new(socket.try_clone()?));
    let writer_socket = socket.try_clone()?;
    shared.clients.lock().insert(id, socket.try_clone()?);
    let writer = {
        let outbox = Arc::clone(&outbox);
        std::thread::Builder::new()
            .name("dipu-store-send".into())
            .spawn(move || outbox.run_writer(writer_socket))
    };
    let writer = match writer {
        Ok(w) => w,
        Err(e) => {
            shared.clients.lock().remove(&id);
            return Err(e);
        }
    };
    let reader_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("dipu-store-recv".into())
        .spawn(move || {
            serve(&reader_shared, id, &outbox, socket);
            outbox.close();
            let _ = writer.join();
        });
    if spawned.is_err() {
        if let Some(s) = shared.clients.lock().remove(&id) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
    spawned.map(|_| ())
}

/// Reads and runs one client's requests until it leaves or misbehaves.
fn serve(shared: &Shared, id: ClientId, outbox: &Arc<Outbox>, socket: TcpStream) {
    let peer = socket.peer_addr().ok();
    let mut fields = Fields::new(BufReader::new(socket));
    let outcome = (|| -> Result<(), WireError> {
        let first = fields.u8()?;
        if first != query::VALIDATE {
            return Err(WireError::Malformed(format!(
                "{} ({first}) as its first message instead of VALIDATE",
                query::name(first)
            )));
        }
        let magic = fields.u32()?;
        if magic != TORCH_VALIDATION_MAGIC {
            return Err(WireError::Malformed(format!(
                "VALIDATE with magic {magic:#x} instead of {TORCH_VALIDATION_MAGIC:#x}"
            )));
        }
        loop {
            let q = fields.u8()?;
            let request = Request::read(q, &mut fields).map_err(|e| match e {
                WireError::Malformed(m) => {
                    WireError::Malformed(format!("{} request: {m}", query::name(q)))
                }
                io => io,
            })?;
            shared
                .state
                .lock()
                .apply(id, outbox, request)
                .map_err(WireError::Malformed)?;
        }
    })();
    match outcome {
        Err(WireError::Io(e)) if is_disconnect(&e) => {}
        Err(WireError::Io(e)) => tracing::debug!(?peer, "TCPStore server: client lost: {e}"),
        Err(WireError::Malformed(m)) => {
            tracing::warn!(
                ?peer,
                "TCPStore server: disconnecting a client that sent {m}"
            );
        }
        Ok(()) => {}
    }
    shared.state.lock().forget(id);
    if let Some(socket) = shared.clients.lock().remove(&id) {
        // Replies already queued still go out: close only our reading side.
        let _ = socket.shutdown(Shutdown::Read);
    }
}

/// Whether `e` is the client going away rather than a fault.
fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}
