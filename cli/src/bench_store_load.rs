//! The load generator of `dipu bench store`: many TCPStore clients on a few
//! threads, each thread driving its share of the connections without
//! blocking (one `mio::Poll` per thread), speaking torch's protocol
//! directly. One request is in flight per connection at a time, as with a
//! real rank.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use dipu_comm::store::TORCH_VALIDATION_MAGIC;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// The shape of the reply a request waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply {
    /// This many bytes.
    Fixed(usize),
    /// A `u64` length, then that many bytes.
    Value,
}

/// One request and the reply it waits for.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) bytes: Vec<u8>,
    pub(crate) reply: Reply,
}

/// Encodes requests (torch's TCPStore protocol).
#[derive(Debug, Default)]
pub(crate) struct Msg(Vec<u8>);

impl Msg {
    /// A request of query type `q`, appended to what is there.
    pub(crate) fn query(mut self, q: u8) -> Self {
        self.0.push(q);
        self
    }
    /// A `u32` field.
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// An `i64` field (also a `u64` count).
    pub(crate) fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A length-prefixed field.
    pub(crate) fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(&(v.len() as u64).to_le_bytes());
        self.0.extend_from_slice(v);
        self
    }
    /// The request, waiting for `reply`.
    pub(crate) fn expect(self, reply: Reply) -> Step {
        Step {
            bytes: self.0,
            reply,
        }
    }
}

/// Query types used here.
pub(crate) mod q {
    pub(crate) const VALIDATE: u8 = 0;
    pub(crate) const SET: u8 = 1;
    pub(crate) const GET: u8 = 3;
    pub(crate) const ADD: u8 = 4;
    pub(crate) const WAIT: u8 = 6;
    pub(crate) const PING: u8 = 13;
    pub(crate) const BARRIER: u8 = 18;
}

/// The handshake of every client: `VALIDATE`, then `PING` echoed.
pub(crate) fn handshake(nonce: u32) -> Step {
    Msg::default()
        .query(q::VALIDATE)
        .u32(TORCH_VALIDATION_MAGIC)
        .query(q::PING)
        .u32(nonce)
        .expect(Reply::Fixed(4))
}

struct Conn {
    socket: TcpStream,
    input: Vec<u8>,
    waiting: Option<Reply>,
    connected: bool,
    step: usize,
}

/// The connections one thread drives.
pub(crate) struct Driver {
    poll: Poll,
    events: Events,
    conns: Vec<Conn>,
    /// The first connection's number among all clients.
    first: usize,
}

impl Driver {
    /// Starts connecting `n` clients, numbered from `first`, to `addr`
    /// (without waiting: [`Driver::run`] finishes the connections).
    pub(crate) fn connect(addr: SocketAddr, first: usize, n: usize) -> io::Result<Driver> {
        let poll = Poll::new()?;
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            let mut socket = TcpStream::connect(addr)?;
            poll.registry().register(
                &mut socket,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            conns.push(Conn {
                socket,
                input: Vec::new(),
                waiting: None,
                connected: false,
                step: 0,
            });
        }
        Ok(Driver {
            poll,
            events: Events::with_capacity(1024),
            conns,
            first,
        })
    }

