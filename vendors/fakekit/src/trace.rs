//! The call trace: one line per call (`name arguments`), appended to the
//! file `DIPU_FAKE_TRACE` names, so tests can assert call sequences.

use std::fs::File;
use std::io::Write;
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::config::ENV_TRACE;

fn file() -> Option<&'static Mutex<File>> {
    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::var_os(ENV_TRACE)?;
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                eprintln!("dipu fake: cannot open {ENV_TRACE}={path:?}: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// Appends `name args` (with the calling thread's name or id) to the trace,
/// if one is asked for. The arguments are formatted only then.
pub fn call(name: &str, args: impl FnOnce() -> String) {
    if let Some(file) = file() {
        let thread = std::thread::current();
        let who = thread
            .name()
            .map_or_else(|| format!("{:?}", thread.id()), str::to_owned);
        let line = format!("{name} {} [{who}]\n", args());
        let _ = file.lock().write_all(line.as_bytes());
    }
}
