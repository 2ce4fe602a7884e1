//! A client's request as the server reads it off the socket.

use std::io::Read;

use super::wire::{query, Fields, WireError};

/// One decoded request. Keys are bytes: the protocol allows any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Request {
    Validate(u32),
    Ping(u32),
    Set(Vec<u8>, Vec<u8>),
    CompareSet {
        key: Vec<u8>,
        expected: Vec<u8>,
        desired: Vec<u8>,
    },
    Get(Vec<u8>),
    Add(Vec<u8>, i64),
    Check(Vec<Vec<u8>>),
    Wait(Vec<Vec<u8>>),
    NumKeys,
    Delete(Vec<u8>),
    Append(Vec<u8>, Vec<u8>),
    MultiGet(Vec<Vec<u8>>),
    MultiSet(Vec<(Vec<u8>, Vec<u8>)>),
    CancelWait,
    QueuePush(Vec<u8>, Vec<u8>),
    QueuePop(Vec<u8>),
    QueueLen(Vec<u8>),
    ListKeys,
    Barrier(Vec<u8>, i64),
}

impl Request {
    /// Reads the fields of a request whose query byte `q` was just read.
    pub(super) fn read<R: Read>(q: u8, f: &mut Fields<R>) -> Result<Request, WireError> {
        Ok(match q {
            query::VALIDATE => Request::Validate(f.u32()?),
            query::PING => Request::Ping(f.u32()?),
            query::SET => Request::Set(f.key()?, f.value()?),
            query::COMPARE_SET => Request::CompareSet {
                key: f.key()?,
                expected: f.value()?,
                desired: f.value()?,
            },
            query::GET => Request::Get(f.key()?),
            query::ADD => Request::Add(f.key()?, f.i64()?),
            query::CHECK => Request::Check(f.keys()?),
            query::WAIT => Request::Wait(f.keys()?),
            query::GETNUMKEYS => Request::NumKeys,
            query::DELETE_KEY => Request::Delete(f.key()?),
            query::APPEND => Request::Append(f.key()?, f.value()?),
            query::MULTI_GET => Request::MultiGet(f.keys()?),
            query::MULTI_SET => {
                let n = f.count()?;
                let pairs = (0..n).map(|_| Ok((f.key()?, f.value()?)));
                Request::MultiSet(pairs.collect::<Result<_, WireError>>()?)
            }
            query::CANCEL_WAIT => Request::CancelWait,
            query::QUEUE_PUSH => Request::QueuePush(f.key()?, f.value()?),
            query::QUEUE_POP => Request::QueuePop(f.key()?),
            query::QUEUE_LEN => Request::QueueLen(f.key()?),
            query::LIST_KEYS => Request::ListKeys,
            query::BARRIER => Request::Barrier(f.key()?, f.i64()?),
            other => return Err(WireError::Malformed(format!("unknown query type {other}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::Message;
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Request, WireError> {
        let mut f = Fields::new(bytes);
        let q = f.u8()?;
        Request::read(q, &mut f)
    }

    #[test]
    fn requests_decode() {
        let m = Message::query(query::COMPARE_SET)
            .bytes(b"/k")
            .bytes(b"")
            .bytes(b"v")
            .into_bytes();
        let r = parse(&m).unwrap();
        assert_eq!(
            r,
            Request::CompareSet {
                key: b"/k".to_vec(),
                expected: vec![],
                desired: b"v".to_vec()
            }
        );
        let m = Message::query(query::MULTI_SET)
            .i64(1)
            .bytes(b"a")
            .bytes(b"1")
            .into_bytes();
        assert_eq!(
            parse(&m).unwrap(),
            Request::MultiSet(vec![(b"a".to_vec(), b"1".to_vec())])
        );
        assert_eq!(parse(&[query::LIST_KEYS]).unwrap(), Request::ListKeys);
    }

    #[test]
    fn unknown_and_truncated_requests_are_errors() {
        assert!(matches!(parse(&[99]), Err(WireError::Malformed(m)) if m.contains("99")));
        let m = Message::query(query::SET).bytes(b"key").into_bytes();
        assert!(matches!(parse(&m), Err(WireError::Io(_))));
    }
}
