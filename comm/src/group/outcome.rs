//! The outcome of one operation: pending until it completes or fails, and
//! never both. The stream completing, the watchdog timing it out, a
//! communicator error and the group's abort race to settle it; the first
//! one wins (model-checked with loom).

use dipu_deviceapi::Error;
use dipu_stream::sync::{AtomicU32, Mutex, Ordering};

const PENDING: u32 = 0;
const COMPLETED: u32 = 1;
const FAILED: u32 = 2;

/// What became of an operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    /// Still running (or queued).
    Pending,
    /// Finished successfully.
    Completed,
    /// Failed with this error.
    Failed(Error),
}

/// A settle-once outcome: [`Outcome::complete`] and [`Outcome::fail`] race,
/// the first wins, and readers see either pending or the final state (with
/// its error).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Fast read of the state; written only under `error`'s lock.
    state: AtomicU32,
    error: Mutex<Option<Error>>,
}

impl Outcome {
    /// Settles as completed; false if it was already settled.
    pub(crate) fn complete(&self) -> bool {
        let _slot = self.error.lock();
        self.state
            .compare_exchange(PENDING, COMPLETED, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Settles as failed with `error`; false if it was already settled.
    pub(crate) fn fail(&self, error: Error) -> bool {
        let mut slot = self.error.lock();
        if self.state.load(Ordering::Relaxed) != PENDING {
            return false;
        }
        *slot = Some(error);
        self.state.store(FAILED, Ordering::Release);
        true
    }

    /// Whether it has settled, either way.
    pub(crate) fn is_settled(&self) -> bool {
        self.state.load(Ordering::Acquire) != PENDING
    }

    /// The current state.
    pub(crate) fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            PENDING => State::Pending,
            COMPLETED => State::Completed,
            _ => {
                let slot = self.error.lock();
                State::Failed(slot.clone().unwrap_or_else(|| {
                    Error::new(
                        dipu_deviceapi::ErrorKind::Internal,
                        "an operation failed without an error",
                    )
                }))
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dipu_deviceapi::ErrorKind;

    #[test]
    fn first_settlement_wins() {
        let o = Outcome::default();
        assert_eq!(o.state(), State::Pending);
        assert!(!o.is_settled());
        assert!(o.fail(Error::new(ErrorKind::Timeout, "late")));
        assert!(!o.complete());
        assert!(!o.fail(Error::new(ErrorKind::Internal, "second")));
        match o.state() {
            State::Failed(e) => {
                assert_eq!(e.kind(), ErrorKind::Timeout);
                assert!(e.to_string().contains("late"));
            }
            other => panic!("expected the first failure, got {other:?}"),
        }
        let o = Outcome::default();
        assert!(o.complete());
        assert!(!o.fail(Error::new(ErrorKind::Timeout, "late")));
        assert_eq!(o.state(), State::Completed);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use dipu_deviceapi::ErrorKind;
    use loom::sync::Arc;

    /// The stream completing, the watchdog failing the work and a waiter
    /// reading it, in every interleaving: exactly one settlement wins, a
    /// waiter that sees `Failed` also sees its error, and the state never
    /// changes once seen settled.
    #[test]
    fn completion_races_the_watchdog() {
        loom::model(|| {
            let outcome = Arc::new(Outcome::default());
            let completer = {
                let o = Arc::clone(&outcome);
                loom::thread::spawn(move || o.complete())
            };
            let watchdog = {
                let o = Arc::clone(&outcome);
                loom::thread::spawn(move || o.fail(Error::new(ErrorKind::Timeout, "timed out")))
            };
            let first = outcome.state();
            let completed = completer.join().unwrap();
            let failed = watchdog.join().unwrap();
            assert!(completed ^ failed, "exactly one settlement wins");
            let last = outcome.state();
            match (&first, &last) {
                (State::Pending, _) => {}
                (a, b) => assert_eq!(a, b, "a settled outcome never changes"),
            }
            match last {
                State::Completed => assert!(completed),
                State::Failed(e) => {
                    assert!(failed);
                    assert_eq!(e.kind(), ErrorKind::Timeout);
                }
                State::Pending => panic!("both settlements ran, yet the outcome is pending"),
            }
        });
    }
}
