//! [`Work`]: the handle of one queued collective (or of a coalesced batch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, DeviceGuard, Event, Stream};
use parking_lot::{Condvar, Mutex};

use super::comms::Comm;
use super::outcome::{Outcome, State};

/// How long a host waiter sleeps at most before looking at the
/// operation's state again (it is woken as soon as the stream passes it).
const SIGNAL_SLICE: Duration = Duration::from_millis(10);

/// A flag a stream callback sets, waking the waiters.
#[derive(Default)]
struct Signal {
    set: Mutex<bool>,
    wake: Condvar,
}

impl Signal {
    fn set(&self) {
        *self.set.lock() = true;
        self.wake.notify_all();
    }

    /// Sleeps until the flag is set or `limit` passes.
    fn wait(&self, limit: Duration) {
        let mut set = self.set.lock();
        if !*set {
            self.wake.wait_for(&mut set, limit);
        }
    }
}

/// What the group knows about one operation in flight.
#[derive(Debug)]
pub(crate) struct WorkState {
    /// e.g. `all_reduce #12 (1024 x F32, Sum)`.
    pub(crate) what: String,
    pub(crate) enqueued: Instant,
    pub(crate) timeout: Duration,
    pub(crate) blocking_wait: bool,
    pub(crate) device: i32,
    pub(crate) ctx: &'static DeviceContext,
    /// The communicators the op used (their asynchronous errors fail it);
    /// the events are recorded on the first one's stream.
    pub(crate) comms: Vec<Arc<Comm>>,
    /// Recorded before and after the op on the communication stream; `None`
    /// until a coalesced batch ends.
    pub(crate) events: Mutex<Option<(Event, Event)>>,
    pub(crate) outcome: Outcome,
}

impl WorkState {
    /// Settles the outcome if the stream has passed the end event (checking
    /// the communicators' asynchronous errors then), or if a communicator
    /// reports an error already. Returns whether it is settled.
    pub(crate) fn poll(&self) -> bool {
        if self.outcome.is_settled() {
            return true;
        }
        let done = {
            let events = self.events.lock();
            match events.as_ref() {
                None => return false,
                Some((_, end)) => end.query(),
            }
        };
        if let Err(e) = self.comm_error() {
            self.outcome.fail(e);
            return true;
        }
        match done {
            Ok(true) => {
                self.outcome.complete();
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.outcome
                    .fail(e.context(format!("{}: querying its end event", self.what)));
                true
            }
        }
    }

    fn comm_error(&self) -> Result<()> {
        for comm in &self.comms {
            comm.async_error()
                .map_err(|e| e.context(format!("{} failed on {}", self.what, comm.describe())))?;
        }
        Ok(())
    }

    /// Whether it has run longer than the timeout (unsettled only).
    pub(crate) fn is_overdue(&self, now: Instant) -> bool {
        !self.outcome.is_settled() && now.duration_since(self.enqueued) > self.timeout
    }

    /// The error a timeout gives it.
    pub(crate) fn timeout_error(&self, now: Instant) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{} timed out after {:.3} s (timeout {:.3} s)",
                self.what,
                now.duration_since(self.enqueued).as_secs_f64(),
                self.timeout.as_secs_f64()
            ),
        )
    }
}

/// Called when a work is found failed: the group aborts.
pub(crate) type FailureHook = Arc<dyn Fn(&WorkState, Error) + Send + Sync>;

/// A queued operation of a process group, as c10d's `Work`: query it, make
/// a stream wait for it, or wait on the host with a timeout.
///
/// Cheap to clone; clones share the operation.
#[derive(Clone)]
pub struct Work {
    pub(crate) state: Arc<WorkState>,
    /// Tells the group that the operation failed (it aborts the group).
    pub(crate) on_failure: FailureHook,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("what", &self.state.what)
            .field("state", &self.state.outcome.state())
            .finish()
    }
}

impl Work {
    /// What the operation is, e.g. `all_reduce #3 (1024 x F32, Sum) on rank 0 of 2`.
    pub fn describe(&self) -> &str {
        &self.state.what
    }

