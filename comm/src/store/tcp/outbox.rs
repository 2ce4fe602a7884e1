//! What the server has still to send one client: replies go onto the socket
//! as far as it takes them, without blocking, and the rest waits here until
//! the socket is writable again.
//!
//! The queue is bounded: a client that sends requests but never reads the
//! replies is disconnected once [`MAX_QUEUED`] bytes wait for it, and it
//! never holds up the others (the event loop never blocks on a socket).

use std::io::{self, Write};

/// Most bytes queued for one client before the server gives up on it.
pub(super) const MAX_QUEUED: usize = 64 * 1024 * 1024;

/// A queue larger than this is given back to the allocator once sent, so
/// that idle clients cost little memory.
const KEEP_CAPACITY: usize = 64 * 1024;

/// The client has more than [`MAX_QUEUED`] bytes unread.
#[derive(Debug)]
pub(super) struct Overflow;

/// The bytes waiting for one client.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    bytes: Vec<u8>,
    /// How many of `bytes` are already sent.
    sent: usize,
}

impl Outbox {
    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.sent == self.bytes.len()
    }

    /// Bytes waiting.
    pub(super) fn len(&self) -> usize {
        self.bytes.len() - self.sent
    }

    /// Sends `bytes` on `socket` after what already waits: what the socket
    /// does not take now is queued. `Ok(Err(Overflow))`: the bound is
    /// exceeded (nothing was queued); `Err`: the socket failed.
    pub(super) fn send(
        &mut self,
        socket: &mut impl Write,
        bytes: &[u8],
    ) -> io::Result<Result<(), Overflow>> {
        let mut rest = bytes;
        if self.is_empty() {
            let n = write_some(socket, rest)?;
            rest = &rest[n..];
        }
        if rest.is_empty() {
            return Ok(Ok(()));
        }
        if self.len() + rest.len() > MAX_QUEUED {
            return Ok(Err(Overflow));
        }
        if self.sent > 0 && self.sent >= self.bytes.len() / 2 {
            self.bytes.drain(..self.sent);
            self.sent = 0;
        }
        self.bytes.extend_from_slice(rest);
        Ok(Ok(()))
    }

    /// Sends what waits, as far as the socket takes it; `Ok(true)` when
    /// nothing waits any more.
    pub(super) fn flush(&mut self, socket: &mut impl Write) -> io::Result<bool> {
        if !self.is_empty() {
            self.sent += write_some(socket, &self.bytes[self.sent..])?;
        }
        if !self.is_empty() {
            return Ok(false);
        }
        if self.bytes.capacity() > KEEP_CAPACITY {
            self.bytes = Vec::new();
        } else {
            self.bytes.clear();
        }
        self.sent = 0;
        Ok(true)
    }
}

/// Writes as much of `bytes` as `socket` takes without blocking.
fn write_some(socket: &mut impl Write, bytes: &[u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < bytes.len() {
        match socket.write(&bytes[n..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket taking `room` more bytes, then `WouldBlock`.
    struct Socket {
        got: Vec<u8>,
        room: usize,
    }

    impl Write for Socket {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room).min(3);
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.room -= n;
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn bytes_go_out_in_order_as_the_socket_takes_them() {
        let mut s = Socket {
            got: vec![],
            room: 5,
        };
        let mut o = Outbox::default();
        o.send(&mut s, b"hello world").unwrap().unwrap();
        assert_eq!(s.got, b"hello");
        assert_eq!(o.len(), 6);
        o.send(&mut s, b"!").unwrap().unwrap();
        assert!(!o.flush(&mut s).unwrap());
        s.room = 100;
        assert!(o.flush(&mut s).unwrap());
        assert_eq!(s.got, b"hello world!");
        assert!(o.is_empty());
    }

    #[test]
    fn a_client_that_does_not_read_overflows_the_bound() {
        let mut s = Socket {
            got: vec![],
            room: 0,
        };
        let mut o = Outbox::default();
        let chunk = vec![7u8; MAX_QUEUED / 4];
        for _ in 0..4 {
            o.send(&mut s, &chunk).unwrap().unwrap();
        }
        assert!(o.send(&mut s, b"x").unwrap().is_err());
        assert_eq!(o.len(), MAX_QUEUED);
    }
}
