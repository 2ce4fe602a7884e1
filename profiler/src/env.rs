//! `DIPU_PROFILE=path.json` and `DIPU_PROFILE_EVENTS=N`: recording from
//! the start and a dump at process exit.

use std::path::PathBuf;
use std::sync::{Once, OnceLock};

use dipu_deviceapi::{Error, ErrorKind, Result};

/// The variable naming the file the trace is written to at exit.
pub const PROFILE_ENV: &str = "DIPU_PROFILE";
/// The variable giving the ring's size in events.
pub const PROFILE_EVENTS_ENV: &str = "DIPU_PROFILE_EVENTS";

static EXIT_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Reads `DIPU_PROFILE_EVENTS` (the ring's size) and `DIPU_PROFILE` (a
/// path: start recording now and write the trace there at process exit).
/// A value that is not a positive number is an `InvalidConfig` error.
/// Calling it again changes nothing once a path was taken.
pub fn init_from_env() -> Result<()> {
    if let Ok(v) = std::env::var(PROFILE_EVENTS_ENV) {
        let n = v.trim().parse::<usize>().ok().filter(|&n| n > 0);
        let n = n.ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("{PROFILE_EVENTS_ENV}={v:?}: expected a positive number of events"),
            )
        })?;
        crate::set_capacity(n)?;
    }
    match std::env::var_os(PROFILE_ENV) {
        Some(path) if !path.is_empty() => {
            if EXIT_PATH.set(PathBuf::from(path)).is_ok() {
                register_at_exit();
                crate::start();
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(path) = EXIT_PATH.get() {
            crate::stop();
            match crate::dump(path) {
                Ok(n) => eprintln!("dipu: wrote {n} trace events to {}", path.display()),
                Err(e) => eprintln!("dipu: could not write the trace: {e}"),
            }
        }
    });
}

fn register_at_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C" fn()` that never unwinds
        // (its body is inside catch_unwind) and lives as long as the process.
        let rc = unsafe { libc::atexit(at_exit) };
        if rc != 0 {
            tracing::warn!("dipu profiler: atexit failed; no trace at process exit");
        }
    });
}
