//! What the server sends one client: a queue that any thread may append to
//! without blocking, drained onto the socket by the connection's writer
//! thread.
//!
//! Replies and wake-ups (`STOP_WAITING`, sent by whichever thread set the
//! awaited key) are queued while the store's lock is held, so they reach the
//! client in the order the store decided them; a client that stops reading
//! holds up only its own writer thread.

use std::io::Write;
use std::net::{Shutdown, TcpStream};

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
                std::mem::take(&mut q.bytes)
            };
            if let Err(e) = socket.write_all(&bytes) {
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
