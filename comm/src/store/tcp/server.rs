//! [`TcpStoreServer`]: the store's server, on one background thread (an
//! event loop, [`super::reactor`]) of the process that starts it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use dipu_deviceapi::Result;

use super::super::errors;
use super::reactor::{Reactor, WAKER};

/// A TCPStore server speaking torch.distributed's protocol, serving any
/// number of clients (dipu-rs [`super::TcpStore`]s or PyTorch's
/// `TCPStore`s) from one background thread running an event loop, as
/// torch's libuv server does: thousands of ranks cost a socket each, not a
/// thread.
///
/// It behaves as torch's default (libuv) server: the same limits (8 KiB
/// keys, 8 MiB values, 131072 keys a request), an empty value for `GET` of a
/// missing key, and a client that sends anything malformed is disconnected
/// while the others carry on. A client that stops reading its replies is
/// disconnected once 64 MiB wait for it. Dropping the server stops it and
/// disconnects every client.
#[derive(Debug)]
pub struct TcpStoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    waker: mio::Waker,
    thread: Option<JoinHandle<()>>,
}

/// What the server's handle and its event loop share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Clients connected now.
    pub(super) clients: AtomicUsize,
    /// The handle was dropped: the loop ends.
    pub(super) stopping: AtomicBool,
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
        let what = |step: &str| format!("TCPStore server on {addr}: {step}");
        listener
            .set_nonblocking(true)
            .map_err(|e| errors::io(what("making the socket non-blocking"), &e))?;
        let poll = mio::Poll::new().map_err(|e| errors::io(what("creating its poller"), &e))?;
        let waker = mio::Waker::new(poll.registry(), WAKER)
            .map_err(|e| errors::io(what("creating its waker"), &e))?;
        let shared = Arc::new(Shared::default());
        let reactor = Reactor::new(
            poll,
            mio::net::TcpListener::from_std(listener),
            Arc::clone(&shared),
        )
        .map_err(|e| errors::io(what("registering the socket"), &e))?;
        let thread = std::thread::Builder::new()
            .name("dipu-store".into())
            .spawn(move || reactor.run())
            .map_err(|e| errors::io(what("starting its thread"), &e))?;
        tracing::debug!(%addr, "TCPStore server started");
        Ok(TcpStoreServer {
            addr,
            shared,
            waker,
            thread: Some(thread),
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
        self.shared.clients.load(Ordering::SeqCst)
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        match self.waker.wake() {
            Ok(()) => {
                if let Some(thread) = self.thread.take() {
                    // The loop closes every client as it ends.
                    let _ = thread.join();
                }
            }
            Err(e) => {
                tracing::warn!(addr = %self.addr, "TCPStore server: could not stop its loop: {e}")
            }
        }
    }
}
