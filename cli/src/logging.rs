//! Logging to stderr, filtered by `DIPU_LOG`.

use std::io::IsTerminal;

use dipu_deviceapi::{Error, ErrorKind};
use tracing_subscriber::EnvFilter;

/// The environment variable holding the log filter.
pub(crate) const ENV_LOG: &str = "DIPU_LOG";

/// The filter when `DIPU_LOG` is unset or empty.
const DEFAULT_FILTER: &str = "warn";

/// Installs the global subscriber: `tracing-subscriber`'s fmt layer on
/// stderr, with the `EnvFilter` directives from `DIPU_LOG` (default `warn`).
///
/// Must run before a vendor is loaded: the loader decides then whether to
/// trace every vendor call (`DIPU_LOG=dipu::vendor_call=trace`).
pub(crate) fn init() -> Result<(), Error> {
    let directives = match std::env::var(ENV_LOG) {
        Ok(v) if !v.trim().is_empty() => v,
        Ok(_) | Err(std::env::VarError::NotPresent) => DEFAULT_FILTER.to_owned(),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("{ENV_LOG} is not valid UTF-8"),
            ))
        }
    };
    let filter = EnvFilter::builder().parse(&directives).map_err(|e| {
        Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "{ENV_LOG}={directives:?} is not a valid log filter: {e} \
                 (examples: `info`, `dipu=debug`, `dipu::vendor_call=trace`)"
            ),
        )
    })?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot install the logger: {e}"),
            )
        })
}
