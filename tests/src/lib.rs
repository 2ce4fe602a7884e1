//! The dipu-rs conformance suite: the checks every vendor must pass.
//!
//! The same checks run in three places: `dipu selftest` (against whatever
//! vendor `DIPU_VENDOR` or `--vendor` names), this crate's integration tests
//! (against the host vendor, built in and as a plugin), and a vendor's own
//! CI, which calls [`run`] on its `Arc<dyn DeviceApi>`:
//!
//! ```no_run
//! # fn vendor() -> std::sync::Arc<dyn dipu_deviceapi::DeviceApi> { unimplemented!() }
//! let api = vendor();
//! let report = dipu_tests::run(&api, None);
//! print!("{report}");
//! println!("{}", report.summary());
//! assert_eq!(report.failed(), 0);
//! ```
//!
//! Each check is a small function named `group::what` (for example
//! `events::cross_stream_wait`); `filter` keeps the checks whose name
//! contains it. A check passes, fails with a message (a panic inside a check
//! is caught and is a failure with the panic's message), or is skipped. Only
//! a machine without devices skips: `device_count` answering `NoDevice` (with
//! a message) is itself a pass of `device::count`, and every other check is
//! then skipped with that message. A capability the vendor does not report
//! is not skipped either: its check then verifies that every method of the
//! capability answers `Unsupported`.
//!
//! Some checks hand the vendor pointers it must reject (a double free, a
//! pointer into the interior of a live allocation, null buffers for an
//! unsupported capability). The trait asks vendors to reject what they can
//! detect with `InvalidArgument`; the host vendor validates every pointer
//! against its registry, and real runtimes report these too (CUDA's
//! `cudaFree` answers `cudaErrorInvalidValue` for both), so these checks are
//! safe against every vendor that follows the trait's contract. No check
//! hands a vendor a pointer to freed memory that something else may own: the
//! suite runs its checks one at a time and frees nothing in between.
//!
//! Streams must be asynchronous. Checks about pending work keep a stream
//! busy in a vendor-neutral way, with a host callback that sleeps (30 to
//! 50 ms) or blocks until the check lets it go; a vendor that runs the
//! callback inside `launch_host_func` fails those checks at once, with a
//! message saying so. The whole suite takes about a second on the host
//! vendor.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{DeviceApi, ErrorKind};

mod capabilities;
mod check;
mod copies;
mod device;
mod events;
mod memory;
mod report;
mod resources;
mod streams;
mod threads;

use check::{Ctx, Verdict};

pub use report::Report;

/// One conformance check: a name and the function that performs it.
#[derive(Clone, Copy)]
pub struct Check {
    name: &'static str,
    needs_device: bool,
    func: fn(&Ctx<'_>) -> Verdict,
}

impl Check {
    /// A check that needs at least one device.
    pub(crate) const fn new(name: &'static str, func: fn(&Ctx<'_>) -> Verdict) -> Check {
        Check {
            name,
            needs_device: true,
            func,
        }
    }

    /// The check's name, `group::what`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the check needs a device (all but `device::count` do).
    pub fn needs_device(&self) -> bool {
        self.needs_device
    }
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check").field("name", &self.name).finish()
    }
}

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The vendor behaved as the trait requires.
    Passed,
    /// The vendor did not; the message says what was expected and seen.
    Failed(String),
    /// The check could not run (only when the machine has no device).
    Skipped(String),
}

impl Outcome {
    /// `"passed"`, `"FAILED"` or `"skipped"`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed(_) => "FAILED",
            Outcome::Skipped(_) => "skipped",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Passed => f.write_str("passed"),
            Outcome::Failed(m) => write!(f, "FAILED: {m}"),
            Outcome::Skipped(m) => write!(f, "skipped: {m}"),
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone)]
pub struct CheckResult {
    /// The check's name.
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// Remarks from a passing check, e.g. which branch it took.
    pub notes: Vec<String>,
    /// How long it ran.
    pub duration: Duration,
}

/// Every check of the suite, in the order [`run`] runs them.
pub fn checks() -> Vec<Check> {
    let mut all = vec![Check {
        name: "device::count",
        needs_device: false,
        func: device::count,
    }];
    all.extend(device::checks());
    all.extend(memory::checks());
    all.extend(copies::checks());
    all.extend(streams::checks());
    all.extend(events::checks());
    all.extend(threads::checks());
    all.extend(capabilities::checks());
    all
}

/// Runs the checks whose name contains `filter` (all of them for `None`)
/// against `api`, one after another on the calling thread, and reports.
///
/// Before each check the calling thread's current device is set to 0; when
/// the suite ends it is set back to what it was.
pub fn run(api: &Arc<dyn DeviceApi>, filter: Option<&str>) -> Report {
    let selected: Vec<Check> = checks()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
        .collect();
    run_checks(api, &selected)
}

/// Runs exactly `checks` against `api`; see [`run`].
pub fn run_checks(api: &Arc<dyn DeviceApi>, checks: &[Check]) -> Report {
    let started = Instant::now();
    let api: &dyn DeviceApi = api.as_ref();
    let count = api.device_count();
    let original_device = api.current_device().ok();
    let mut results = Vec::with_capacity(checks.len());
    for check in checks {
        let ctx = Ctx::new(api, *count.as_ref().unwrap_or(&0));
        let check_started = Instant::now();
        let outcome = match (&count, check.needs_device) {
            (Err(e), true) if e.kind() == ErrorKind::NoDevice => {
                Outcome::Skipped(format!("no device: {}", e.message()))
            }
            (Err(e), true) => Outcome::Failed(format!("device_count failed: {e}")),
            _ => {
                if check.needs_device {
                    // A check that fails to reset still runs and reports.
                    let _ = api.set_device(0);
                }
                run_one(check, &ctx)
            }
        };
        results.push(CheckResult {
            name: check.name,
            outcome,
            notes: ctx.take_notes(),
            duration: check_started.elapsed(),
        });
    }
    if let (Some(device), Ok(_)) = (original_device, &count) {
        let _ = api.set_device(device);
    }
    Report {
        vendor: api.name().to_owned(),
        results,
        elapsed: started.elapsed(),
    }
}

/// Runs one check, turning a panic into a failure with its message. A
/// check during which a gate's callback gave up waiting fails: it waited
/// for work queued behind a gate it had not opened.
fn run_one(check: &Check, ctx: &Ctx<'_>) -> Outcome {
    let given_up = resources::gates_given_up();
    let outcome = catch_unwind(AssertUnwindSafe(|| (check.func)(ctx)));
    if resources::gates_given_up() != given_up {
        return Outcome::Failed(format!(
            "a host callback blocked on the check's gate gave up after {:?}: \
             something waited for work queued behind the gate before the check opened it \
             (a vendor call that waits for its stream's earlier work?)",
            resources::Gate::LIMIT
        ));
    }
    match outcome {
        Ok(Ok(())) => Outcome::Passed,
        Ok(Err(fail)) => Outcome::Failed(fail.0),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
            Outcome::Failed(format!("panicked: {message}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_grouped() {
        let all = checks();
        assert!(all.len() > 30);
        for (i, c) in all.iter().enumerate() {
            assert!(c.name.contains("::"), "{}", c.name);
            assert!(
                all[..i].iter().all(|o| o.name != c.name),
                "duplicate {}",
                c.name
            );
        }
        assert_eq!(all.iter().filter(|c| !c.needs_device()).count(), 1);
    }
}
