//! Byte sizes as people write them in a vendor's environment variables
//! (`512M`, `8GiB`: the format of `DIPU_HOST_MEMORY`) and as error
//! messages print them.

/// What [`parse_size`] accepts, for error messages.
pub const ACCEPTED: &str = "a whole number of bytes, optionally followed by a unit: \
     K, M, G, T or KiB, MiB, GiB, TiB (binary multiples, any case), e.g. 4294967296, 512M, 8G, 16GiB";

const UNITS: [(&str, u32); 5] = [("", 0), ("k", 10), ("m", 20), ("g", 30), ("t", 40)];

/// Parses a byte size such as `4096`, `512M`, `8G` or `16GiB`.
///
/// Units are binary multiples (`1K` is 1024 bytes) and case-insensitive;
/// `B` alone means bytes, and blanks between the number and the unit are
/// allowed. The error says what is wrong with `text`, without naming the
/// setting it came from.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(if text.is_empty() {
            "the value is empty".to_owned()
        } else {
            format!("`{text}` does not start with a whole number")
        });
    }
    let unit_lower = unit.trim_start().to_ascii_lowercase();
    let prefix = unit_lower
        .strip_suffix("ib")
        .filter(|p| !p.is_empty())
        .or_else(|| unit_lower.strip_suffix('b').filter(|p| p.is_empty()))
        .unwrap_or(&unit_lower);
    let shift = UNITS
        .iter()
        .find(|(name, _)| *name == prefix)
        .map(|(_, shift)| *shift)
        .ok_or_else(|| format!("`{}` is not a known unit", unit.trim_start()))?;
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{digits} is too large"))?;
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{text}` is more than {} bytes", u64::MAX))
}

/// A byte count for people: `512 B`, `1.50 KiB`, `4.00 GiB`.
pub fn format_size(bytes: u64) -> String {
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < NAMES.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", NAMES[unit])
}

/// A byte count compactly when it is a whole number of a unit (`4 GiB`),
/// else like [`format_size`].
pub fn format_size_short(bytes: u64) -> String {
    for (name, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{} {name}", bytes >> shift);
        }
    }
    format_size(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes_and_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("12B"), Ok(12));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_size("8 GiB"), Ok(8 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("3KIB"), Ok(3 << 10));
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        for bad in [
            "", "  ", "G", "-1", "1.5G", "8X", "8GB", "8 G B", "8iB", "abc", "0x10",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_size("8X")
            .unwrap_err()
            .contains("`X` is not a known unit"));
        assert!(parse_size("").unwrap_err().contains("empty"));
        assert!(parse_size("16777216T").unwrap_err().contains("more than"));
        assert_eq!(parse_size("16777215T"), Ok(16_777_215u64 << 40));
        assert!(parse_size("18446744073709551616").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(4 << 30), "4.00 GiB");
        assert_eq!(format_size_short(4 << 30), "4 GiB");
        assert_eq!(format_size_short(512 << 20), "512 MiB");
        assert_eq!(format_size_short(1000), "1000 B");
        assert_eq!(format_size_short(1536), "1.50 KiB");
    }
}
