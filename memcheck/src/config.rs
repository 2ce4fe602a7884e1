//! The checker's environment variables.

use std::path::PathBuf;

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::MemCheck;

/// `DIPU_MEM_CHECK`: `1`/`true` switches the checker on.
pub const ENV_MEM_CHECK: &str = "DIPU_MEM_CHECK";
/// `DIPU_MEM_CHECK_ENABLE_BACKTRACE`: `1`/`true` captures backtraces.
pub const ENV_BACKTRACE: &str = "DIPU_MEM_CHECK_ENABLE_BACKTRACE";
/// `DIPU_MEM_CHECK_MAX_BLOCK`: live blocks beyond which a warning is logged.
pub const ENV_MAX_BLOCK: &str = "DIPU_MEM_CHECK_MAX_BLOCK";
/// `DIPU_MEM_CHECK_LOG_INTERVAL`: allocations between two such warnings.
pub const ENV_LOG_INTERVAL: &str = "DIPU_MEM_CHECK_LOG_INTERVAL";
/// `DIPU_MEM_CHECK_LOG_FILE`: where reports go (default stderr).
pub const ENV_LOG_FILE: &str = "DIPU_MEM_CHECK_LOG_FILE";
/// `DIPU_MEM_CHECK_GUARD_BYTES`: guard bytes before and after every device
/// allocation (default 0: no guards).
pub const ENV_GUARD_BYTES: &str = "DIPU_MEM_CHECK_GUARD_BYTES";
/// `DIPU_MEM_CHECK_ABORT`: `1`/`true` aborts the process at the first
/// guard violation, after writing it.
pub const ENV_ABORT: &str = "DIPU_MEM_CHECK_ABORT";
/// `DIPU_MEM_CHECK_POISON`: `1`/`true` fills freed device blocks with the
/// poison pattern and holds them in a quarantine before reuse.
pub const ENV_POISON: &str = "DIPU_MEM_CHECK_POISON";
/// `DIPU_MEM_CHECK_QUARANTINE_BYTES`: the freed bytes each device's
/// quarantine holds (default 64 MiB).
pub const ENV_QUARANTINE_BYTES: &str = "DIPU_MEM_CHECK_QUARANTINE_BYTES";

/// The checker's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `DIPU_MEM_CHECK` (default false).
    pub enabled: bool,
    /// `DIPU_MEM_CHECK_ENABLE_BACKTRACE` (default false).
    pub backtraces: bool,
    /// `DIPU_MEM_CHECK_MAX_BLOCK` (default 10000).
    pub max_block: usize,
    /// `DIPU_MEM_CHECK_LOG_INTERVAL` (default 1000, at least 1).
    pub log_interval: usize,
    /// `DIPU_MEM_CHECK_LOG_FILE` (default: stderr).
    pub log_file: Option<PathBuf>,
    /// `DIPU_MEM_CHECK_GUARD_BYTES` (unset: keep the current setting,
    /// initially 0, off; see [`crate::set_options`]).
    pub guard_bytes: Option<usize>,
    /// `DIPU_MEM_CHECK_ABORT` (unset: keep the current setting, initially
    /// false).
    pub abort_on_violation: Option<bool>,
    /// `DIPU_MEM_CHECK_POISON` (unset: keep the current setting, initially
    /// false).
    pub poison: Option<bool>,
    /// `DIPU_MEM_CHECK_QUARANTINE_BYTES` (unset: keep the current setting,
    /// initially [`crate::DEFAULT_QUARANTINE_BYTES`]).
    pub quarantine_bytes: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: false,
            backtraces: false,
            max_block: 10_000,
            log_interval: 1000,
            log_file: None,
            guard_bytes: None,
            abort_on_violation: None,
            poison: None,
            quarantine_bytes: None,
        }
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

fn bad(name: &str, value: &str, accepted: &str) -> Error {
    Error::new(
        ErrorKind::InvalidConfig,
        format!("{name}={value:?} is not valid: expected {accepted}"),
    )
}

/// Parses a boolean value (`0`, `1`, `true`, `false`, any case).
pub(crate) fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(bad(name, value, "0, 1, true or false")),
    }
}

