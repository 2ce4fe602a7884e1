//! The server's event loop: one thread and one `mio::Poll` for the
//! listening socket and every client. Nothing blocks in it: a request that
//! has to wait (`WAIT`, `BARRIER`) is parked in [`State`], a reply the
//! socket does not take at once waits in the client's [`Outbox`], and input
//! waits in the client's [`Session`] until a whole request has arrived.

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::outbox::MAX_QUEUED;
use super::server::Shared;
use super::session::Session;
use super::state::{Replies, State};

/// The listening socket's token; clients' tokens are their slab keys.
const LISTENER: Token = Token(usize::MAX - 1);
/// The token of the waker that stops the loop.
pub(super) const WAKER: Token = Token(usize::MAX);
/// Bytes read from the socket at a time.
const CHUNK: usize = 64 * 1024;
/// Most bytes read from one client before the loop turns to the others.
const TURN: usize = 1024 * 1024;
/// How often accepting is retried while the process is out of descriptors.
const STARVED_RETRY: Duration = Duration::from_millis(50);
/// Running out of descriptors again within this long of the last time is
/// the same burst, and is not logged again.
const BURST_GAP: Duration = Duration::from_secs(10);

/// The loop's state.
pub(super) struct Reactor {
    poll: Poll,
    listener: TcpListener,
    sessions: Slab<Session>,
    state: State,
    shared: Arc<Shared>,
    /// Where reads land before going to a session.
    scratch: Vec<u8>,
    replies: Replies,
    /// Clients whose turn ended with input left in the socket.
    again: Vec<Token>,
    /// Accepting failed for want of descriptors.
    starved: bool,
    /// When accepting last failed for want of descriptors (a burst is
    /// logged once: failures less than `BURST_GAP` apart are one burst).
    last_starved: Option<Instant>,
}

