//! Where one request ends in the bytes a client has sent so far: the event
//! loop decodes a request only once all of it has arrived.
//!
//! Scanning checks the limits of [`super::wire`] as soon as a length or a
//! count arrives, so a client announcing a 1 TiB key is refused before the
//! server buffers anything, and it reports how many bytes the request needs
//! at least, so a large value is not scanned again for every chunk.

use super::wire::{query, MAX_KEY_COUNT, MAX_KEY_LEN, MAX_VALUE_LEN};

/// What the bytes at the start of a client's input hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// A whole request of this many bytes.
    Complete(usize),
    /// Part of a request, which needs at least this many bytes in all.
    Incomplete(usize),
}

/// Scans the request at the start of `buf`. `validated`: the client has
/// passed `VALIDATE`. An error (the reason, for the log) means the client is
/// to be disconnected.
pub(super) fn scan(buf: &[u8], validated: bool) -> Result<Scan, String> {
    let Some(&q) = buf.first() else {
        return Ok(Scan::Incomplete(1));
    };
    if !validated && q != query::VALIDATE {
        return Err(format!(
            "{} ({q}) as its first message instead of VALIDATE",
            query::name(q)
        ));
    }
    let mut c = Cursor { buf, at: 1 };
    match c.request(q) {
        Ok(()) => Ok(Scan::Complete(c.at)),
        Err(Stop::Need(n)) => Ok(Scan::Incomplete(n)),
        Err(Stop::Bad(m)) => Err(format!("{} request: {m}", query::name(q))),
    }
}

/// Why a scan stopped before the end of the request.
enum Stop {
    /// The bytes end before the request: it needs at least this many.
    Need(usize),
    /// The request breaks the protocol.
    Bad(String),
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// Steps over the fields of a request of query type `q`.
    fn request(&mut self, q: u8) -> Result<(), Stop> {
        match q {
            query::VALIDATE | query::PING => self.skip(4),
            query::SET | query::APPEND | query::QUEUE_PUSH => {
                self.key()?;
                self.value()
            }
            query::COMPARE_SET => {
                self.key()?;
                self.value()?;
                self.value()
            }
            query::GET | query::DELETE_KEY | query::QUEUE_POP | query::QUEUE_LEN => self.key(),
            query::ADD | query::BARRIER => {
                self.key()?;
                self.skip(8)
            }
            query::CHECK | query::WAIT | query::MULTI_GET => {
                for _ in 0..self.count()? {
                    self.key()?;
                }
                Ok(())
            }
            query::MULTI_SET => {
                for _ in 0..self.count()? {
                    self.key()?;
                    self.value()?;
                }
                Ok(())
            }
            query::GETNUMKEYS | query::CANCEL_WAIT | query::LIST_KEYS => Ok(()),
            other => Err(Stop::Bad(format!("unknown query type {other}"))),
        }
    }

    fn skip(&mut self, n: usize) -> Result<(), Stop> {
        let end = self.at + n;
        if end > self.buf.len() {
            return Err(Stop::Need(end));
        }
        self.at = end;
        Ok(())
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        let start = self.at;
        self.skip(8)?;
        let mut b = [0; 8];
        b.copy_from_slice(&self.buf[start..self.at]);
        Ok(u64::from_le_bytes(b))
    }

    /// A length-prefixed field of at most `max` bytes.
    fn field(&mut self, max: u64, what: &str) -> Result<(), Stop> {
        let len = self.u64()?;
        if len > max {
            return Err(Stop::Bad(format!(
                "{what} of {len} bytes is longer than the limit of {max}"
            )));
        }
        // At most MAX_VALUE_LEN: fits a usize.
        self.skip(len as usize)
    }

    fn key(&mut self) -> Result<(), Stop> {
        self.field(MAX_KEY_LEN, "a key")
    }

    fn value(&mut self) -> Result<(), Stop> {
        self.field(MAX_VALUE_LEN, "a value")
    }

