//! The errors the stores return, in one place so their messages agree.

use std::io;
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};

/// `Timeout` for `keys` that `store` did not see set within `timeout`.
pub(crate) fn wait_timeout(store: &str, keys: &[&str], timeout: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "{store}: timed out after {} waiting for key(s) {}",
            show_duration(timeout),
            show_keys(keys)
        ),
    )
}

/// `InvalidArgument` when `add` finds a value that is not a decimal integer.
pub(crate) fn not_an_integer(store: &str, key: &str, value: &[u8]) -> Error {
    let shown: String = String::from_utf8_lossy(value).chars().take(40).collect();
    Error::new(
        ErrorKind::InvalidArgument,
        format!("{store}: add on key {key:?}: its value {shown:?} is not a decimal integer"),
    )
}

/// `InvalidArgument` when `add` would leave the `i64` range.
pub(crate) fn add_overflow(store: &str, key: &str, old: i64, delta: i64) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("{store}: add on key {key:?}: {old} + {delta} overflows a 64-bit integer"),
    )
}

/// `NotReady` for a non-blocking `queue_pop` on an empty queue (torch's
/// `DistQueueEmptyError`).
pub(crate) fn queue_empty(store: &str, key: &str) -> Error {
    Error::new(
        ErrorKind::NotReady,
        format!("{store}: queue {key:?} is empty"),
    )
}

/// `Unsupported` for the queue calls of a store that has no queues.
pub(crate) fn no_queues(call: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("{call}: this store has no queues (TcpStore, HashStore and PrefixStore over them have; torch's FileStore has none either)"),
    )
}

/// `InvalidArgument` for a barrier of no members.
pub(crate) fn check_world_size(world_size: usize) -> Result<()> {
    if world_size == 0 {
        return Err(Error::invalid_argument(
            "barrier: world_size must be at least 1",
        ));
    }
    Ok(())
}

/// Checks that `multi_set` got as many values as keys.
pub(crate) fn check_multi_set(keys: &[&str], values: &[&[u8]]) -> Result<()> {
    if keys.len() == values.len() {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "multi_set: {} keys but {} values",
            keys.len(),
            values.len()
        )))
    }
}

/// An I/O error of `what` (for example "reading the reply to GET of key
/// \"a\" from 127.0.0.1:29500"): `Timeout` for the two timeout kinds, else
/// `VendorError` with the OS error code.
pub(crate) fn io(what: impl std::fmt::Display, err: &io::Error) -> Error {
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            Error::new(ErrorKind::Timeout, format!("{what}: timed out ({err})"))
        }
        _ => match err.raw_os_error() {
            Some(code) => Error::vendor(
                ErrorKind::VendorError,
                i64::from(code),
                format!("{what}: {err}"),
            ),
            None => Error::new(ErrorKind::VendorError, format!("{what}: {err}")),
        },
    }
}

/// Keys as a short list for a message: `"a", "b"` (at most 8, then a count).
pub(crate) fn show_keys(keys: &[&str]) -> String {
    let mut shown: Vec<String> = keys.iter().take(8).map(|k| format!("{k:?}")).collect();
    if keys.len() > 8 {
        shown.push(format!("and {} more", keys.len() - 8));
    }
    shown.join(", ")
}

/// A duration for a message: `300 s`, `250 ms`, `forever`.
pub(crate) fn show_duration(d: Duration) -> String {
    if d == Duration::MAX {
        "forever".to_owned()
    } else if d.as_millis() >= 10_000 && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_store_keys_and_time() {
        let e = wait_timeout("HashStore", &["a", "b"], Duration::from_millis(250));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert_eq!(
            e.message(),
            "HashStore: timed out after 250 ms waiting for key(s) \"a\", \"b\""
        );
        let many: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(show_keys(&many).ends_with("and 2 more"));
        assert_eq!(show_duration(Duration::from_secs(300)), "300 s");
        assert_eq!(show_duration(Duration::MAX), "forever");
        let e = not_an_integer("FileStore", "k", b"abc");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("\"k\"") && e.message().contains("\"abc\""));
    }

    #[test]
    fn io_errors_map_timeouts_and_keep_the_os_code() {
        let e = io("reading", &io::Error::from(io::ErrorKind::WouldBlock));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        let e = io("connecting", &io::Error::from_raw_os_error(111));
        assert_eq!(e.kind(), ErrorKind::VendorError);
        assert_eq!(e.vendor_code(), Some(111));
        assert!(e.message().starts_with("connecting: "));
    }
}
