//! What the server sends one client: a queue that any thread may append to
//! without blocking, drained onto the socket by the connection's writer
//! thread.
//!
//! Replies and wake-ups (`STOP_WAITING`, sent by whichever thread set the
//! awaited key) are queued while the store's lock is held, so they reach the
//! client in the order the store decided them; a client that stops reading
//! holds up only its own writer thread.
//!
//! When nothing is queued or being written, a push first tries to send at
//! once without blocking (a small reply fits the socket's buffer): the
//! client gets its answer without a hand-off to the writer thread, and a
//! barrier of many clients wakes no threads. What does not fit is queued.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;

use nix::sys::socket::{send, MsgFlags};

use parking_lot::{Condvar, Mutex};

/// Most bytes queued for one client before the server gives up on it
/// (a client that sends requests but never reads the replies).
const MAX_QUEUED: usize = 64 * 1024 * 1024;

/// The queue of bytes for one client.
#[derive(Debug)]
pub(super) struct Outbox {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// The socket, to shut it down when the client is given up.
    socket: TcpStream,
}

#[derive(Debug, Default)]
struct Queue {
    bytes: Vec<u8>,
    closed: bool,
    /// The writer took bytes out and is sending them: a push must queue
    /// behind them.
    writing: bool,
}

impl Outbox {
    /// The outbox of the client on `socket`.
    pub(super) fn new(socket: TcpStream) -> Self {
        Outbox {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            socket,
        }
    }

    /// Queues `bytes`. A client with more than [`MAX_QUEUED`] bytes unread
    /// is disconnected instead.
    pub(super) fn push(&self, bytes: &[u8]) {
        let mut q = self.queue.lock();
        if q.closed {
            return;
        }
        let bytes = if q.bytes.is_empty() && !q.writing {
            match self.send_now(bytes) {
                Some(rest) => rest,
                None => return,
            }
        } else {
            bytes
        };
        if bytes.is_empty() {
            return;
        }
        if q.bytes.len() + bytes.len() > MAX_QUEUED {
            tracing::warn!(
                peer = ?self.socket.peer_addr().ok(),
                "TCPStore server: the client does not read its replies; disconnecting it"
            );
            q.closed = true;
            q.bytes.clear();
            let _ = self.socket.shutdown(Shutdown::Both);
        } else {
            q.bytes.extend_from_slice(bytes);
        }
        self.ready.notify_one();
    }

    /// Sends what the socket takes now without blocking; returns the rest
    /// (empty when all went), or `None` when the socket failed (the reader
    /// then finds the connection shut down and ends it).
    fn send_now<'a>(&self, bytes: &'a [u8]) -> Option<&'a [u8]> {
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        let mut sent = 0;
        while sent < bytes.len() {
            match send(self.socket.as_raw_fd(), &bytes[sent..], flags) {
                Ok(n) => sent += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => {
                    let peer = self.socket.peer_addr().ok();
                    tracing::debug!(?peer, "TCPStore server: send failed: {e}");
                    let _ = self.socket.shutdown(Shutdown::Both);
                    return None;
                }
            }
        }
        Some(&bytes[sent..])
    }

    /// No more bytes will be queued: the writer sends what is queued, then
    /// stops.
    pub(super) fn close(&self) {
        self.queue.lock().closed = true;
        self.ready.notify_one();
    }

    /// The writer thread's loop: sends queued bytes on `socket` until the
    /// outbox is closed and empty, or the socket fails (then the socket is
    /// shut down, which also ends the connection's reader).
    pub(super) fn run_writer(&self, mut socket: TcpStream) {
        loop {
            let bytes = {
                let mut q = self.queue.lock();
                while q.bytes.is_empty() && !q.closed {
                    self.ready.wait(&mut q);
                }
                if q.bytes.is_empty() {
                    return;
                }
                q.writing = true;
                std::mem::take(&mut q.bytes)
            };
            let written = socket.write_all(&bytes);
            self.queue.lock().writing = false;
            if let Err(e) = written {
                tracing::debug!(peer = ?socket.peer_addr().ok(), "TCPStore server: send failed: {e}");
                let mut q = self.queue.lock();
                q.closed = true;
                q.bytes.clear();
                drop(q);
                let _ = socket.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}
