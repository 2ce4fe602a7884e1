//! One client of the server as the event loop keeps it: its non-blocking
//! socket, the bytes it sent that do not yet make a whole request, and the
//! bytes waiting to go to it. An idle client holds no buffers.

use mio::net::TcpStream;

use super::frame::{self, Scan};
use super::outbox::Outbox;
use super::request::Request;
use super::wire::{query, Fields, WireError, TORCH_VALIDATION_MAGIC};

/// An input buffer larger than this is given back to the allocator once
/// empty.
const KEEP_CAPACITY: usize = 16 * 1024;

/// One connected client.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) socket: TcpStream,
    /// Received bytes not yet run as requests.
    inbox: Vec<u8>,
    /// How many of `inbox` are consumed.
    taken: usize,
    /// The request at `taken` needs at least this many bytes in `inbox`.
    need: usize,
    /// The client has passed `VALIDATE`.
    validated: bool,
    /// The client left or is being disconnected: nothing more is read from
    /// it, and it is closed once its queued replies are out.
    pub(super) closing: bool,
    pub(super) outbox: Outbox,
}

impl Session {
    /// A client just accepted.
    pub(super) fn new(socket: TcpStream) -> Self {
        Session {
            socket,
            inbox: Vec::new(),
            taken: 0,
            need: 1,
            validated: false,
            closing: false,
            outbox: Outbox::default(),
        }
    }

    /// Adds bytes the client sent.
    pub(super) fn received(&mut self, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
    }

    /// The next whole request the client sent, if it has sent one; `Err`
    /// (the reason) when its bytes break the protocol. Checks `VALIDATE`,
    /// which is answered by nothing, itself.
    pub(super) fn next_request(&mut self) -> Result<Option<Request>, String> {
        loop {
            let rest = &self.inbox[self.taken..];
            if rest.len() < self.need {
                self.compact();
                return Ok(None);
            }
            let len = match frame::scan(rest, self.validated)? {
                Scan::Complete(len) => len,
                Scan::Incomplete(need) => {
                    self.need = need;
                    self.compact();
                    return Ok(None);
                }
            };
            let q = rest[0];
            let request = Request::read(q, &mut Fields::new(&rest[1..len])).map_err(|e| {
                let m = match e {
                    WireError::Malformed(m) => m,
                    WireError::Io(e) => e.to_string(),
                };
                format!("{} request: {m}", query::name(q))
            })?;
            self.taken += len;
            self.need = 1;
            if self.validated {
                return Ok(Some(request));
            }
            match request {
                Request::Validate(TORCH_VALIDATION_MAGIC) => self.validated = true,
                Request::Validate(magic) => {
                    return Err(format!(
                        "VALIDATE with magic {magic:#x} instead of {TORCH_VALIDATION_MAGIC:#x}"
                    ))
                }
                // The scan lets only VALIDATE through first.
                other => return Err(format!("{other:?} before VALIDATE")),
            }
        }
    }

    /// Drops the consumed bytes.
    fn compact(&mut self) {
        if self.taken == self.inbox.len() && self.inbox.capacity() > KEEP_CAPACITY {
            self.inbox = Vec::new();
        } else {
            self.inbox.drain(..self.taken);
        }
        self.taken = 0;
    }
}
