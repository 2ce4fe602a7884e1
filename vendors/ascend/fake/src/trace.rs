//! The call trace (`DIPU_FAKE_TRACE`): one line per call, `thread symbol
//! -> code`, appended to the file (several processes may share it).

use std::fs::File;
use std::io::Write;
use std::sync::OnceLock;

use parking_lot::Mutex;

fn file() -> Option<&'static Mutex<File>> {
    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = crate::config::get().trace.as_ref()?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
            .map(Mutex::new)
    })
    .as_ref()
}

/// Appends `symbol -> code` (and `note` if any) for the calling thread.
pub(crate) fn call(symbol: &str, code: i32, note: &str) {
    let Some(file) = file() else { return };
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("?");
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() };
    let line = if note.is_empty() {
        format!("{tid} {name} {symbol} -> {code}\n")
    } else {
        format!("{tid} {name} {symbol} -> {code} ({note})\n")
    };
    let _ = file.lock().write_all(line.as_bytes());
}
