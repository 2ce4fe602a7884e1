//! The rank processes of `dipu bench comm`: waiting for them all, failing
//! the run (and killing the rest) when one fails, and their stderr.

use std::io::Read as _;
use std::process::{Child, ChildStderr, ExitStatus};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};

/// A child rank: its process, the thread reading its stderr, how it ended.
pub(super) struct RankProcess {
    pub(super) rank: u32,
    pub(super) child: Child,
    pub(super) stderr: Option<JoinHandle<String>>,
    pub(super) status: Option<ExitStatus>,
}

impl RankProcess {
    /// What it wrote to stderr (once it has exited).
    fn stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// The child ranks; every one still running is killed when this drops.
#[derive(Default)]
pub(super) struct Ranks(pub(super) Vec<RankProcess>);

impl Ranks {
    /// Waits until every rank has exited successfully; fails (the drop
    /// then kills the rest) as soon as one fails, or when `timeout` passes.
    pub(super) fn wait_all(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let total = self.0.len();
        loop {
            let mut running = 0;
            for r in &mut self.0 {
                if r.status.is_some() {
                    continue;
                }
                match r.child.try_wait() {
                    Ok(Some(status)) => {
                        r.status = Some(status);
                        if !status.success() {
                            let how = match status.code() {
                                Some(code) => format!("exit code {code}"),
                                None => format!("{status}"),
                            };
                            let stderr = r.stderr();
                            return Err(Error::new(
                                ErrorKind::VendorError,
                                format!(
                                    "rank {} of {} failed ({how}), so the run stopped and the \
                                     other ranks were killed{}",
                                    r.rank,
                                    total,
                                    quote(&stderr)
                                ),
                            ));
                        }
                    }
                    Ok(None) => running += 1,
                    Err(e) => {
                        return Err(Error::new(
                            ErrorKind::Internal,
                            format!("waiting for rank {}: {e}", r.rank),
                        ))
                    }
                }
            }
            if running == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{running} of {total} ranks still running after {} s (--timeout); they \
                         were killed",
                        timeout.as_secs()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Copies what the ranks wrote to stderr (warnings) to ours.
    pub(super) fn forward_stderr(&mut self) {
        for r in &mut self.0 {
            for line in r.stderr().lines() {
                eprintln!("rank {}: {line}", r.rank);
            }
        }
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for r in &mut self.0 {
            if r.status.is_none() {
                let _ = r.child.kill();
                let _ = r.child.wait();
            }
        }
    }
}

/// Reads a child's stderr to the end on a thread of its own (so the child
/// never blocks on a full pipe).
pub(super) fn drain(mut stderr: ChildStderr) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    })
}

/// `: <the last lines of text>` for an error message, or nothing.
fn quote(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::from(" (it wrote nothing to stderr)");
    }
    let tail = &lines[lines.len().saturating_sub(10)..];
    format!("; it said:\n  {}", tail.join("\n  "))
}
