//! The on-disk format of a [`super::FileStore`]: an append-only log of
//! records, replayed into a map.
//!
//! A record is a type byte, a `u32` little-endian key length and the key,
//! then for `SET` and `APPEND` a `u32` little-endian value length and the
//! value. `DELETE` has no value. A record cut short at the end of the file
//! (a writer that died mid-write) is ignored by readers and cut off by the
//! next writer.
//!
//! The first record of a file is a `SET` of the key `epoch/` to 16 bytes
//! unique to that file, so that a reader notices a file removed and made
//! anew (which may get the old inode number).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The key of the first record.
const EPOCH_KEY: &str = "epoch/";
/// Length of the epoch record: type, key length, key, value length, 16
/// bytes.
pub(super) const EPOCH_LEN: usize = 1 + 4 + EPOCH_KEY.len() + 4 + 16;

const SET: u8 = 1;
const DELETE: u8 = 2;
const APPEND: u8 = 3;

/// One operation of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Record {
    /// `key` now has `value`.
    Set(String, Vec<u8>),
    /// `value` is appended to the value of `key` (missing: empty).
    Append(String, Vec<u8>),
    /// `key` is gone.
    Delete(String),
}

/// Why a log could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Corrupt {
    /// Byte offset of the bad record, from the start of the replayed bytes.
    pub(super) offset: usize,
    /// What is wrong with it.
    pub(super) what: String,
}

impl Record {
    /// Appends the encoded record to `out`; `None` if the key or value is
    /// longer than a `u32` can say.
    pub(super) fn encode(&self, out: &mut Vec<u8>) -> Option<()> {
        let (kind, key, value) = match self {
            Record::Set(k, v) => (SET, k, Some(v)),
            Record::Append(k, v) => (APPEND, k, Some(v)),
            Record::Delete(k) => (DELETE, k, None),
        };
        out.push(kind);
        out.extend_from_slice(&u32::try_from(key.len()).ok()?.to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        if let Some(value) = value {
            out.extend_from_slice(&u32::try_from(value.len()).ok()?.to_le_bytes());
            out.extend_from_slice(value);
        }
        Some(())
    }

    /// Applies the record to `map`.
    pub(super) fn apply(self, map: &mut HashMap<String, Vec<u8>>) {
        match self {
            Record::Set(k, v) => {
                map.insert(k, v);
            }
            Record::Append(k, v) => map.entry(k).or_default().extend_from_slice(&v),
            Record::Delete(k) => {
                map.remove(&k);
            }
        }
    }
}

/// A new file's first record: a `SET` of `epoch/` to the time, the process
/// id and a count of the epochs this process made.
pub(super) fn epoch() -> Record {
    static MADE: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut value = nanos.to_le_bytes().to_vec();
    value.extend_from_slice(&std::process::id().to_le_bytes());
    value.extend_from_slice(&MADE.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    Record::Set(EPOCH_KEY.to_owned(), value)
}

/// Replays the records in `bytes` into `map`; returns how many bytes were
/// whole records (a cut-short record at the end is left out).
pub(super) fn replay(bytes: &[u8], map: &mut HashMap<String, Vec<u8>>) -> Result<usize, Corrupt> {
    let mut at = 0;
    loop {
        match decode(&bytes[at..]) {
            Ok(Some((record, len))) => {
                record.apply(map);
                at += len;
            }
            Ok(None) => return Ok(at),
            Err(what) => return Err(Corrupt { offset: at, what }),
        }
    }
}

/// The first record of `bytes` and its length; `None` when `bytes` holds no
/// whole record.
fn decode(bytes: &[u8]) -> Result<Option<(Record, usize)>, String> {
    let Some((&kind, rest)) = bytes.split_first() else {
        return Ok(None);
    };
    if !matches!(kind, SET | DELETE | APPEND) {
        return Err(format!("unknown record type {kind}"));
    }
    let Some((key, rest)) = field(rest) else {
        return Ok(None);
    };
    let key = std::str::from_utf8(key).map_err(|_| "a key that is not UTF-8".to_owned())?;
    let mut len = 1 + 4 + key.len();
    let record = if kind == DELETE {
        Record::Delete(key.to_owned())
    } else {
        let Some((value, _)) = field(rest) else {
            return Ok(None);
        };
        len += 4 + value.len();
        if kind == SET {
            Record::Set(key.to_owned(), value.to_vec())
        } else {
            Record::Append(key.to_owned(), value.to_vec())
        }
    };
    Ok(Some((record, len)))
}

/// A `u32`-length-prefixed field at the start of `bytes` and the rest.
fn field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    Some((bytes.get(4..end)?, &bytes[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(records: &[Record]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            r.encode(&mut out).unwrap();
        }
        out
    }

    fn set(key: &str, value: &[u8]) -> Record {
        Record::Set(key.to_owned(), value.to_vec())
    }

    #[test]
    fn records_round_trip() {
        let bytes = encoded(&[
            set("/a", b"1"),
            Record::Append("/a".into(), b"23".to_vec()),
            set("/b", b""),
            Record::Delete("/b".into()),
            Record::Append("/c".into(), b"x".to_vec()),
        ]);
        let mut map = HashMap::new();
        assert_eq!(replay(&bytes, &mut map), Ok(bytes.len()));
        assert_eq!(map.len(), 2);
        assert_eq!(map["/a"], b"123");
        assert_eq!(map["/c"], b"x");
    }

    #[test]
    fn a_cut_short_record_is_left_out_at_every_cut() {
        let whole = encoded(&[set("/a", b"1")]);
        let bytes = encoded(&[set("/a", b"1"), set("/bb", b"value")]);
        for cut in whole.len()..bytes.len() {
            let mut map = HashMap::new();
            assert_eq!(
                replay(&bytes[..cut], &mut map),
                Ok(whole.len()),
                "cut {cut}"
            );
            assert_eq!(map.len(), 1);
        }
    }

    #[test]
    fn epochs_have_the_stated_length_and_differ() {
        let (a, b) = (encoded(&[epoch()]), encoded(&[epoch()]));
        assert_eq!(a.len(), EPOCH_LEN);
        assert_ne!(a, b);
    }

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        let mut bytes = encoded(&[set("/a", b"1")]);
        let at = bytes.len();
        bytes.extend_from_slice(&[9, 1, 2, 3]);
        let err = replay(&bytes, &mut HashMap::new()).unwrap_err();
        assert_eq!(err.offset, at);
        assert!(err.what.contains("unknown record type 9"));
        let bad_utf8 = [SET, 1, 0, 0, 0, 0xff, 0, 0, 0, 0];
        assert!(replay(&bad_utf8, &mut HashMap::new()).is_err());
        let huge = [SET, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(replay(&huge, &mut HashMap::new()), Ok(0));
    }
}
