//! The bytes of torch.distributed's TCPStore protocol (PyTorch 2.15.0):
//! query codes, reply codes, limits, and encoding and decoding of fields.

use std::io::{self, Read};

/// The `u32` a client sends with `VALIDATE` as its first message.
pub const TORCH_VALIDATION_MAGIC: u32 = 0x3C85_F7CE;

/// Query-type bytes (`c10d::detail::QueryType`).
pub(super) mod query {
    pub(crate) const VALIDATE: u8 = 0;
    pub(crate) const SET: u8 = 1;
    pub(crate) const COMPARE_SET: u8 = 2;
    pub(crate) const GET: u8 = 3;
    pub(crate) const ADD: u8 = 4;
    pub(crate) const CHECK: u8 = 5;
    pub(crate) const WAIT: u8 = 6;
    pub(crate) const GETNUMKEYS: u8 = 7;
    pub(crate) const DELETE_KEY: u8 = 8;
    pub(crate) const APPEND: u8 = 9;
    pub(crate) const MULTI_GET: u8 = 10;
    pub(crate) const MULTI_SET: u8 = 11;
    pub(crate) const CANCEL_WAIT: u8 = 12;
    pub(crate) const PING: u8 = 13;
    pub(crate) const QUEUE_PUSH: u8 = 14;
    pub(crate) const QUEUE_POP: u8 = 15;
    pub(crate) const QUEUE_LEN: u8 = 16;
    pub(crate) const LIST_KEYS: u8 = 17;
    pub(crate) const BARRIER: u8 = 18;

    /// The name of a query byte, for messages.
    pub(crate) fn name(q: u8) -> &'static str {
        const NAMES: [&str; 19] = [
            "VALIDATE",
            "SET",
            "COMPARE_SET",
            "GET",
            "ADD",
            "CHECK",
            "WAIT",
            "GETNUMKEYS",
            "DELETE_KEY",
            "APPEND",
            "MULTI_GET",
            "MULTI_SET",
            "CANCEL_WAIT",
            "PING",
            "QUEUE_PUSH",
            "QUEUE_POP",
            "QUEUE_LEN",
            "LIST_KEYS",
            "BARRIER",
        ];
        NAMES
            .get(usize::from(q))
            .copied()
            .unwrap_or("unknown query")
    }
}

/// `CheckResponseType::READY`.
pub(super) const READY: u8 = 0;
/// `CheckResponseType::NOT_READY`.
pub(super) const NOT_READY: u8 = 1;
/// `WaitResponseType::STOP_WAITING`.
pub(super) const STOP_WAITING: u8 = 0;
/// `WaitResponseType::WAIT_CANCELED`.
pub(super) const WAIT_CANCELED: u8 = 1;

/// Longest key the server accepts (torch's libuv server: 8 KiB).
pub(super) const MAX_KEY_LEN: u64 = 8 * 1024;
/// Longest value the server accepts (torch's libuv server: 8 MiB).
pub(super) const MAX_VALUE_LEN: u64 = 8 * 1024 * 1024;
/// Most keys in one request (torch's libuv server: 131072).
pub(super) const MAX_KEY_COUNT: u64 = 128 * 1024;

/// A message being encoded: a query or a reply.
#[derive(Debug, Default)]
pub(super) struct Message(Vec<u8>);

impl Message {
    /// A request of query type `q`.
    pub(super) fn query(q: u8) -> Self {
        Message(vec![q])
    }

    /// An empty message (a reply).
    pub(super) fn reply() -> Self {
        Message(Vec::new())
    }

