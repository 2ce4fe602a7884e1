//! The value semantics every store shares: counters as decimal strings, and
//! what `compare_set` stores and answers.

/// Why `add` could not update a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddError {
    /// The old value is not a decimal integer.
    NotAnInteger,
    /// The sum leaves the `i64` range; carries the old value.
    Overflow(i64),
}

/// The integer at the start of `value`, read the way torch's server reads
/// it (`std::stoll`): leading whitespace, an optional sign, then at least one
/// digit; anything after the digits is ignored.
pub(crate) fn parse_counter(value: &[u8]) -> Option<i64> {
    let mut rest = value;
    while let [b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c', tail @ ..] = rest {
        rest = tail;
    }
    let negative = matches!(rest.first(), Some(b'-'));
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in &rest[..digits] {
        let d = i64::from(d - b'0');
        n = n.checked_mul(10)?;
        n = if negative {
            n.checked_sub(d)?
        } else {
            n.checked_add(d)?
        };
    }
    Some(n)
}

/// The new counter after adding `delta` to `old` (a missing value counts as
/// 0).
pub(crate) fn add(old: Option<&[u8]>, delta: i64) -> Result<i64, AddError> {
    let Some(old) = old else {
        return Ok(delta);
    };
    let old = parse_counter(old).ok_or(AddError::NotAnInteger)?;
    old.checked_add(delta).ok_or(AddError::Overflow(old))
}

/// A counter as it is stored: its decimal digits.
pub(crate) fn counter_bytes(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// What `compare_set` does given the `current` value (`None`: missing):
/// whether to store `desired`, and the value to answer.
pub(crate) fn compare_set<'a>(
    current: Option<&'a [u8]>,
    expected: &'a [u8],
    desired: &'a [u8],
) -> (bool, &'a [u8]) {
    match current {
        None if expected.is_empty() => (true, desired),
        None => (false, expected),
        Some(cur) if cur == expected => (true, desired),
        Some(cur) => (false, cur),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_like_stoll() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"  -7xyz"), Some(-7));
        assert_eq!(parse_counter(b"+3"), Some(3));
        assert_eq!(parse_counter(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_counter(b"9223372036854775808"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"-"), None);
        assert_eq!(parse_counter(b"abc"), None);
    }

    #[test]
    fn add_starts_from_zero_and_reports_bad_values() {
        assert_eq!(add(None, 5), Ok(5));
        assert_eq!(add(Some(b"10"), -3), Ok(7));
        assert_eq!(add(Some(b"x"), 1), Err(AddError::NotAnInteger));
        assert_eq!(
            add(Some(b"9223372036854775807"), 1),
            Err(AddError::Overflow(i64::MAX))
        );
        assert_eq!(counter_bytes(-12), b"-12".to_vec());
    }

    #[test]
    fn compare_set_follows_torch() {
        assert_eq!(compare_set(None, b"", b"d"), (true, &b"d"[..]));
        assert_eq!(compare_set(None, b"e", b"d"), (false, &b"e"[..]));
        assert_eq!(compare_set(Some(b"e"), b"e", b"d"), (true, &b"d"[..]));
        assert_eq!(compare_set(Some(b"c"), b"e", b"d"), (false, &b"c"[..]));
    }
}
