//! Events: an event's record is a ticket on its stream's progress counter,
//! so the event completes exactly when the stream counts the work before it
//! done: a host that saw the event complete sees the stream idle (if
//! nothing was queued since), and one that synchronised the stream sees the
//! event complete.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use dipu_deviceapi::{Error, ErrorKind, EventHandle, Result};
use parking_lot::Mutex;

use crate::stream::{Op, Progress, Stream};
use crate::wait::Phases;

/// One record of an event: done when its stream reaches `ticket`.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    progress: Arc<Progress>,
    ticket: u64,
    /// Set by the record's operation before the stream counts it done
    /// (timing events only: the others allocate nothing for it).
    time: Option<Arc<OnceLock<Instant>>>,
}

impl Mark {
    /// Whether the work before the record is done.
    pub(crate) fn is_done(&self) -> bool {
        self.progress.reached(self.ticket)
    }

    /// Waits, in `phases`, until the record is done.
    pub(crate) fn wait(&self, phases: Phases) {
        self.progress.wait(self.ticket, phases);
    }
}

/// One event; stream operations hold its marks by value, so destroying the
/// event does not break a pending record or wait.
#[derive(Debug)]
pub(crate) struct Event {
    device: i32,
    timing: bool,
    /// The newest record (`None`: never recorded, which counts as done).
    last: Mutex<Option<Mark>>,
}

impl Event {
    /// Queues a record on `stream`: the event completes when the work queued
    /// there so far is done.
    pub(crate) fn record(&self, handle: EventHandle, stream: &Stream) -> Result<()> {
        if stream.device() != self.device {
            return Err(Error::invalid_argument(format!(
                "event_record: event {handle:?} belongs to device {} but {} does not",
                self.device,
                stream.label()
            )));
        }
        let time = self.timing.then(|| Arc::new(OnceLock::new()));
        let stamp = time.clone();
        let op: Op = Box::new(move || {
            if let Some(stamp) = stamp {
                let _ = stamp.set(Instant::now());
            }
            Ok(())
        });
        // Held across the submit, so records of one event keep their order.
        let mut last = self.last.lock();
        let ticket = stream.submit(op)?;
        *last = Some(Mark {
            progress: stream.progress(),
            ticket,
            time,
        });
        Ok(())
    }

    /// The newest record, if any.
    pub(crate) fn mark(&self) -> Option<Mark> {
        self.last.lock().clone()
    }

    /// Whether the newest record is done.
    pub(crate) fn is_complete(&self) -> bool {
        self.last.lock().as_ref().is_none_or(Mark::is_done)
    }

    /// The time of the newest record, if this is a timing event and it is done.
    fn timestamp(&self, handle: EventHandle) -> Result<Instant> {
        if !self.timing {
            return Err(Error::invalid_argument(format!(
                "event_elapsed_ms: event {handle:?} was created without timing"
            )));
        }
        let Some(mark) = self.mark() else {
            return Err(Error::invalid_argument(format!(
                "event_elapsed_ms: event {handle:?} was never recorded"
            )));
        };
        match mark.time.as_ref().and_then(|t| t.get()) {
            Some(time) if mark.is_done() => Ok(*time),
            _ => Err(Error::new(
                ErrorKind::NotReady,
                format!("event_elapsed_ms: event {handle:?} has not completed yet"),
            )),
        }
    }
}

/// Milliseconds from `start` to `end` (negative if `end` came first).
pub(crate) fn elapsed_ms(start: (&Event, EventHandle), end: (&Event, EventHandle)) -> Result<f32> {
    let t0 = start.0.timestamp(start.1)?;
    let t1 = end.0.timestamp(end.1)?;
    let ms = match t1.checked_duration_since(t0) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(t0.duration_since(t1).as_secs_f64() * 1e3),
    };
    Ok(ms as f32)
}

/// The vendor's live events.
#[derive(Debug)]
pub(crate) struct Events {
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Arc<Event>>>,
}

impl Events {
    pub(crate) fn new() -> Events {
        Events {
            next_id: AtomicU64::new(1),
            live: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn create(&self, device: i32, timing: bool) -> EventHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let event = Event {
            device,
            timing,
            last: Mutex::new(None),
        };
        self.live.lock().insert(id, Arc::new(event));
        EventHandle::from_raw(id)
    }

    pub(crate) fn get(&self, handle: EventHandle) -> Result<Arc<Event>> {
        self.live
            .lock()
            .get(&handle.as_raw())
            .cloned()
            .ok_or_else(|| unknown(handle))
    }

    pub(crate) fn destroy(&self, handle: EventHandle) -> Result<()> {
        self.live
            .lock()
            .remove(&handle.as_raw())
            .map(drop)
            .ok_or_else(|| unknown(handle))
    }
}

fn unknown(handle: EventHandle) -> Error {
    Error::invalid_argument(format!(
        "unknown event {handle:?} (never created by this vendor, or destroyed)"
    ))
}
