//! The environment every fake shares, and the fault specification.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// `DIPU_FAKE_TRACE`: the file the call trace is appended to.
pub const ENV_TRACE: &str = "DIPU_FAKE_TRACE";
/// `DIPU_FAKE_FAULTS`: the faults to inject (see [`Faults::parse`]).
pub const ENV_FAULTS: &str = "DIPU_FAKE_FAULTS";
/// `DIPU_FAKE_LATENCY_US`: microseconds each queued operation waits.
pub const ENV_LATENCY_US: &str = "DIPU_FAKE_LATENCY_US";
/// `DIPU_FAKE_DEVICES`: the number of devices.
pub const ENV_DEVICES: &str = "DIPU_FAKE_DEVICES";
/// `DIPU_FAKE_MEMORY`: bytes of memory per device.
pub const ENV_MEMORY: &str = "DIPU_FAKE_MEMORY";

/// What the environment asks of a fake, read once.
#[derive(Debug)]
pub struct Config {
    /// How long each queued operation waits before it runs.
    pub latency: Duration,
    /// The number of devices.
    pub devices: i32,
    /// Bytes of memory per device.
    pub memory: u64,
    /// The faults to inject.
    pub faults: Faults,
}

impl Config {
    /// Reads the `DIPU_FAKE_*` variables; a malformed value is reported on
    /// stderr and the default used (a fake has no other way to complain).
    pub fn from_env() -> Self {
        Config {
            latency: Duration::from_micros(number(ENV_LATENCY_US, 200)),
            devices: number(ENV_DEVICES, 2).clamp(1, 64) as i32,
            memory: number(ENV_MEMORY, 1 << 30),
            faults: match std::env::var(ENV_FAULTS) {
                Ok(spec) => Faults::parse(&spec).unwrap_or_else(|e| {
                    eprintln!("dipu fake: {ENV_FAULTS}: {e}; no faults injected");
                    Faults::default()
                }),
                Err(_) => Faults::default(),
            },
        }
    }
}

/// The unsigned number in `var`, or `default`.
pub fn number(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("dipu fake: {var}={v} is not a number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

/// One named call failing: every call, or only the `nth`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    name: String,
    nth: Option<u64>,
    code: i32,
}

/// Injected faults: out of memory at the N-th allocation, named calls
/// failing with a chosen code.
#[derive(Debug, Default)]
pub struct Faults {
    oom_at: Option<u64>,
    allocations: AtomicU64,
    failures: Vec<Failure>,
    calls: Mutex<HashMap<String, u64>>,
}

impl Faults {
    /// Parses `oom@N,fail:NAME=CODE,fail:NAME@N=CODE` (items separated by
    /// commas; N counts from 1).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut faults = Faults::default();
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            if let Some(n) = item.strip_prefix("oom@") {
                let n = n
                    .parse()
                    .map_err(|_| format!("`{item}`: N is not a number"))?;
                faults.oom_at = Some(n);
            } else if let Some(rest) = item.strip_prefix("fail:") {
                let (call, code) = rest
                    .split_once('=')
                    .ok_or_else(|| format!("`{item}`: expected fail:NAME=CODE"))?;
                let code = code
                    .parse()
                    .map_err(|_| format!("`{item}`: CODE is not a number"))?;
                let (name, nth) = match call.split_once('@') {
                    Some((name, n)) => (
                        name,
                        Some(
                            n.parse()
                                .map_err(|_| format!("`{item}`: N is not a number"))?,
                        ),
                    ),
                    None => (call, None),
                };
                faults.failures.push(Failure {
                    name: name.to_owned(),
                    nth,
                    code,
                });
            } else {
                return Err(format!(
                    "`{item}`: expected oom@N, fail:NAME=CODE or fail:NAME@N=CODE"
                ));
            }
        }
        Ok(faults)
    }

    /// Whether this allocation (counted across all allocation calls) is
    /// the one to fail.
    pub fn oom(&self) -> bool {
        let n = self.allocations.fetch_add(1, Ordering::Relaxed) + 1;
        self.oom_at == Some(n)
    }

    /// The code this call of `name` must fail with, if any.
    pub fn fail(&self, name: &str) -> Option<i32> {
        let mine: Vec<&Failure> = self.failures.iter().filter(|f| f.name == name).collect();
        if mine.is_empty() {
            return None;
        }
        let n = {
            let mut calls = self.calls.lock();
            let n = calls.entry(name.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        mine.iter()
            .find(|f| f.nth.is_none_or(|nth| nth == n))
            .map(|f| f.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_fire() {
        let f = Faults::parse("oom@2, fail:cudaMalloc@3=2,fail:cuInit=100").unwrap();
        assert!(!f.oom());
        assert!(f.oom());
        assert!(!f.oom());
        assert_eq!(f.fail("cuInit"), Some(100));
        assert_eq!(f.fail("cudaMalloc"), None);
        assert_eq!(f.fail("cudaMalloc"), None);
        assert_eq!(f.fail("cudaMalloc"), Some(2));
        assert_eq!(f.fail("cudaMalloc"), None);
        assert_eq!(f.fail("cudaFree"), None);
    }

    #[test]
    fn bad_specs_are_refused() {
        for bad in ["oom@x", "fail:a", "fail:a=b", "boom", "fail:a@z=1"] {
            assert!(Faults::parse(bad).is_err(), "{bad}");
        }
    }
}
