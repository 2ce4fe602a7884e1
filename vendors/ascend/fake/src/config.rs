//! The fake's settings, from the environment (read once, at first use).
//! The names are shared with the other vendor fakes:
//!
//! - `DIPU_FAKE_DEVICES`: devices (default 2);
//! - `DIPU_FAKE_MEMORY`: bytes of memory per device (default 1 GiB; a
//!   suffix `K`, `M` or `G` multiplies);
//! - `DIPU_FAKE_LATENCY_US`: microseconds each stream task waits before it
//!   runs (default 0), so that work is visibly asynchronous;
//! - `DIPU_FAKE_TRACE`: a file every call is appended to, one line each;
//! - `DIPU_FAKE_FAULTS`: injected faults, see [`crate::faults`].
//!
//! A value that does not parse makes `aclInit` fail with a message naming it.

use std::sync::OnceLock;
use std::time::Duration;

use crate::faults::Faults;

/// The settings.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) devices: i32,
    pub(crate) memory: u64,
    pub(crate) latency: Duration,
    pub(crate) trace: Option<String>,
    pub(crate) faults: Faults,
}

/// The settings, or why they are invalid.
pub(crate) fn config() -> &'static Result<Config, String> {
    static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();
    CONFIG.get_or_init(read)
}

/// The settings, or the defaults when they are invalid (`aclInit` reports
/// the error; other calls still need numbers).
pub(crate) fn get() -> &'static Config {
    static DEFAULTS: OnceLock<Config> = OnceLock::new();
    match config() {
        Ok(c) => c,
        Err(_) => DEFAULTS.get_or_init(|| Config {
            devices: 2,
            memory: 1 << 30,
            latency: Duration::ZERO,
            trace: None,
            faults: Faults::default(),
        }),
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn read() -> Result<Config, String> {
    let devices = match var("DIPU_FAKE_DEVICES") {
        Some(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|d| (0..=64).contains(d))
            .ok_or_else(|| format!("DIPU_FAKE_DEVICES={v:?}: expected 0 to 64"))?,
        None => 2,
    };
    let memory = match var("DIPU_FAKE_MEMORY") {
        Some(v) => {
            bytes(&v).ok_or_else(|| format!("DIPU_FAKE_MEMORY={v:?}: expected bytes, e.g. 512M"))?
        }
        None => 1 << 30,
    };
    let latency = match var("DIPU_FAKE_LATENCY_US") {
        Some(v) => Duration::from_micros(
            v.trim()
                .parse()
                .map_err(|_| format!("DIPU_FAKE_LATENCY_US={v:?}: expected microseconds"))?,
        ),
        None => Duration::ZERO,
    };
    let faults = match var("DIPU_FAKE_FAULTS") {
        Some(v) => Faults::parse(&v).map_err(|e| format!("DIPU_FAKE_FAULTS={v:?}: {e}"))?,
        None => Faults::default(),
    };
    Ok(Config {
        devices,
        memory,
        latency,
        trace: var("DIPU_FAKE_TRACE"),
        faults,
    })
}

/// `512M` and friends.
fn bytes(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, shift) = match v.as_bytes().last()? {
        b'K' | b'k' => (&v[..v.len() - 1], 10),
        b'M' | b'm' => (&v[..v.len() - 1], 20),
        b'G' | b'g' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}
