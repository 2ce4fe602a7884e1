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
        let who = os_thread_name();
        let line = format!("{name} {} [{who}]\n", args());
        let _ = file.lock().write_all(line.as_bytes());
    }
}

/// The calling thread's name as the system knows it (the caller's Rust
/// runtime is not this library's, so `std::thread::current()` would not
/// know it), or its thread id.
fn os_thread_name() -> String {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: the buffer is writable for its length, which we pass.
    let ok =
        unsafe { libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr(), buf.len()) } == 0;
    let name = ok.then(|| {
        // SAFETY: on success the name is NUL-terminated within the buffer.
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    });
    match name {
        Some(n) if !n.is_empty() => n,
        // SAFETY: gettid has no preconditions.
        _ => format!("tid {}", unsafe { libc::gettid() }),
    }
}