    /// Runs, on every connection at once, the requests `steps(client,
    /// k)` for k = 0, 1, ... until it returns `None`, each after the reply
    /// to the one before; fails if the server is silent for `patience`.
    pub(crate) fn run(
        &mut self,
        steps: impl Fn(usize, usize) -> Option<Step>,
        patience: Duration,
    ) -> io::Result<()> {
        let mut left = self.conns.len();
        for i in 0..self.conns.len() {
            self.conns[i].step = 0;
            if self.conns[i].connected {
                left -= usize::from(self.next(i, &steps)?);
            }
        }
        let mut heard = Instant::now();
        while left > 0 {
            self.poll.poll(&mut self.events, Some(patience / 10))?;
            if self.events.is_empty() && heard.elapsed() > patience {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{left} clients still wait for the server"),
                ));
            }
            if !self.events.is_empty() {
                heard = Instant::now();
            }
            let ready: Vec<(usize, bool, bool)> = self
                .events
                .iter()
                .map(|e| {
                    (
                        e.token().0,
                        e.is_writable(),
                        e.is_readable() || e.is_read_closed(),
                    )
                })
                .collect();
            for (i, writable, readable) in ready {
                if !self.conns[i].connected {
                    if !writable || !self.finish_connect(i)? {
                        continue;
                    }
                    left -= usize::from(self.next(i, &steps)?);
                }
                if readable {
                    left -= self.receive(i, &steps)?;
                }
            }
        }
        Ok(())
    }

    /// Closes every connection and waits, up to `patience` of silence,
    /// until the server has closed its side of each: the server's work of
    /// tearing them down ends here, not in whatever is timed next.
    pub(crate) fn disconnect(mut self, patience: Duration) -> io::Result<()> {
        let mut open = vec![true; self.conns.len()];
        let mut left = self.conns.len();
        for (i, c) in self.conns.iter().enumerate() {
            if !c.connected || c.socket.shutdown(std::net::Shutdown::Write).is_err() {
                open[i] = false;
                left -= 1;
            }
        }
        let mut buf = [0u8; 1024];
        let mut heard = Instant::now();
        while left > 0 {
            self.poll.poll(&mut self.events, Some(patience / 10))?;
            if self.events.is_empty() && heard.elapsed() > patience {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the server has not closed {left} connections"),
                ));
            }
            if !self.events.is_empty() {
                heard = Instant::now();
            }
            for event in &self.events {
                let i = event.token().0;
                while open[i] {
                    match self.conns[i].socket.read(&mut buf) {
                        Ok(0) => open[i] = false,
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => open[i] = false,
                    }
                    if !open[i] {
                        left -= 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether connection `i`'s connect completed.
    fn finish_connect(&mut self, i: usize) -> io::Result<bool> {
        let c = &mut self.conns[i];
        if let Some(e) = c.socket.take_error()? {
            return Err(e);
        }
        match c.socket.peer_addr() {
            Ok(_) => {
                c.socket.set_nodelay(true)?;
                c.connected = true;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sends connection `i`'s next request; `true` when it has none left.
    fn next(
        &mut self,
        i: usize,
        steps: &impl Fn(usize, usize) -> Option<Step>,
    ) -> io::Result<bool> {
        let c = &mut self.conns[i];
        let Some(step) = steps(self.first + i, c.step) else {
            c.waiting = None;
            return Ok(true);
        };
        c.step += 1;
        // One small request in flight: the socket's buffer is empty.
        c.socket.write_all(&step.bytes)?;
        c.waiting = Some(step.reply);
        Ok(false)
    }

    /// Reads what connection `i` got; returns 1 if it finished its steps.
    fn receive(
        &mut self,
        i: usize,
        steps: &impl Fn(usize, usize) -> Option<Step>,
    ) -> io::Result<usize> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.conns[i].socket.read(&mut buf) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed a connection",
                    ))
                }
                Ok(n) => {
                    self.conns[i].input.extend_from_slice(&buf[..n]);
                    if n < buf.len() {
                        // The socket is empty: later bytes raise a new event.
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        loop {
            let c = &mut self.conns[i];
            let Some(reply) = c.waiting else {
                return Ok(0);
            };
            let Some(len) = complete(&c.input, reply) else {
                return Ok(0);
            };
            c.input.drain(..len);
            if self.next(i, steps)? {
                return Ok(1);
            }
        }
    }
}

/// The length of the reply at the start of `input`, once all of it is there.
fn complete(input: &[u8], reply: Reply) -> Option<usize> {
    let len = match reply {
        Reply::Fixed(n) => n,
        Reply::Value => {
            let head: [u8; 8] = input.get(..8)?.try_into().ok()?;
            8 + usize::try_from(u64::from_le_bytes(head)).ok()?
        }
    };
    (input.len() >= len).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_complete_only_when_all_bytes_are_in() {
        assert_eq!(complete(&[1, 2, 3], Reply::Fixed(4)), None);
        assert_eq!(complete(&[1, 2, 3, 4, 5], Reply::Fixed(4)), Some(4));
        let mut v = 3u64.to_le_bytes().to_vec();
        assert_eq!(complete(&v, Reply::Value), None);
        v.extend_from_slice(b"abc");
        assert_eq!(complete(&v, Reply::Value), Some(11));
    }

    #[test]
    fn a_driver_completes_the_handshake_with_our_server() {
        let srv = dipu_comm::store::TcpStoreServer::bind("127.0.0.1", 0).unwrap();
        let mut d = Driver::connect(srv.local_addr(), 0, 8).unwrap();
        d.run(
            |_, k| (k == 0).then(|| handshake(7)),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(srv.num_clients(), 8);
        let counter = |_: usize, k: usize| {
            (k < 3).then(|| {
                Msg::default()
                    .query(q::ADD)
                    .bytes(b"/n")
                    .i64(1)
                    .expect(Reply::Fixed(8))
            })
        };
        d.run(counter, Duration::from_secs(30)).unwrap();
        let store =
            dipu_comm::store::TcpStore::connect("127.0.0.1", srv.port(), Duration::from_secs(30))
                .unwrap();
        use dipu_comm::store::Store;
        assert_eq!(store.add("n", 0).unwrap(), 24);
        // Disconnecting returns once the server has closed all eight; its
        // count of clients drops just after it closes a socket, so a loaded
        // machine may see it a moment later.
        d.disconnect(Duration::from_secs(30)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while srv.num_clients() != 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(srv.num_clients(), 1);
    }
}
