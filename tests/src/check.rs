//! What checks are made of: their context, their failure type and the
//! assertion helpers they share.

use std::cell::RefCell;
use std::fmt::{self, Debug, Display};
use std::time::Duration;

use dipu_deviceapi::{DeviceApi, Error, ErrorKind, HostCallback, Result};

/// What a check sees: the vendor and its device count.
pub(crate) struct Ctx<'a> {
    /// The vendor under test.
    pub(crate) api: &'a dyn DeviceApi,
    /// `device_count()` (0 only for the `device::count` check on a machine
    /// without devices).
    pub(crate) device_count: i32,
    notes: RefCell<Vec<String>>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(api: &'a dyn DeviceApi, device_count: i32) -> Self {
        Ctx {
            api,
            device_count,
            notes: RefCell::new(Vec::new()),
        }
    }

    /// Adds a remark to the check's result (shown under the report's table).
    pub(crate) fn note(&self, note: impl Into<String>) {
        self.notes.borrow_mut().push(note.into());
    }

    pub(crate) fn take_notes(&self) -> Vec<String> {
        self.notes.take()
    }
}

/// Why a check failed.
#[derive(Debug)]
pub(crate) struct Fail(pub(crate) String);

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail(format!("unexpected error: {e}"))
    }
}

/// What a check function returns.
pub(crate) type Verdict = std::result::Result<(), Fail>;

/// Names the call an unexpected vendor error came from.
pub(crate) trait During<T> {
    /// Turns an error into a failure saying it happened during `what`.
    fn during(self, what: impl Display) -> std::result::Result<T, Fail>;
}

impl<T> During<T> for Result<T> {
    fn during(self, what: impl Display) -> std::result::Result<T, Fail> {
        self.map_err(|e| {
            let empty = if e.message().trim().is_empty() {
                " (and its message is empty)"
            } else {
                ""
            };
            Fail(format!("{what}: unexpected error: {e}{empty}"))
        })
    }
}

/// Fails the check with a formatted message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err($crate::check::Fail(format!($($fmt)+)));
        }
    };
}

/// Fails the check unless `left == right`, showing both.
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($fmt:tt)+) => {{
        let (left, right) = (&$left, &$right);
        if left != right {
            return Err($crate::check::Fail(format!(
                "{}: expected {:?}, got {:?}",
                format!($($fmt)+),
                right,
                left
            )));
        }
    }};
}

pub(crate) use {ensure, ensure_eq};

/// Kinds listed for a message: `InvalidDevice or InvalidArgument`.
struct Kinds<'a>(&'a [ErrorKind]);

impl Display for Kinds<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            write!(f, "{k:?}")?;
        }
        Ok(())
    }
}

/// Expects `result` to be an error of one of `kinds` with a non-empty
/// message, and returns it.
pub(crate) fn expect_err<T: Debug>(
    result: Result<T>,
    kinds: &[ErrorKind],
    what: impl Display,
) -> std::result::Result<Error, Fail> {
    match result {
        Ok(v) => Err(Fail(format!(
            "{what}: expected an error ({}), got Ok({v:?})",
            Kinds(kinds)
        ))),
        Err(e) if !kinds.contains(&e.kind()) => Err(Fail(format!(
            "{what}: expected {}, got {:?} ({e})",
            Kinds(kinds),
            e.kind()
        ))),
        Err(e) if e.message().trim().is_empty() => Err(Fail(format!(
            "{what}: the {:?} error has an empty message",
            e.kind()
        ))),
        Err(e) => Ok(e),
    }
}

/// Expects `result` to be `Unsupported` with a message.
pub(crate) fn expect_unsupported<T: Debug>(result: Result<T>, what: impl Display) -> Verdict {
    expect_err(result, &[ErrorKind::Unsupported], what).map(drop)
}

/// Compares bytes read back with what was expected, naming the first
/// difference.
pub(crate) fn compare(got: &[u8], want: &[u8], what: impl Display) -> Verdict {
    ensure!(
        got.len() == want.len(),
        "{what}: read {} bytes, expected {}",
        got.len(),
        want.len()
    );
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let wrong = got.iter().zip(want).filter(|(g, w)| g != w).count();
        return Err(Fail(format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x} ({wrong} of {} bytes differ)",
            got[i],
            want[i],
            got.len()
        )));
    }
    Ok(())
}

/// A small deterministic pseudo-random generator (xorshift64*).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `len` pseudo-random bytes determined by `seed`.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A host callback that sleeps, keeping its stream busy for `ms`.
pub(crate) fn sleep_callback(ms: u64) -> HostCallback {
    Box::new(move || std::thread::sleep(Duration::from_millis(ms)))
}

/// One MiB.
pub(crate) const MIB: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expect_err_checks_kind_and_message() {
        let e = expect_err::<()>(
            Err(Error::new(ErrorKind::NotReady, "x")),
            &[ErrorKind::NotReady],
            "q",
        )
        .unwrap();
        assert_eq!(e.kind(), ErrorKind::NotReady);
        let f = expect_err(Ok(3), &[ErrorKind::NotReady], "q").unwrap_err();
        assert!(f.0.contains("Ok(3)"), "{}", f.0);
        let f = expect_err::<()>(
            Err(Error::new(ErrorKind::OutOfMemory, "x")),
            &[ErrorKind::NotReady, ErrorKind::InvalidArgument],
            "q",
        )
        .unwrap_err();
        assert!(f.0.contains("NotReady or InvalidArgument"), "{}", f.0);
    }

    #[test]
    fn compare_names_the_first_difference() {
        assert!(compare(&[1, 2, 3], &[1, 2, 3], "x").is_ok());
        let f = compare(&[1, 9, 3, 8], &[1, 2, 3, 4], "x").unwrap_err();
        assert!(
            f.0.contains("byte 1 is 0x09, expected 0x02 (2 of 4"),
            "{}",
            f.0
        );
        assert_eq!(pattern(5, 13), pattern(5, 13));
        assert_ne!(pattern(5, 13), pattern(6, 13));
        assert_eq!(pattern(1, 3).len(), 3);
    }
}
