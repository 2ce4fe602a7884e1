//! What the issuing side and the worker of a host-staged communicator
//! share: its first error (after which it is stopped), how to abort its
//! transport, the gates that hold the communication stream while the
//! transport runs, and the backoff of every wait that must notice a stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::{Condvar, Mutex};

/// Tears a transport down from any thread, so that its waits end.
pub(crate) type Aborter = Box<dyn Fn() + Send + Sync>;

/// The state of one host-staged communicator both sides see.
#[derive(Default)]
pub(crate) struct Shared {
    stopped: AtomicBool,
    error: Mutex<Option<Error>>,
    aborter: Mutex<Option<Aborter>>,
}

impl Shared {
    /// Stops the communicator with `error` (the first error wins) and
    /// aborts its transport, so that every wait ends and peers learn of it.
    pub(crate) fn fail(&self, error: Error) {
        {
            let mut slot = self.error.lock();
            if slot.is_none() {
                *slot = Some(error);
            }
            self.stopped.store(true, Ordering::Release);
        }
        if let Some(abort) = self.aborter.lock().take() {
            abort();
        }
    }

    /// Whether it has stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The error it stopped with, if it has.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.stopped() {
            return Ok(());
        }
        Err(self
            .error
            .lock()
            .clone()
            .unwrap_or_else(|| Error::new(ErrorKind::Internal, "stopped without an error")))
    }

    /// Keeps how to abort the transport just connected (aborting it at
    /// once if the communicator stopped meanwhile).
    pub(crate) fn set_aborter(&self, abort: Aborter) {
        let mut slot = self.aborter.lock();
        if self.stopped() {
            drop(slot);
            abort();
        } else {
            *slot = Some(abort);
        }
    }
}

/// Holds a communication stream (a host function waiting on it) until the
/// worker opens it.
#[derive(Default)]
pub(crate) struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    /// Lets the stream go on.
    pub(crate) fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    /// Waits until opened (run by the stream, as a host function).
    pub(crate) fn wait(&self) {
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
    }
}

/// Waits between looks at a condition: yields a few times, then sleeps,
/// twice as long each time up to `max`.
pub(crate) struct Backoff {
    round: u32,
    sleep: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff whose sleeps grow to `max`.
    pub(crate) fn new(max: Duration) -> Backoff {
        Backoff {
            round: 0,
            sleep: Duration::from_micros(20),
            max,
        }
    }

    /// Waits a little longer than last time.
    pub(crate) fn pause(&mut self) {
        self.round += 1;
        if self.round <= 16 {
            std::thread::yield_now();
            return;
        }
        std::thread::sleep(self.sleep);
        self.sleep = (self.sleep * 2).min(self.max);
    }
}

/// When waits give up on their own: twice the group's timeout after they
/// start (the group's watchdog fails the operation first; this is only a
/// safety net).
pub(crate) fn safety_deadline(timeout: Duration) -> Instant {
    Instant::now() + timeout.saturating_mul(2)
}

/// The error of a wait that reached its safety deadline.
pub(crate) fn gave_up(what: &str, timeout: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "{what}: gave up after {:.3} s (twice the group's timeout)",
            timeout.saturating_mul(2).as_secs_f64()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_first_error_wins_and_the_aborter_runs_once() {
        let shared = Shared::default();
        assert!(shared.check().is_ok());
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        shared.set_aborter(Box::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        shared.fail(Error::new(ErrorKind::Timeout, "first"));
        shared.fail(Error::new(ErrorKind::VendorError, "second"));
        let e = shared.check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        // An aborter set after the stop runs at once.
        let late = Arc::clone(&runs);
        shared.set_aborter(Box::new(move || {
            late.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_gate_lets_its_waiter_go_once_opened() {
        let gate = Arc::new(Gate::default());
        let waiter = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.wait())
        };
        gate.open();
        waiter.join().unwrap();
        gate.wait(); // already open: returns at once
    }
}