impl Reactor {
    /// A loop serving `listener` (non-blocking) on `poll`.
    pub(super) fn new(
        poll: Poll,
        mut listener: TcpListener,
        shared: Arc<Shared>,
    ) -> io::Result<Self> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Reactor {
            poll,
            listener,
            sessions: Slab::new(),
            state: State::default(),
            shared,
            scratch: vec![0; CHUNK],
            replies: Vec::new(),
            again: Vec::new(),
            starved: false,
            last_starved: None,
        })
    }

    /// Serves until the server is dropped; then every client is closed.
    pub(super) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else if self.starved {
                Some(STARVED_RETRY)
            } else {
                None
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!("TCPStore server: its event loop failed, stopping: {e}");
                return;
            }
            if self.shared.stopping.load(Ordering::SeqCst) {
                return;
            }
            for event in &events {
                match event.token() {
                    WAKER => {}
                    LISTENER => self.accept(),
                    Token(i) => {
                        if event.is_writable() || event.is_write_closed() || event.is_error() {
                            self.flush(i);
                        }
                        if event.is_read_closed() || event.is_error() {
                            self.read(i, true);
                        } else if event.is_readable() {
                            self.read(i, false);
                        }
                    }
                }
            }
            for Token(i) in std::mem::take(&mut self.again) {
                self.read(i, true);
            }
            if self.starved {
                self.accept();
            }
        }
    }

    /// Accepts every client waiting in the listen queue.
    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut socket, peer)) => {
                    self.starved = false;
                    if let Err(e) = socket.set_nodelay(true) {
                        tracing::debug!(%peer, "TCPStore server: TCP_NODELAY: {e}");
                    }
                    let entry = self.sessions.vacant_entry();
                    let token = Token(entry.key());
                    let both = Interest::READABLE | Interest::WRITABLE;
                    match self.poll.registry().register(&mut socket, token, both) {
                        Ok(()) => {
                            entry.insert(Session::new(socket));
                            self.shared.clients.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => {
                            tracing::warn!(%peer, "TCPStore server: could not serve a client: {e}");
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_out_of_descriptors(&e) => {
                    let now = Instant::now();
                    let new_burst = self
                        .last_starved
                        .is_none_or(|t| now.duration_since(t) >= BURST_GAP);
                    self.last_starved = Some(now);
                    if new_burst {
                        tracing::warn!(
                            clients = self.sessions.len(),
                            "TCPStore server: cannot accept more clients ({e}); new ones wait \
                             until descriptors free up (RLIMIT_NOFILE: `ulimit -n`)"
                        );
                    }
                    self.starved = true;
                    return;
                }
                // The client gave up before it was accepted, and the like.
                Err(e) => tracing::debug!("TCPStore server: accept failed: {e}"),
            }
        }
    }

    /// Reads client `i`'s input for one turn and runs its requests.
    /// `drain`: read until the socket says `WouldBlock` even after a short
    /// read (the client may have closed its side behind its last bytes).
    fn read(&mut self, i: usize, drain: bool) {
        let mut turn = 0;
        loop {
            let Some(session) = self.sessions.get_mut(i) else {
                return;
            };
            if session.closing {
                return;
            }
            match session.socket.read(&mut self.scratch) {
                Ok(0) => {
                    // The client left; replies still queued go out first.
                    self.state.forget(i);
                    session.closing = true;
                    self.flush(i);
                    return;
                }
                Ok(n) => {
                    session.received(&self.scratch[..n]);
                    self.run_requests(i);
                    if n < self.scratch.len() && !drain {
                        // A short read emptied the socket: bytes arriving
                        // later raise a new event, so skip the read that
                        // would only say `WouldBlock`.
                        return;
                    }
                    turn += n;
                    if turn >= TURN {
                        self.again.push(Token(i));
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if !is_disconnect(&e) {
                        self.close(i, &format!("the connection failed: {e}"));
                    } else {
                        self.close(i, "");
                    }
                    return;
                }
            }
        }
    }

    /// Runs every whole request client `i` has sent.
    fn run_requests(&mut self, i: usize) {
        loop {
            let Some(session) = self.sessions.get_mut(i) else {
                return;
            };
            if session.closing {
                return;
            }
            let outcome = match session.next_request() {
                Ok(None) => return,
                Ok(Some(request)) => self.state.apply(i, request, &mut self.replies),
                Err(m) => Err(m),
            };
            self.deliver();
            if let Err(m) = outcome {
                tracing::warn!(
                    peer = ?self.peer(i),
                    "TCPStore server: disconnecting a client that sent {m}"
                );
                self.state.forget(i);
                if let Some(session) = self.sessions.get_mut(i) {
                    session.closing = true;
                }
                self.flush(i);
                return;
            }
        }
    }

    /// Sends the listed replies and wake-ups.
    fn deliver(&mut self) {
        let mut replies = std::mem::take(&mut self.replies);
        for (id, bytes) in replies.drain(..) {
            let Some(session) = self.sessions.get_mut(id) else {
                continue;
            };
            match session.outbox.send(&mut session.socket, &bytes) {
                Ok(Ok(())) => {}
                Ok(Err(_)) => self.close(
                    id,
                    &format!(
                        "the client does not read its replies (more than {} MiB queued); disconnecting it",
                        MAX_QUEUED >> 20
                    ),
                ),
                Err(e) => self.close(id, &format!("sending failed: {e}")),
            }
        }
        self.replies = replies;
    }

    /// Sends what waits for client `i`; closes a leaving client once all
    /// is out.
    fn flush(&mut self, i: usize) {
        let Some(session) = self.sessions.get_mut(i) else {
            return;
        };
        match session.outbox.flush(&mut session.socket) {
            Ok(true) if session.closing => self.close(i, ""),
            Ok(_) => {}
            Err(e) if is_disconnect(&e) => self.close(i, ""),
            Err(e) => self.close(i, &format!("sending failed: {e}")),
        }
    }

    /// Disconnects client `i`, logging `why` unless it is empty.
    fn close(&mut self, i: usize, why: &str) {
        if !why.is_empty() {
            tracing::warn!(peer = ?self.peer(i), "TCPStore server: {why}");
        }
        self.state.forget(i);
        // Dropping the socket closes it, which takes it out of the poll
        // too: no `deregister` (a system call per client) first.
        if self.sessions.try_remove(i).is_some() {
            self.shared.clients.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn peer(&self, i: usize) -> Option<std::net::SocketAddr> {
        self.sessions.get(i)?.socket.peer_addr().ok()
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

/// Whether accepting failed because the process or the system has no
/// descriptor (or memory) for a new socket.
fn is_out_of_descriptors(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM)
    )
}
