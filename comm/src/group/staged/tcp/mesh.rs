//! A full mesh of TCP connections between the ranks of one communicator.
//!
//! Each rank listens on a port of its own and publishes `ip:port` in the
//! store; it connects to every lower rank and accepts every higher one,
//! each connection opened by a hello (magic, the communicator's nonce, the
//! rank) so that a stray connection is refused. Messages are frames: a tag,
//! a length, the bytes. A thread per peer reads its frames into a mailbox
//! as they come, so a rank's sends never wait for its peer to be receiving
//! (no deadlock whatever the order of sends and receives); a receive takes
//! the first frame with its tag. A peer whose connection ends (it exited or
//! aborted) fails every receive from it that its frames cannot answer.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::{Condvar, Mutex};

use crate::group::staged::rendezvous::{wait_all, Setup};
use crate::group::staged::shared::{gave_up, Aborter, Backoff, Shared};

/// The hello's first bytes.
const HELLO: &[u8; 8] = b"DIPUTCP1";
/// Magic, nonce, rank.
const HELLO_LEN: usize = 8 + 16 + 4;
/// How long a receive sleeps at most before it looks at the stop flag.
const SLICE: Duration = Duration::from_millis(50);

/// Frames received from one peer, by tag.
#[derive(Default)]
struct Inbox {
    frames: HashMap<u64, VecDeque<Vec<u8>>>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
}

#[derive(Default)]
struct Mailbox {
    inbox: Mutex<Inbox>,
    arrived: Condvar,
    /// Buffers of frames already used, for the next frames (no fresh pages
    /// to fault in for every message).
    spare: Mutex<Vec<Vec<u8>>>,
}

/// The most used buffers a mailbox keeps.
const SPARE: usize = 4;

impl Mailbox {
    /// An empty buffer with room for `len` bytes: a spare one if it fits.
    fn buffer(&self, len: usize) -> std::result::Result<Vec<u8>, String> {
        let mut spare = self.spare.lock();
        if let Some(at) = spare.iter().position(|b| b.capacity() >= len) {
            return Ok(spare.swap_remove(at));
        }
        drop(spare);
        let mut data = Vec::new();
        data.try_reserve_exact(len)
            .map_err(|_| format!("no memory for a frame of {len} bytes"))?;
        Ok(data)
    }
}

/// A received frame's bytes; its buffer goes back to its mailbox when
/// dropped.
pub(crate) struct Frame {
    data: Vec<u8>,
    home: Arc<Mailbox>,
}

impl std::ops::Deref for Frame {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        let mut data = std::mem::take(&mut self.data);
        data.clear();
        let mut spare = self.home.spare.lock();
        if spare.len() < SPARE {
            spare.push(data);
        } else if let Some(smallest) = spare.iter_mut().min_by_key(|b| b.capacity()) {
            if smallest.capacity() < data.capacity() {
                *smallest = data;
            }
        }
    }
}

/// One peer: the socket this rank writes to, and its mailbox.
struct Peer {
    socket: TcpStream,
    mailbox: Arc<Mailbox>,
}

/// This rank's connections to every other rank.
pub(crate) struct Mesh {
    peers: Vec<Option<Peer>>,
}

/// The address this rank listens on (`bind`) and the one it publishes.
fn addresses(setup: &Setup, one_machine: bool) -> Result<(SocketAddr, IpAddr)> {
    if let Some(ip) = setup.address {
        return Ok((SocketAddr::new(ip, 0), ip));
    }
    if one_machine {
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        return Ok((SocketAddr::new(local, 0), local));
    }
    let host = crate::group::staged::rendezvous::hostname();
    let found = (host.as_str(), 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut all| all.find(|a| !a.ip().is_loopback()));
    match found {
        Some(a) => Ok((
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            a.ip(),
        )),
        None => Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "the ranks are on several machines, and the host name {host:?} gives no address \
                 the others could reach this rank at: set DIPU_COMM_STAGED_ADDR to this \
                 machine's IP address"
            ),
        )),
    }
}

fn io_error(what: String, e: std::io::Error) -> Error {
    Error::new(ErrorKind::VendorError, format!("{what}: {e}"))
}

