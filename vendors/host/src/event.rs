//! Events: generation counters completed by stream operations, so a query,
//! a host wait or another stream's wait refers to one particular record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dipu_deviceapi::{Error, ErrorKind, EventHandle, Result};
use parking_lot::Mutex;

use crate::stream::{Op, Stream};
use crate::wait::{Phases, Signal};

#[derive(Debug, Default)]
struct Gens {
    /// Bumped by every record.
    recorded: u64,
    /// The newest record whose stream work is done.
    completed: u64,
    /// When `completed` was reached (timing events only).
    time: Option<Instant>,
}

/// One event; stream operations hold it by `Arc`, so destroying the event
/// does not break a pending record or wait.
#[derive(Debug)]
pub(crate) struct Event {
    device: i32,
    timing: bool,
    gens: Mutex<Gens>,
    /// `gens.completed`, readable without the lock by waiters.
    completed: AtomicU64,
    done: Signal,
}

impl Event {
    /// Queues a record on `stream`: the event completes when the work queued
    /// there so far is done.
    pub(crate) fn record(self: &Arc<Self>, handle: EventHandle, stream: &Stream) -> Result<()> {
        if stream.device() != self.device {
            return Err(Error::invalid_argument(format!(
                "event_record: event {handle:?} belongs to device {} but {} does not",
                self.device,
                stream.label()
            )));
        }
        let mut gens = self.gens.lock();
        gens.recorded += 1;
        let generation = gens.recorded;
        let event = Arc::clone(self);
        let op: Op = Box::new(move || {
            event.complete(generation);
            Ok(())
        });
        if let Err(e) = stream.submit(op) {
            gens.recorded -= 1;
            return Err(e);
        }
        Ok(())
    }

    fn complete(&self, generation: u64) {
        let mut gens = self.gens.lock();
        if generation > gens.completed {
            gens.completed = generation;
            if self.timing {
                gens.time = Some(Instant::now());
            }
            self.completed.store(generation, Ordering::SeqCst);
        }
        drop(gens);
        self.done.notify();
    }

    /// The generation of the newest record (0 if never recorded).
    pub(crate) fn recorded(&self) -> u64 {
        self.gens.lock().recorded
    }

    /// Whether the newest record is done.
    pub(crate) fn is_complete(&self) -> bool {
        let gens = self.gens.lock();
        gens.completed >= gens.recorded
    }

    /// Waits, in `phases`, until record `generation` (or a later one) is
    /// done.
    pub(crate) fn wait_for(&self, generation: u64, phases: Phases) {
        let ready = || self.completed.load(Ordering::SeqCst) >= generation;
        if !ready() {
            self.done.wait(phases, ready);
        }
    }

    /// The time of the newest record, if this is a timing event and it is done.
    fn timestamp(&self, handle: EventHandle) -> Result<Instant> {
        if !self.timing {
            return Err(Error::invalid_argument(format!(
                "event_elapsed_ms: event {handle:?} was created without timing"
            )));
        }
        let gens = self.gens.lock();
        if gens.recorded == 0 {
            return Err(Error::invalid_argument(format!(
                "event_elapsed_ms: event {handle:?} was never recorded"
            )));
        }
        match gens.time {
            Some(time) if gens.completed >= gens.recorded => Ok(time),
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
            gens: Mutex::new(Gens::default()),
            completed: AtomicU64::new(0),
            done: Signal::default(),
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
