//! The fake's settings: the environment every fake shares
//! ([`dipu_fakekit::config`]: `DIPU_FAKE_DEVICES`, `DIPU_FAKE_MEMORY`,
//! `DIPU_FAKE_LATENCY_US`, `DIPU_FAKE_TRACE`, `DIPU_FAKE_FAULTS`), read once.
//! A value that does not parse makes `aclInit` fail with a message naming
//! it (the kit alone would only warn on stderr).

use std::sync::OnceLock;

use dipu_fakekit::config::{self as kit, Config, Faults};

/// The settings.
pub(crate) fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// Why the environment is invalid, if it is.
pub(crate) fn problem() -> Option<String> {
    for var in [kit::ENV_DEVICES, kit::ENV_MEMORY, kit::ENV_LATENCY_US] {
        if let Ok(v) = std::env::var(var) {
            if v.trim().parse::<u64>().is_err() {
                return Some(format!("{var}={v:?} is not a number"));
            }
        }
    }
    let spec = std::env::var(kit::ENV_FAULTS).ok()?;
    Faults::parse(&spec)
        .err()
        .map(|e| format!("{}={spec:?}: {e}", kit::ENV_FAULTS))
}