/// Connects this rank to every other (see the module documentation).
pub(crate) fn connect(
    setup: &Setup,
    shared: &Shared,
    one_machine: bool,
    deadline: Instant,
) -> Result<Mesh> {
    let (bind, publish) = addresses(setup, one_machine)?;
    let listener =
        TcpListener::bind(bind).map_err(|e| io_error(format!("listening on {bind}"), e))?;
    let port = listener
        .local_addr()
        .map_err(|e| io_error("the listening port".into(), e))?
        .port();
    let key = |r: usize| format!("{}/tcp/{r}", setup.prefix);
    let me = SocketAddr::new(publish, port).to_string();
    setup.store.set(&key(setup.rank), me.as_bytes())?;
    let keys: Vec<String> = (0..setup.rank).map(key).collect();
    let lower = wait_all(
        setup,
        shared,
        &keys,
        deadline,
        "the lower ranks' TCP addresses",
    )?;
    let mut sockets: Vec<Option<TcpStream>> = (0..setup.size).map(|_| None).collect();
    for (r, text) in lower.iter().enumerate() {
        let text = String::from_utf8_lossy(text);
        let addr: SocketAddr = text.parse().map_err(|_| {
            Error::invalid_argument(format!("rank {r} published {text:?}, not ip:port"))
        })?;
        let mut socket = dial(addr, setup, shared, deadline)?;
        let mut hello = Vec::with_capacity(HELLO_LEN);
        hello.extend_from_slice(HELLO);
        hello.extend_from_slice(&setup.nonce);
        hello.extend_from_slice(&(setup.rank as u32).to_le_bytes());
        socket
            .write_all(&hello)
            .map_err(|e| io_error(format!("greeting rank {r} at {addr}"), e))?;
        sockets[r] = Some(socket);
    }
    accept(&listener, setup, shared, deadline, &mut sockets)?;
    let mut peers = Vec::with_capacity(setup.size);
    for (r, socket) in sockets.into_iter().enumerate() {
        peers.push(match socket {
            None => None,
            Some(socket) => Some(start_peer(r, socket)?),
        });
    }
    Ok(Mesh { peers })
}

/// A connection to `addr`, retried until it is taken.
fn dial(addr: SocketAddr, setup: &Setup, shared: &Shared, deadline: Instant) -> Result<TcpStream> {
    let mut backoff = Backoff::new(Duration::from_millis(20));
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(socket) => return Ok(socket),
            Err(e) => {
                shared.check()?;
                if Instant::now() >= deadline {
                    return Err(gave_up(
                        &format!("connecting to {addr}: {e}"),
                        setup.timeout,
                    ));
                }
            }
        }
        backoff.pause();
    }
}

/// Accepts every higher rank, checking their hellos.
fn accept(
    listener: &TcpListener,
    setup: &Setup,
    shared: &Shared,
    deadline: Instant,
    sockets: &mut [Option<TcpStream>],
) -> Result<()> {
    listener
        .set_nonblocking(true)
        .map_err(|e| io_error("the listener".into(), e))?;
    let mut missing = setup.size - setup.rank - 1;
    let mut backoff = Backoff::new(Duration::from_millis(20));
    while missing > 0 {
        match listener.accept() {
            Ok((mut socket, from)) => {
                let greeted = socket
                    .set_nonblocking(false)
                    .and_then(|()| socket.set_read_timeout(Some(Duration::from_secs(10))))
                    .and_then(|()| {
                        let mut hello = [0u8; HELLO_LEN];
                        socket.read_exact(&mut hello).map(|()| hello)
                    });
                let Ok(hello) = greeted else { continue };
                let rank = u32::from_le_bytes(hello[24..].try_into().expect("4 bytes")) as usize;
                let ours = &hello[..8] == HELLO && hello[8..24] == setup.nonce;
                if !ours || rank <= setup.rank || rank >= setup.size || sockets[rank].is_some() {
                    tracing::warn!(target: "dipu::comm", "refused a connection from {from}: not a peer of this communicator");
                    continue;
                }
                socket
                    .set_read_timeout(None)
                    .map_err(|e| io_error(format!("the connection of rank {rank}"), e))?;
                sockets[rank] = Some(socket);
                missing -= 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                shared.check()?;
                if Instant::now() >= deadline {
                    return Err(gave_up(
                        &format!("waiting for {missing} higher rank(s) to connect"),
                        setup.timeout,
                    ));
                }
                backoff.pause();
            }
            Err(e) => return Err(io_error("accepting a peer".into(), e)),
        }
    }
    Ok(())
}