fn parse_count(name: &str, value: &str, min: usize) -> Result<usize> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(bad(name, value, &format!("an integer >= {min}"))),
    }
}

/// Parses `DIPU_MEM_CHECK_GUARD_BYTES`: 0 to [`crate::MAX_GUARD_BYTES`].
fn parse_guard_bytes(value: &str) -> Result<usize> {
    let n = parse_count(ENV_GUARD_BYTES, value, 0)?;
    if n > crate::guard::MAX_GUARD_BYTES {
        let accepted = format!("an integer from 0 to {}", crate::guard::MAX_GUARD_BYTES);
        return Err(bad(ENV_GUARD_BYTES, value, &accepted));
    }
    Ok(n)
}

impl Config {
    /// The settings from the environment (unset: the defaults).
    /// `InvalidConfig`, naming the variable, for a bad value.
    pub fn from_env() -> Result<Config> {
        let mut c = Config::default();
        if let Some(v) = var(ENV_MEM_CHECK) {
            c.enabled = parse_bool(ENV_MEM_CHECK, &v)?;
        }
        if let Some(v) = var(ENV_BACKTRACE) {
            c.backtraces = parse_bool(ENV_BACKTRACE, &v)?;
        }
        if let Some(v) = var(ENV_MAX_BLOCK) {
            c.max_block = parse_count(ENV_MAX_BLOCK, &v, 0)?;
        }
        if let Some(v) = var(ENV_LOG_INTERVAL) {
            c.log_interval = parse_count(ENV_LOG_INTERVAL, &v, 1)?;
        }
        if let Some(v) = var(ENV_GUARD_BYTES) {
            c.guard_bytes = Some(parse_guard_bytes(&v)?);
        }
        if let Some(v) = var(ENV_ABORT) {
            c.abort_on_violation = Some(parse_bool(ENV_ABORT, &v)?);
        }
        if let Some(v) = var(ENV_POISON) {
            c.poison = Some(parse_bool(ENV_POISON, &v)?);
        }
        if let Some(v) = var(ENV_QUARANTINE_BYTES) {
            c.quarantine_bytes = Some(parse_count(ENV_QUARANTINE_BYTES, &v, 0)?);
        }
        c.log_file = var(ENV_LOG_FILE)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Ok(c)
    }

    /// Makes these settings current; switches the checker on if `enabled`
    /// (never off).
    pub fn apply(&self) {
        crate::state::set_limits(self.max_block, self.log_interval, self.log_file.clone());
        crate::guard::set_options(
            self.guard_bytes.unwrap_or_else(crate::guard_bytes),
            self.abort_on_violation
                .unwrap_or_else(crate::abort_on_violation),
        );
        crate::poison::set_poison(
            self.poison.unwrap_or_else(crate::poison),
            self.quarantine_bytes
                .unwrap_or_else(crate::quarantine_bytes),
        );
        if self.enabled {
            MemCheck::enable(self.backtraces);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_and_counts_parse() {
        assert!(parse_bool("X", "1").unwrap());
        assert!(parse_bool("X", "TRUE").unwrap());
        assert!(!parse_bool("X", "0").unwrap());
        assert!(!parse_bool("X", "false").unwrap());
        let e = parse_bool("DIPU_MEM_CHECK", "yes").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.to_string().contains("DIPU_MEM_CHECK"), "{e}");
        assert_eq!(parse_count("X", "5", 1).unwrap(), 5);
        let e = parse_count("DIPU_MEM_CHECK_LOG_INTERVAL", "0", 1).unwrap_err();
        assert!(e.to_string().contains("DIPU_MEM_CHECK_LOG_INTERVAL"), "{e}");
        assert!(parse_count("X", "-3", 0).is_err());
    }

    #[test]
    fn guard_bytes_are_bounded() {
        assert_eq!(parse_guard_bytes("0").unwrap(), 0);
        assert_eq!(parse_guard_bytes(" 64 ").unwrap(), 64);
        assert_eq!(parse_guard_bytes("1048576").unwrap(), 1 << 20);
        for bad in ["1048577", "-1", "lots", ""] {
            let e = parse_guard_bytes(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(e.to_string().contains(ENV_GUARD_BYTES), "{e}");
        }
    }
}