    fn count(&mut self) -> Result<u64, Stop> {
        let n = self.u64()?;
        if n > MAX_KEY_COUNT {
            return Err(Stop::Bad(format!(
                "{n} keys in one request is more than the limit of {MAX_KEY_COUNT}"
            )));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::request::Request;
    use super::super::wire::{Fields, Message, TORCH_VALIDATION_MAGIC};
    use super::*;

    /// One valid message of every query type.
    fn every_request() -> Vec<Vec<u8>> {
        let q = Message::query;
        vec![
            q(query::VALIDATE).u32(TORCH_VALIDATION_MAGIC),
            q(query::SET).bytes(b"/k").bytes(b"value"),
            q(query::COMPARE_SET).bytes(b"/k").bytes(b"").bytes(b"v"),
            q(query::GET).bytes(b"/k"),
            q(query::ADD).bytes(b"/n").i64(-3),
            q(query::CHECK).u64(2).bytes(b"/a").bytes(b"/bc"),
            q(query::WAIT).u64(1).bytes(b"/a"),
            q(query::GETNUMKEYS),
            q(query::DELETE_KEY).bytes(b"/a"),
            q(query::APPEND).bytes(b"/a").bytes(b"more"),
            q(query::MULTI_GET).u64(0),
            q(query::MULTI_SET)
                .u64(2)
                .bytes(b"/a")
                .bytes(b"1")
                .bytes(b"/b")
                .bytes(b""),
            q(query::CANCEL_WAIT),
            q(query::PING).u32(7),
            q(query::QUEUE_PUSH).bytes(b"/q").bytes(b"item"),
            q(query::QUEUE_POP).bytes(b"/q"),
            q(query::QUEUE_LEN).bytes(b"/q"),
            q(query::LIST_KEYS),
            q(query::BARRIER).bytes(b"/b").i64(4),
        ]
        .into_iter()
        .map(Message::into_bytes)
        .collect()
    }

    #[test]
    fn every_request_is_complete_exactly_at_its_end() {
        for m in every_request() {
            let mut more = m.clone();
            more.extend_from_slice(&[query::PING, 1]);
            assert_eq!(scan(&more, true), Ok(Scan::Complete(m.len())), "{m:?}");
            // The scanner and the decoder agree on every request's extent.
            let mut f = Fields::new(&m[1..]);
            Request::read(m[0], &mut f).unwrap();
            assert!(f.get_mut().is_empty(), "{m:?}");
            for cut in 0..m.len() {
                match scan(&m[..cut], true) {
                    Ok(Scan::Incomplete(need)) => {
                        assert!(need > cut && need <= m.len(), "{m:?} cut at {cut}: {need}");
                    }
                    other => panic!("{m:?} cut at {cut}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn limits_and_unknown_queries_fail_before_the_bytes_arrive() {
        let key = Message::query(query::GET).u64(MAX_KEY_LEN + 1).into_bytes();
        assert!(scan(&key, true).unwrap_err().contains("limit"));
        let value = Message::query(query::SET)
            .bytes(b"/k")
            .u64(MAX_VALUE_LEN + 1)
            .into_bytes();
        assert!(scan(&value, true).unwrap_err().contains("a value of"));
        let keys = Message::query(query::WAIT).u64(u64::MAX).into_bytes();
        assert!(scan(&keys, true)
            .unwrap_err()
            .contains("keys in one request"));
        assert!(scan(&[200], true)
            .unwrap_err()
            .contains("unknown query type 200"));
        // Before VALIDATE, anything else fails on its first byte.
        assert!(scan(&[query::GET], false)
            .unwrap_err()
            .contains("instead of VALIDATE"));
        assert_eq!(scan(&[], false), Ok(Scan::Incomplete(1)));
    }

    #[test]
    fn a_large_value_needs_its_whole_length() {
        let m = Message::query(query::SET)
            .bytes(b"/k")
            .u64(1 << 20)
            .into_bytes();
        assert_eq!(scan(&m, true), Ok(Scan::Incomplete(m.len() + (1 << 20))));
    }
}
