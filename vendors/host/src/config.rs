//! The host vendor's configuration and its environment variables.

use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::wait::Schedule;
use dipu_vendorkit::size::{format_size_short, parse_size, ACCEPTED};

/// Number of simulated devices (default 2, 1 to 64).
pub const ENV_DEVICES: &str = "DIPU_HOST_DEVICES";
/// Memory capacity of each simulated device (default `4G`).
pub const ENV_MEMORY: &str = "DIPU_HOST_MEMORY";
/// Makes the N-th device malloc (1-based) fail once with `OutOfMemory`.
pub const ENV_FAIL_MALLOC_AT: &str = "DIPU_HOST_FAIL_MALLOC_AT";
/// Makes every device malloc fail that would bring the bytes ever allocated
/// past this size.
pub const ENV_FAIL_MALLOC_AFTER_BYTES: &str = "DIPU_HOST_FAIL_MALLOC_AFTER_BYTES";

/// Seconds a collective may make no progress before it fails with
/// `Timeout` (default 1800): a safety net so that nothing hangs forever.
pub const ENV_COMM_TIMEOUT: &str = "DIPU_HOST_COMM_TIMEOUT";

/// How a thread waits for the device, and a stream worker for work:
/// `auto` (default), `spin`, `yield` or `block` (see [`Schedule`]).
pub const ENV_SCHEDULE: &str = "DIPU_HOST_SCHEDULE";

/// Whether the vendor reports the `HOST_ACCESSIBLE_MEMORY` capability:
/// `1` (default) or `0`, which makes the layers above treat its memory as a
/// discrete device's, reached only through copies.
pub const ENV_HOST_ACCESSIBLE: &str = "DIPU_HOST_ACCESSIBLE_MEMORY";

/// Whether the vendor has collectives: `1` (default) or `0`, which hides
/// them as a vendor without a collective library would: no `COLLECTIVES`
/// capability, a unique-id size of 0 and every collective call
/// `Unsupported` (the process group then stages through host memory).
pub const ENV_COLLECTIVES: &str = "DIPU_HOST_COLLECTIVES";

/// The default of [`ENV_COMM_TIMEOUT`].
const DEFAULT_COMM_TIMEOUT: Duration = Duration::from_secs(1800);

/// The most simulated devices a host vendor can have.
pub const MAX_DEVICES: i32 = 64;

/// How the simulated accelerator looks: how many devices, how much memory
/// each has, and which failures to inject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Number of simulated devices, `1..=64` ([`ENV_DEVICES`]).
    pub devices: i32,
    /// Capacity of each device in bytes, at least 1 ([`ENV_MEMORY`]).
    pub memory_per_device: u64,
    /// The 1-based index of the device malloc that fails once
    /// ([`ENV_FAIL_MALLOC_AT`]).
    pub fail_malloc_at: Option<u64>,
    /// Device mallocs fail once the bytes ever allocated would exceed this
    /// ([`ENV_FAIL_MALLOC_AFTER_BYTES`]).
    pub fail_malloc_after_bytes: Option<u64>,
    /// How long a collective or point-to-point operation may make no
    /// progress before it fails with `Timeout` ([`ENV_COMM_TIMEOUT`]).
    pub comm_timeout: Duration,
    /// How threads wait ([`ENV_SCHEDULE`]).
    pub schedule: Schedule,
    /// Whether the vendor reports its memory as host-accessible
    /// ([`ENV_HOST_ACCESSIBLE`]); it is host memory either way.
    pub host_accessible: bool,
    /// Whether the vendor implements collectives ([`ENV_COLLECTIVES`]).
    pub collectives: bool,
}

impl Default for HostConfig {
    /// Two devices of 4 GiB each, no injected failures.
    fn default() -> Self {
        HostConfig {
            devices: 2,
            memory_per_device: 4 << 30,
            fail_malloc_at: None,
            fail_malloc_after_bytes: None,
            comm_timeout: DEFAULT_COMM_TIMEOUT,
            schedule: Schedule::Auto,
            host_accessible: true,
            collectives: true,
        }
    }
}

