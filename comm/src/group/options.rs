//! [`Options`] of a process group.

use std::time::Duration;

use dipu_deviceapi::{Error, Result};

/// Environment variable: the timeout of collectives, in seconds (default 600,
/// c10d's default for device process groups).
pub const ENV_TIMEOUT: &str = "DIPU_COMM_TIMEOUT";
/// Environment variable: `1` makes [`crate::Work::wait`] block the host
/// (like `TORCH_NCCL_BLOCKING_WAIT`).
pub const ENV_BLOCKING_WAIT: &str = "DIPU_COMM_BLOCKING_WAIT";
/// Environment variable: the host transport of the host-staged collectives
/// (a vendor without collectives): `auto` (default), `shm` or `tcp`.
pub const ENV_STAGED_TRANSPORT: &str = "DIPU_COMM_STAGED_TRANSPORT";
/// Environment variable: the IP address other machines reach this rank's
/// host-staged TCP transport at (default: found from the host name).
pub const ENV_STAGED_ADDR: &str = "DIPU_COMM_STAGED_ADDR";

/// Which host transport carries the collectives of a vendor without
/// collectives (see [`Options::staged_transport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StagedTransport {
    /// Shared memory when every rank is on this machine, TCP otherwise.
    #[default]
    Auto,
    /// Shared memory (every rank must be on one machine).
    Shm,
    /// TCP sockets between the ranks, on one machine or several.
    Tcp,
}

impl StagedTransport {
    /// The name `DIPU_COMM_STAGED_TRANSPORT` takes.
    pub fn name(self) -> &'static str {
        match self {
            StagedTransport::Auto => "auto",
            StagedTransport::Shm => "shm",
            StagedTransport::Tcp => "tcp",
        }
    }

    /// Reads a name (`auto`, `shm` or `tcp`).
    pub fn parse(text: &str) -> Option<StagedTransport> {
        [
            StagedTransport::Auto,
            StagedTransport::Shm,
            StagedTransport::Tcp,
        ]
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(text.trim()))
    }
}

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
    /// The host transport of the host-staged collectives, used only when
    /// the vendor has no collectives.
    pub staged_transport: StagedTransport,
    /// The IP address other machines reach this rank's host-staged TCP
    /// transport at; `None`: found from the host name (`127.0.0.1` when
    /// every rank is on this machine).
    pub staged_address: Option<std::net::IpAddr>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(600),
            blocking_wait: false,
            high_priority_streams: false,
            staged_transport: StagedTransport::Auto,
            staged_address: None,
        }
    }
}

impl Options {
    /// Defaults overridden by `DIPU_COMM_TIMEOUT`, `DIPU_COMM_BLOCKING_WAIT`,
    /// `DIPU_COMM_STAGED_TRANSPORT` and `DIPU_COMM_STAGED_ADDR`; a bad value
    /// is an error naming the variable.
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
        if let Ok(text) = std::env::var(ENV_STAGED_TRANSPORT) {
            options.staged_transport = StagedTransport::parse(&text).ok_or_else(|| {
                Error::new(
                    dipu_deviceapi::ErrorKind::InvalidConfig,
                    format!("{ENV_STAGED_TRANSPORT}={text:?}: expected auto, shm or tcp"),
                )
            })?;
        }
        if let Ok(text) = std::env::var(ENV_STAGED_ADDR) {
            let address = text.trim().parse().map_err(|_| {
                Error::new(
                    dipu_deviceapi::ErrorKind::InvalidConfig,
                    format!("{ENV_STAGED_ADDR}={text:?}: expected an IP address"),
                )
            })?;
            options.staged_address = Some(address);
        }
        Ok(options)
    }

    /// These options with `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These options with `staged_transport`.
    pub fn with_staged_transport(mut self, transport: StagedTransport) -> Self {
        self.staged_transport = transport;
        self
    }

    /// These options with `blocking_wait`.
    pub fn with_blocking_wait(mut self, blocking_wait: bool) -> Self {
        self.blocking_wait = blocking_wait;
        self
    }
}
