//! [`Options`] of a process group.

use std::time::Duration;

use dipu_deviceapi::{Error, Result};

/// Environment variable: the timeout of collectives, in seconds (default 600,
/// c10d's default for device process groups).
pub const ENV_TIMEOUT: &str = "DIPU_COMM_TIMEOUT";
/// Environment variable: `1` makes [`crate::Work::wait`] block the host
/// (like `TORCH_NCCL_BLOCKING_WAIT`).
pub const ENV_BLOCKING_WAIT: &str = "DIPU_COMM_BLOCKING_WAIT";

/// How a process group behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// How long an operation may run before the watchdog fails it and
    /// aborts the group's communicators.
    pub timeout: Duration,
    /// Whether [`crate::Work::wait`] blocks the host until the operation is
    /// done (raising its error there) instead of only ordering the caller's
    /// stream after it.
    pub blocking_wait: bool,
    /// Whether the communication streams get the vendor's highest priority.
    pub high_priority_streams: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(600),
            blocking_wait: false,
            high_priority_streams: false,
        }
    }
}

impl Options {
    /// Defaults overridden by `DIPU_COMM_TIMEOUT` and
    /// `DIPU_COMM_BLOCKING_WAIT`; a bad value is an error naming the variable.
    pub fn from_env() -> Result<Options> {
        let mut options = Options::default();
        if let Ok(text) = std::env::var(ENV_TIMEOUT) {
            let secs: f64 = text
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0)
                .ok_or_else(|| {
                    Error::new(
                        dipu_deviceapi::ErrorKind::InvalidConfig,
                        format!("{ENV_TIMEOUT}={text:?}: expected a positive number of seconds"),
                    )
                })?;
            options.timeout = Duration::from_secs_f64(secs);
        }
        if let Ok(text) = std::env::var(ENV_BLOCKING_WAIT) {
            options.blocking_wait = match text.trim() {
                "1" | "true" => true,
                "0" | "false" | "" => false,
                _ => {
                    return Err(Error::new(
                        dipu_deviceapi::ErrorKind::InvalidConfig,
                        format!("{ENV_BLOCKING_WAIT}={text:?}: expected 0 or 1"),
                    ))
                }
            };
        }
        Ok(options)
    }

    /// These options with `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These options with `blocking_wait`.
    pub fn with_blocking_wait(mut self, blocking_wait: bool) -> Self {
        self.blocking_wait = blocking_wait;
        self
    }
}