    /// Appends one byte.
    pub(super) fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }

    /// Appends a `u32`.
    pub(super) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u64` (sizes and key counts).
    pub(super) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends an `i64`.
    pub(super) fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a string or byte value: `u64` length, then the bytes.
    pub(super) fn bytes(self, v: &[u8]) -> Self {
        let mut m = self.u64(v.len() as u64);
        m.0.extend_from_slice(v);
        m
    }

    /// The encoded bytes.
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Why fields could not be read.
#[derive(Debug)]
pub(super) enum WireError {
    /// The stream failed or ended.
    Io(io::Error),
    /// The bytes break the protocol.
    Malformed(String),
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

/// Decoding fields from a stream.
#[derive(Debug)]
pub(super) struct Fields<R> {
    r: R,
}

impl<R: Read> Fields<R> {
    /// Fields read from `r`.
    pub(super) fn new(r: R) -> Self {
        Fields { r }
    }

    /// The stream underneath.
    pub(super) fn get_mut(&mut self) -> &mut R {
        &mut self.r
    }

    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0; N];
        self.r.read_exact(&mut b)?;
        Ok(b)
    }

    /// One byte.
    pub(super) fn u8(&mut self) -> io::Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    /// A `u32`.
    pub(super) fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A `u64`.
    pub(super) fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// An `i64`.
    pub(super) fn i64(&mut self) -> io::Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A length-prefixed value of at most `max` bytes.
    pub(super) fn bytes(&mut self, max: u64, what: &str) -> Result<Vec<u8>, WireError> {
        let len = self.u64()?;
        if len > max {
            return Err(WireError::Malformed(format!(
                "{what} of {len} bytes is longer than the limit of {max}"
            )));
        }
        Ok(self.exactly(len)?)
    }

    /// A length-prefixed value of any length (a reply from the server).
    pub(super) fn blob(&mut self) -> io::Result<Vec<u8>> {
        let len = self.u64()?;
        self.exactly(len)
    }

    /// The next `len` bytes. The buffer grows as bytes arrive, so a lying
    /// length costs no memory up front.
    fn exactly(&mut self, len: u64) -> io::Result<Vec<u8>> {
        let mut v = Vec::with_capacity(len.min(64 * 1024) as usize);
        (&mut self.r).take(len).read_to_end(&mut v)?;
        if (v.len() as u64) < len {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(v)
    }

    /// A key (at most [`MAX_KEY_LEN`] bytes).
    pub(super) fn key(&mut self) -> Result<Vec<u8>, WireError> {
        self.bytes(MAX_KEY_LEN, "a key")
    }

    /// A value (at most [`MAX_VALUE_LEN`] bytes).
    pub(super) fn value(&mut self) -> Result<Vec<u8>, WireError> {
        self.bytes(MAX_VALUE_LEN, "a value")
    }

    /// A key count followed by that many keys.
    pub(super) fn keys(&mut self) -> Result<Vec<Vec<u8>>, WireError> {
        let n = self.count()?;
        (0..n).map(|_| self.key()).collect()
    }

    /// A key count (at most [`MAX_KEY_COUNT`]).
    pub(super) fn count(&mut self) -> Result<u64, WireError> {
        let n = self.u64()?;
        if n > MAX_KEY_COUNT {
            return Err(WireError::Malformed(format!(
                "{n} keys in one request is more than the limit of {MAX_KEY_COUNT}"
            )));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_little_endian_with_u64_lengths() {
        let m = Message::query(query::ADD).bytes(b"/k").i64(-2).into_bytes();
        let mut want = vec![4];
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"/k");
        want.extend_from_slice(&(-2i64).to_le_bytes());
        assert_eq!(m, want);
        let v = Message::query(query::VALIDATE)
            .u32(TORCH_VALIDATION_MAGIC)
            .into_bytes();
        assert_eq!(v, [0, 0xCE, 0xF7, 0x85, 0x3C]);
        assert_eq!(query::name(query::BARRIER), "BARRIER");
        assert_eq!(query::name(200), "unknown query");
    }

    #[test]
    fn decoding_round_trips_and_enforces_limits() {
        let bytes = Message::reply()
            .u64(2)
            .bytes(b"a")
            .bytes(b"bc")
            .u32(7)
            .into_bytes();
        let mut f = Fields::new(&bytes[..]);
        assert_eq!(f.keys().unwrap(), vec![b"a".to_vec(), b"bc".to_vec()]);
        assert_eq!(f.u32().unwrap(), 7);
        assert!(matches!(f.u8(), Err(e) if e.kind() == io::ErrorKind::UnexpectedEof));

        let too_long = Message::reply().u64(MAX_KEY_LEN + 1).into_bytes();
        assert!(matches!(
            Fields::new(&too_long[..]).key(),
            Err(WireError::Malformed(m)) if m.contains("limit")
        ));
        let too_many = Message::reply().u64(MAX_KEY_COUNT + 1).into_bytes();
        assert!(matches!(
            Fields::new(&too_many[..]).keys(),
            Err(WireError::Malformed(_))
        ));
        let short = Message::reply().u64(10).u8(1).into_bytes();
        assert!(matches!(
            Fields::new(&short[..]).value(),
            Err(WireError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof
        ));
    }
}