    /// Whether the operation has finished, successfully or not (never blocks).
    pub fn is_completed(&self) -> bool {
        self.state.poll()
    }

    /// Whether it finished successfully.
    pub fn is_success(&self) -> bool {
        self.state.poll() && matches!(self.state.outcome.state(), State::Completed)
    }

    /// The error it failed with, if it has failed.
    pub fn error(&self) -> Option<Error> {
        self.state.poll();
        match self.state.outcome.state() {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Makes the caller's current stream (of the group's device) wait for
    /// the operation, without blocking the host, as c10d's `Work::wait` does
    /// for device work. With the group's `blocking_wait` option, waits on
    /// the host instead (up to the group's timeout). Fails at once if the
    /// operation has already failed.
    pub fn wait(&self) -> Result<()> {
        if self.state.blocking_wait {
            return self.wait_host(self.state.timeout);
        }
        self.check_failed()?;
        let events = self.state.events.lock();
        let Some((_, end)) = events.as_ref() else {
            return Err(self.batch_open());
        };
        let ctx = self.state.ctx;
        let _guard = DeviceGuard::new(ctx, self.state.device)?;
        let current: Stream = ctx.current_stream(self.state.device)?;
        end.block(&current)
    }

    /// Waits on the host until the operation finishes or `timeout` passes.
    /// A timeout fails the operation (and, as the watchdog would, aborts
    /// the group's communicators): `ErrorKind::Timeout` naming the op.
    ///
    /// The waiter sleeps until a callback queued behind the operation on
    /// the communication stream wakes it, looking at the operation's state
    /// at least every 10 ms meanwhile (a failure, the timeout).
    pub fn wait_host(&self, timeout: Duration) -> Result<()> {
        if self.state.events.lock().is_none() && !self.state.outcome.is_settled() {
            return Err(self.batch_open());
        }
        let start = Instant::now();
        let signal = match self.state.poll() {
            true => None,
            false => self.arm_signal(),
        };
        let mut pause = Duration::from_micros(20);
        loop {
            if self.state.poll() {
                if let State::Failed(e) = self.state.outcome.state() {
                    (self.on_failure)(&self.state, e);
                }
                return self.check_failed();
            }
            let now = Instant::now();
            if now.duration_since(start) >= timeout {
                let error = self.state.timeout_error(now);
                (self.on_failure)(&self.state, error);
                return self.check_failed();
            }
            let left = timeout.saturating_sub(now.duration_since(start));
            match &signal {
                Some(signal) => signal.wait(left.min(SIGNAL_SLICE)),
                None => {
                    // No callback could be queued: poll, backing off.
                    std::thread::sleep(pause.min(left));
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
            }
        }
    }

    /// Queues a callback behind the operation on its communication stream
    /// that sets the returned signal; `None` if it cannot be queued.
    fn arm_signal(&self) -> Option<Arc<Signal>> {
        let stream = self.state.comms.first()?.stream;
        let signal = Arc::new(Signal::default());
        let set = Arc::clone(&signal);
        let ctx = self.state.ctx;
        let _guard = DeviceGuard::new(ctx, self.state.device).ok()?;
        // SAFETY: a live stream of the group's device (the group keeps its
        // communication streams); the callback calls no vendor function.
        let queued = unsafe {
            ctx.api()
                .launch_host_func(stream.raw(), Box::new(move || set.set()))
        };
        queued.ok().map(|()| signal)
    }

    /// Device time the operation took (from the events around it on the
    /// communication stream), once it has completed.
    pub fn duration(&self) -> Option<Duration> {
        if !self.is_success() {
            return None;
        }
        let events = self.state.events.lock();
        let (start, end) = events.as_ref()?;
        let ms = start.elapsed_time(end).ok()?;
        Some(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    /// The error for waiting on an operation of a batch not ended yet.
    fn batch_open(&self) -> Error {
        Error::invalid_argument(format!(
            "{}: the coalesced batch has not ended yet (call end_coalescing first)",
            self.state.what
        ))
    }

    fn check_failed(&self) -> Result<()> {
        match self.state.outcome.state() {
            State::Failed(e) => Err(e),
            _ => Ok(()),
        }
    }
}