impl HostConfig {
    /// Reads the configuration from the `DIPU_HOST_*` environment variables;
    /// unset (or empty) variables keep their defaults.
    pub fn from_env() -> Result<HostConfig> {
        HostConfig::from_lookup(|name| {
            std::env::var_os(name).map(|v| {
                v.into_string()
                    .unwrap_or_else(|raw| raw.to_string_lossy().into_owned())
            })
        })
    }

    /// Like [`HostConfig::from_env`], but reads variables through `lookup`
    /// (which returns `None` for an unset variable), so tests need not touch
    /// the process environment.
    pub fn from_lookup(mut lookup: impl FnMut(&str) -> Option<String>) -> Result<HostConfig> {
        let mut get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut config = HostConfig::default();
        if let Some(text) = get(ENV_DEVICES) {
            config.devices = text
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=MAX_DEVICES).contains(n))
                .ok_or_else(|| {
                    bad_value(
                        ENV_DEVICES,
                        &text,
                        &format!("a whole number of devices from 1 to {MAX_DEVICES}"),
                    )
                })?;
        }
        if let Some(text) = get(ENV_MEMORY) {
            config.memory_per_device = match parse_size(&text) {
                Ok(0) => return Err(bad_value(ENV_MEMORY, &text, "at least 1 byte")),
                Ok(bytes) => bytes,
                Err(why) => return Err(bad_size(ENV_MEMORY, &text, &why)),
            };
        }
        if let Some(text) = get(ENV_FAIL_MALLOC_AT) {
            let n = text.trim().parse().ok().filter(|n| *n >= 1);
            config.fail_malloc_at = Some(n.ok_or_else(|| {
                bad_value(
                    ENV_FAIL_MALLOC_AT,
                    &text,
                    "a whole number N >= 1 (the N-th device malloc fails)",
                )
            })?);
        }
        if let Some(text) = get(ENV_FAIL_MALLOC_AFTER_BYTES) {
            let bytes = parse_size(&text)
                .map_err(|why| bad_size(ENV_FAIL_MALLOC_AFTER_BYTES, &text, &why))?;
            config.fail_malloc_after_bytes = Some(bytes);
        }
        if let Some(text) = get(ENV_COMM_TIMEOUT) {
            let seconds = text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 1e9);
            config.comm_timeout = seconds.map(Duration::from_secs_f64).ok_or_else(|| {
                bad_value(
                    ENV_COMM_TIMEOUT,
                    &text,
                    "a number of seconds greater than 0 (e.g. 1800 or 0.5)",
                )
            })?;
        }
        if let Some(text) = get(ENV_SCHEDULE) {
            config.schedule = Schedule::parse(&text)
                .ok_or_else(|| bad_value(ENV_SCHEDULE, &text, "auto, spin, yield or block"))?;
        }
        if let Some(text) = get(ENV_HOST_ACCESSIBLE) {
            config.host_accessible = match text.trim() {
                "1" => true,
                "0" => false,
                _ => return Err(bad_value(ENV_HOST_ACCESSIBLE, &text, "1 or 0")),
            };
        }
        if let Some(text) = get(ENV_COLLECTIVES) {
            config.collectives = match text.trim() {
                "1" => true,
                "0" => false,
                _ => return Err(bad_value(ENV_COLLECTIVES, &text, "1 or 0")),
            };
        }
        Ok(config)
    }

    /// Checks the values a caller may have set by hand.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_DEVICES).contains(&self.devices) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "the host vendor needs 1 to {MAX_DEVICES} devices, not {} (set {ENV_DEVICES})",
                    self.devices
                ),
            ));
        }
        if self.memory_per_device == 0 {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("host devices need at least 1 byte of memory (set {ENV_MEMORY})"),
            ));
        }
        if self.comm_timeout.is_zero() {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("the communicator timeout must be longer than 0 ({ENV_COMM_TIMEOUT})"),
            ));
        }
        if self.fail_malloc_at == Some(0) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("fail_malloc_at counts from 1, so 0 is invalid ({ENV_FAIL_MALLOC_AT})"),
            ));
        }
        Ok(())
    }

    /// A short description, e.g. `2 devices x 4 GiB`.
    pub fn describe(&self) -> String {
        let plural = if self.devices == 1 { "" } else { "s" };
        format!(
            "{} device{plural} x {}",
            self.devices,
            format_size_short(self.memory_per_device)
        )
    }
}

