//! One client connection to a TCPStore server: connecting with retries, the
//! `VALIDATE`/`PING` handshake, and reading replies with timeouts.

use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};

use super::super::errors;
use super::super::timeout::{deadline, remaining};
use super::wire::{query, Fields, Message, TORCH_VALIDATION_MAGIC};

/// The longest one connection attempt or handshake may take before the
/// next try.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// First and longest pause between connection attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A connected, validated client socket.
#[derive(Debug)]
pub(super) struct Conn {
    peer: SocketAddr,
    socket: TcpStream,
    fields: Fields<BufReader<TcpStream>>,
    /// A send or read failed: where the stream stands is unknown, so the
    /// connection must not be used again.
    broken: bool,
}

impl Conn {
    /// Connects to the server at `host:port`, retrying (the server may not be
    /// up yet) with exponential backoff until `timeout` has passed.
    pub(super) fn connect(host: &str, port: u16, timeout: Duration) -> Result<Conn> {
        let at = deadline(timeout);
        let mut backoff = FIRST_BACKOFF;
        let mut attempt: u32 = 0;
        loop {
            let err = match Conn::try_connect(host, port, remaining(at)) {
                Ok(conn) => return Ok(conn),
                Err(e) => e,
            };
            let left = remaining(at);
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "could not reach a TCPStore server at {host}:{port} within {} ({} attempts); last error: {}",
                        errors::show_duration(timeout),
                        attempt + 1,
                        err.message()
                    ),
                ));
            }
            tracing::debug!(
                "TCPStore client: {host}:{port} not ready ({}); retrying",
                err.message()
            );
            std::thread::sleep(jitter(backoff, attempt).min(left));
            backoff = (backoff * 2).min(MAX_BACKOFF);
            attempt += 1;
        }
    }

    /// One attempt at every address `host` resolves to.
    fn try_connect(host: &str, port: u16, left: Duration) -> Result<Conn> {
        let budget = left.clamp(Duration::from_millis(1), ATTEMPT_TIMEOUT);
        let addrs = (host, port)
            .to_socket_addrs()
            .map_err(|e| errors::io(format!("resolving {host}"), &e))?;
        let mut last = Error::new(ErrorKind::VendorError, format!("{host} has no address"));
        for addr in addrs {
            match Conn::handshake(addr, budget) {
                Ok(conn) => return Ok(conn),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Connects to `addr`, validates and pings.
    fn handshake(addr: SocketAddr, budget: Duration) -> Result<Conn> {
        let what = |step: &str| format!("TCPStore at {addr}: {step}");
        let socket = TcpStream::connect_timeout(&addr, budget)
            .map_err(|e| errors::io(what("connecting"), &e))?;
        socket
            .set_nodelay(true)
            .map_err(|e| errors::io(what("setting TCP_NODELAY"), &e))?;
        let reader = socket
            .try_clone()
            .map_err(|e| errors::io(what("cloning the socket"), &e))?;
        let mut conn = Conn {
            peer: addr,
            socket,
            fields: Fields::new(BufReader::new(reader)),
            broken: false,
        };
        let nonce = std::process::id();
        let hello = Message::query(query::VALIDATE)
            .u32(TORCH_VALIDATION_MAGIC)
            .into_bytes();
        let ping = Message::query(query::PING).u32(nonce).into_bytes();
        conn.send(&[hello, ping].concat(), "VALIDATE and PING")?;
        let echoed = conn.read(budget, "the reply to PING", |f| f.u32())?;
        if echoed != nonce {
            return Err(Error::new(
                ErrorKind::VendorError,
                format!("{}: PING answered {echoed} instead of {nonce}: not a TCPStore server, or another protocol version", what("validating")),
            ));
        }
        Ok(conn)
    }

    /// The server's address.
    pub(super) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether an earlier failure left the stream in an unknown place.
    pub(super) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Marks the connection unusable and returns `err`: for replies that
    /// break the protocol.
    pub(super) fn fail(&mut self, what: &str) -> Error {
        self.broken = true;
        Error::new(
            ErrorKind::VendorError,
            format!("TCPStore at {}: {what}", self.peer),
        )
    }

    /// Sends a whole request.
    pub(super) fn send(&mut self, bytes: &[u8], what: &str) -> Result<()> {
        let sent = self.socket.write_all(bytes);
        self.broken |= sent.is_err();
        sent.map_err(|e| errors::io(format!("TCPStore at {}: sending {what}", self.peer), &e))
    }

    /// One byte if it arrives within `timeout` (at least 1 ms), `None` if
    /// not; a timeout leaves the connection usable. Never gives up before
    /// `timeout` has passed, though the socket's own timer (kept in kernel
    /// ticks) may wake a little early.
    pub(super) fn poll_byte(&mut self, timeout: Duration, what: &str) -> Result<Option<u8>> {
        let at = deadline(timeout.max(Duration::from_millis(1)));
        loop {
            match self.read(remaining(at), what, |f| f.u8()) {
                Ok(b) => return Ok(Some(b)),
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    // Nothing of a one-byte reply was read: the stream is intact.
                    self.broken = false;
                    if remaining(at).is_zero() {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads with `read`, waiting up to `timeout` (`Duration::MAX`: forever)
    /// for the bytes to arrive.
    pub(super) fn read<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        read: impl FnOnce(&mut Fields<BufReader<TcpStream>>) -> io::Result<T>,
    ) -> Result<T> {
        let limit = (timeout != Duration::MAX).then(|| timeout.max(Duration::from_millis(1)));
        let peer = self.peer;
        let fail = |e: io::Error| {
            let e = if e.kind() == io::ErrorKind::UnexpectedEof {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection (it does so when it stops, or when a request fails, such as ADD on a value that is not an integer)",
                )
            } else {
                e
            };
            errors::io(format!("TCPStore at {peer}: reading {what}"), &e)
        };
        let result = match self.fields.get_mut().get_ref().set_read_timeout(limit) {
            Ok(()) => read(&mut self.fields),
            Err(e) => Err(e),
        };
        self.broken |= result.is_err();
        result.map_err(fail)
    }
}

/// `base` plus up to half of it again, varied by process and attempt, so
/// that many ranks do not retry in step.
fn jitter(base: Duration, attempt: u32) -> Duration {
    let seed = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(attempt).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let half = base.as_micros() as u64 / 2;
    base + Duration::from_micros(if half == 0 { 0 } else { (seed >> 17) % half })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_again() {
        for attempt in 0..20 {
            let d = jitter(Duration::from_millis(100), attempt);
            assert!(d >= Duration::from_millis(100) && d < Duration::from_millis(150));
        }
    }

    #[test]
    fn connecting_to_nothing_times_out_naming_the_address() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let start = std::time::Instant::now();
        let err = Conn::connect("127.0.0.1", port, Duration::from_millis(200)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert!(
            err.message().contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
        // Not before its timeout (how much later depends on the machine).
        assert!(start.elapsed() >= Duration::from_millis(200));
    }
}