/// Starts the thread that reads `socket`'s frames into the peer's mailbox.
fn start_peer(rank: usize, socket: TcpStream) -> Result<Peer> {
    let what = |e| io_error(format!("the connection of rank {rank}"), e);
    socket.set_nodelay(true).map_err(what)?;
    let mut reader = socket.try_clone().map_err(what)?;
    let mailbox = Arc::new(Mailbox::default());
    let filled = Arc::clone(&mailbox);
    std::thread::Builder::new()
        .name("dipu-comm-tcp-rx".into())
        .spawn(move || {
            let why = loop {
                match read_frame(&mut reader, &filled) {
                    Ok((tag, data)) => {
                        let mut inbox = filled.inbox.lock();
                        inbox.frames.entry(tag).or_default().push_back(data);
                        filled.arrived.notify_all();
                    }
                    Err(e) => break e,
                }
            };
            filled.inbox.lock().closed = Some(why);
            filled.arrived.notify_all();
        })
        .map_err(|e| io_error(format!("starting the reader of rank {rank}"), e))?;
    Ok(Peer { socket, mailbox })
}

/// One frame, or why there is none.
fn read_frame(
    socket: &mut TcpStream,
    mailbox: &Mailbox,
) -> std::result::Result<(u64, Vec<u8>), String> {
    let mut header = [0u8; 16];
    match socket.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err("its connection closed (the process exited or aborted)".into())
        }
        Err(e) => return Err(format!("its connection failed: {e}")),
    }
    let tag = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
    let len = usize::try_from(len).map_err(|_| format!("a frame of {len} bytes"))?;
    let mut data = mailbox.buffer(len)?;
    // Read into the room, without zeroing it first.
    let got = socket
        .take(len as u64)
        .read_to_end(&mut data)
        .map_err(|e| format!("its connection failed in a frame: {e}"))?;
    if got != len {
        return Err(format!(
            "its connection closed in a frame ({got} of {len} bytes came)"
        ));
    }
    Ok((tag, data))
}

impl Mesh {
    fn peer(&self, rank: usize) -> Result<&Peer> {
        self.peers
            .get(rank)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::invalid_argument(format!("rank {rank} is not a peer")))
    }

    /// Sends `data` to `rank` under `tag`.
    pub(crate) fn send(&self, rank: usize, tag: u64, data: &[u8]) -> Result<()> {
        let peer = self.peer(rank)?;
        let mut socket = &peer.socket;
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&tag.to_le_bytes());
        header[8..].copy_from_slice(&(data.len() as u64).to_le_bytes());
        socket
            .write_all(&header)
            .and_then(|()| socket.write_all(data))
            .map_err(|e| {
                let sending = format!("sending {} bytes to rank {rank}: {e}", data.len());
                let message = match &peer.mailbox.inbox.lock().closed {
                    Some(why) => format!("rank {rank} is gone: {why} ({sending})"),
                    None => sending,
                };
                Error::new(ErrorKind::VendorError, message)
            })
    }

    /// The first frame from `rank` under `tag`, waiting until it comes, the
    /// connection ends, the communicator stops or `deadline` passes.
    pub(crate) fn recv(
        &self,
        rank: usize,
        tag: u64,
        shared: &Shared,
        (deadline, timeout): (Instant, Duration),
    ) -> Result<Frame> {
        let mailbox = &self.peer(rank)?.mailbox;
        let mut inbox = mailbox.inbox.lock();
        loop {
            if let Some(data) = inbox.frames.get_mut(&tag).and_then(VecDeque::pop_front) {
                return Ok(Frame {
                    data,
                    home: Arc::clone(mailbox),
                });
            }
            if let Some(why) = &inbox.closed {
                return Err(Error::new(
                    ErrorKind::VendorError,
                    format!("rank {rank} is gone: {why}"),
                ));
            }
            shared.check()?;
            if Instant::now() >= deadline {
                return Err(gave_up(&format!("waiting for rank {rank}"), timeout));
            }
            mailbox.arrived.wait_for(&mut inbox, SLICE);
        }
    }

    /// Shuts every connection down (from any thread): waits on them end.
    pub(crate) fn aborter(&self) -> Result<Aborter> {
        let sockets: Vec<TcpStream> = self
            .peers
            .iter()
            .flatten()
            .map(|p| p.socket.try_clone())
            .collect::<std::io::Result<_>>()
            .map_err(|e| io_error("keeping the connections to abort them".into(), e))?;
        Ok(Box::new(move || {
            for s in &sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }))
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        // The readers see the end and exit.
        for p in self.peers.iter().flatten() {
            let _ = p.socket.shutdown(Shutdown::Both);
        }
    }
}