fn bad_value(variable: &str, value: &str, accepted: &str) -> Error {
    Error::new(
        ErrorKind::InvalidConfig,
        format!("{variable}={value:?} is invalid: expected {accepted}"),
    )
}

fn bad_size(variable: &str, value: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidConfig,
        format!("{variable}={value:?} is invalid ({why}): expected {ACCEPTED}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> Result<HostConfig> {
        HostConfig::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_when_unset_or_empty() {
        assert_eq!(lookup(&[]).unwrap(), HostConfig::default());
        assert_eq!(lookup(&[(ENV_MEMORY, " ")]).unwrap(), HostConfig::default());
        let c = HostConfig::default();
        assert_eq!((c.devices, c.memory_per_device), (2, 4 << 30));
        assert_eq!(c.describe(), "2 devices x 4 GiB");
    }

    #[test]
    fn reads_every_variable() {
        let c = lookup(&[
            (ENV_DEVICES, "3"),
            (ENV_MEMORY, "512M"),
            (ENV_FAIL_MALLOC_AT, "7"),
            (ENV_FAIL_MALLOC_AFTER_BYTES, "1GiB"),
            (ENV_COMM_TIMEOUT, "2.5"),
            (ENV_SCHEDULE, "Spin"),
            (ENV_HOST_ACCESSIBLE, "0"),
            (ENV_COLLECTIVES, "0"),
        ])
        .unwrap();
        assert!(!c.host_accessible);
        assert!(!c.collectives);
        assert!(lookup(&[(ENV_COLLECTIVES, "1")]).unwrap().collectives);
        assert!(
            lookup(&[(ENV_HOST_ACCESSIBLE, "1")])
                .unwrap()
                .host_accessible
        );
        assert_eq!(c.schedule, Schedule::Spin);
        assert_eq!(c.comm_timeout, Duration::from_millis(2500));
        assert_eq!(c.devices, 3);
        assert_eq!(c.memory_per_device, 512 << 20);
        assert_eq!(c.fail_malloc_at, Some(7));
        assert_eq!(c.fail_malloc_after_bytes, Some(1 << 30));
        assert_eq!(c.describe(), "3 devices x 512 MiB");
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_values_name_the_variable_and_value() {
        let cases = [
            (ENV_DEVICES, "0", "1 to 64"),
            (ENV_DEVICES, "65", "1 to 64"),
            (ENV_DEVICES, "two", "1 to 64"),
            (ENV_MEMORY, "8X", "GiB"),
            (ENV_MEMORY, "0", "at least 1 byte"),
            (ENV_MEMORY, "1.5G", "512M"),
            (ENV_FAIL_MALLOC_AT, "0", "N >= 1"),
            (ENV_FAIL_MALLOC_AT, "-3", "N >= 1"),
            (ENV_FAIL_MALLOC_AFTER_BYTES, "lots", "GiB"),
            (ENV_COMM_TIMEOUT, "0", "greater than 0"),
            (ENV_COMM_TIMEOUT, "-1", "greater than 0"),
            (ENV_COMM_TIMEOUT, "soon", "seconds"),
            (ENV_SCHEDULE, "busy", "auto, spin, yield or block"),
            (ENV_HOST_ACCESSIBLE, "yes", "1 or 0"),
            (ENV_COLLECTIVES, "no", "1 or 0"),
        ];
        for (var, value, accepted) in cases {
            let e = lookup(&[(var, value)]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{var}={value}");
            let m = e.message();
            assert!(m.contains(var), "{m}");
            assert!(m.contains(&format!("{value:?}")), "{m}");
            assert!(m.contains(accepted), "{m}");
        }
    }

    #[test]
    fn validate_rejects_hand_made_nonsense() {
        let bad = [
            HostConfig {
                devices: 0,
                ..HostConfig::default()
            },
            HostConfig {
                devices: 100,
                ..HostConfig::default()
            },
            HostConfig {
                memory_per_device: 0,
                ..HostConfig::default()
            },
            HostConfig {
                fail_malloc_at: Some(0),
                ..HostConfig::default()
            },
            HostConfig {
                comm_timeout: Duration::ZERO,
                ..HostConfig::default()
            },
        ];
        for c in bad {
            assert_eq!(c.validate().unwrap_err().kind(), ErrorKind::InvalidConfig);
        }
    }
}
