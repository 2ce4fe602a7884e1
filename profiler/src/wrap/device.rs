//! Device times: timing events around queued work, resolved to the host
//! clock through one anchor event per device.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{DeviceApi, EventHandle, StreamHandle};
use parking_lot::Mutex;

use crate::ring::{push, Flush};
use crate::{now_ns, Arg, Args, Category, Event, Phase, Track};

/// Pending device slices beyond which queuing work first collects the
/// completed ones (and, past twice as many, waits for the oldest).
const PENDING_SOFT_LIMIT: usize = 4096;

/// Record-and-synchronise rounds an anchor takes the narrowest of.
const ANCHOR_TRIES: usize = 5;

/// Work queued on a stream whose device time is not known yet.
struct Pending {
    name: &'static str,
    cat: Category,
    device: i32,
    stream: u64,
    start: EventHandle,
    end: EventHandle,
    args: Args,
    /// A flow arrow to start or end at the slice.
    flow: Option<Phase>,
}

/// A device's anchor: an event that completed at host time `ns`.
#[derive(Clone, Copy)]
struct Anchor {
    event: EventHandle,
    ns: u64,
}

#[derive(Default)]
struct State {
    anchors: HashMap<i32, Anchor>,
    /// Reusable timing events, by device.
    pool: HashMap<i32, Vec<EventHandle>>,
    pending: VecDeque<Pending>,
    /// Each stream's device, from `stream_create`.
    stream_devices: HashMap<u64, i32>,
    /// The flow arrow of each vendor event's last record.
    flows: HashMap<u64, u64>,
    next_flow: u64,
}

/// Work bracketed by a start event (see [`DeviceTimes::begin`]).
pub(super) struct Begun {
    device: i32,
    stream: StreamHandle,
    start: EventHandle,
}

/// The device side of the decorator.
pub(super) struct DeviceTimes {
    api: Arc<dyn DeviceApi>,
    state: Mutex<State>,
}

impl DeviceTimes {
    pub(super) fn new(api: Arc<dyn DeviceApi>) -> DeviceTimes {
        DeviceTimes {
            api,
            state: Mutex::new(State::default()),
        }
    }

    /// Remembers that `stream` belongs to `device`.
    pub(super) fn stream_created(&self, stream: StreamHandle, device: i32) {
        self.state
            .lock()
            .stream_devices
            .insert(stream.as_raw(), device);
    }

    /// Forgets `stream`.
    pub(super) fn stream_destroyed(&self, stream: StreamHandle) {
        self.state.lock().stream_devices.remove(&stream.as_raw());
    }

    /// A new flow arrow for a record of `event`.
    pub(super) fn flow_for_record(&self, event: EventHandle) -> u64 {
        let mut s = self.state.lock();
        s.next_flow += 1;
        let id = s.next_flow;
        s.flows.insert(event.as_raw(), id);
        id
    }

    /// The flow arrow of `event`'s last record, if recorded while tracing.
    pub(super) fn flow_of(&self, event: EventHandle) -> Option<u64> {
        self.state.lock().flows.get(&event.as_raw()).copied()
    }

    /// Forgets `event`'s flow arrow.
    pub(super) fn event_destroyed(&self, event: EventHandle) {
        let mut s = self.state.lock();
        if !s.flows.is_empty() {
            s.flows.remove(&event.as_raw());
        }
    }

    /// Records a start event on `stream` before work is queued there, or
    /// `None` when the device cannot be timed (its events fail, or the
    /// stream is another device's than the current one).
    pub(super) fn begin(&self, stream: StreamHandle) -> Option<Begun> {
        let current = self.api.current_device().ok()?;
        let device = match stream.is_default() {
            true => current,
            false => *self
                .state
                .lock()
                .stream_devices
                .get(&stream.as_raw())
                .unwrap_or(&current),
        };
        if device != current {
            return None;
        }
        self.anchor(device, stream)?;
        let start = self.event(device)?;
        // SAFETY: `start` is this vendor's live event and `stream` the
        // caller's live stream (the decorated call's contract).
        if unsafe { self.api.event_record(start, stream) }.is_err() {
            self.recycle(device, start);
            return None;
        }
        Some(Begun {
            device,
            stream,
            start,
        })
    }

    /// Records the end event of work begun with `begun` and keeps the
    /// slice until its events complete.
    pub(super) fn end(
        &self,
        begun: Begun,
        name: &'static str,
        cat: Category,
        args: Args,
        flow: Option<Phase>,
    ) {
        let Some(end) = self.event(begun.device) else {
            self.recycle(begun.device, begun.start);
            return;
        };
        // SAFETY: as in `begin`.
        if unsafe { self.api.event_record(end, begun.stream) }.is_err() {
            self.recycle(begun.device, begun.start);
            self.recycle(begun.device, end);
            return;
        }
        let pending = {
            let mut s = self.state.lock();
            s.pending.push_back(Pending {
                name,
                cat,
                device: begun.device,
                stream: begun.stream.as_raw(),
                start: begun.start,
                end,
                args,
                flow,
            });
            s.pending.len()
        };
        if pending > PENDING_SOFT_LIMIT {
            // Past twice the limit, wait (as long as a dump would) for the
            // oldest to complete.
            let wait = pending > 2 * PENDING_SOFT_LIMIT;
            self.collect(wait.then(|| Instant::now() + crate::dump_wait()), false);
        }
    }

    /// The anchor of `device`, made on `stream` the first time.
    ///
    /// An event's completion is known to the host only between the moment
    /// it was recorded and the moment its synchronisation returned; the
    /// anchor takes the middle of the narrowest of [`ANCHOR_TRIES`] such
    /// windows (the first also waits for whatever `stream` had queued), so
    /// every device time is off by at most half that window, which the
    /// trace states (`device_clock_anchor`, `error_ns`).
    fn anchor(&self, device: i32, stream: StreamHandle) -> Option<Anchor> {
        if let Some(a) = self.state.lock().anchors.get(&device) {
            return Some(*a);
        }
        let mut best: Option<(Anchor, u64)> = None;
        for _ in 0..ANCHOR_TRIES {
            let Ok(event) = self.api.event_create(true) else {
                break;
            };
            let before = now_ns();
            // SAFETY: `event` was just created by this vendor; `stream` is
            // the caller's live stream.
            let ok = unsafe {
                self.api.event_record(event, stream).is_ok()
                    && self.api.event_synchronize(event).is_ok()
            };
            let after = now_ns();
            let half = after.saturating_sub(before) / 2;
            let dropped = if !ok || best.as_ref().is_some_and(|(_, error)| *error <= half) {
                Some(event)
            } else {
                let anchor = Anchor {
                    event,
                    ns: before + half,
                };
                best.replace((anchor, half)).map(|(old, _)| old.event)
            };
            if let Some(e) = dropped {
                // SAFETY: our own event, used by nothing else.
                let _ = unsafe { self.api.event_destroy(e) };
            }
            if !ok {
                break;
            }
        }
        let (anchor, error) = best?;
        let mut s = self.state.lock();
        if let Some(a) = s.anchors.get(&device) {
            // Another thread anchored the device meanwhile: keep its anchor.
            let a = *a;
            drop(s);
            // SAFETY: our own event, used by nothing else.
            let _ = unsafe { self.api.event_destroy(anchor.event) };
            return Some(a);
        }
        s.anchors.insert(device, anchor);
        drop(s);
        push(Event {
            name: "device_clock_anchor",
            cat: Category::Stream,
            phase: Phase::Instant,
            track: Track::stream(device, stream.as_raw()),
            ts_ns: anchor.ns,
            args: Args::new().u64("error_ns", error),
        });
        Some(anchor)
    }

    /// A timing event of the current device (`device`).
    fn event(&self, device: i32) -> Option<EventHandle> {
        let pooled = self.state.lock().pool.get_mut(&device).and_then(Vec::pop);
        pooled.or_else(|| self.api.event_create(true).ok())
    }

    fn recycle(&self, device: i32, event: EventHandle) {
        self.state
            .lock()
            .pool
            .entry(device)
            .or_default()
            .push(event);
    }

    /// Whether `p`'s work is done: polled until `deadline` when given
    /// (never past it: a stream that never finishes must not hang a dump).
    fn wait_for(&self, p: &Pending, deadline: Option<Instant>) -> bool {
        let mut pause = Duration::from_micros(20);
        loop {
            // SAFETY: `p.end` is our own live event.
            match unsafe { self.api.event_query(p.end) } {
                Ok(true) => return true,
                Ok(false) => {}
                Err(_) => return false,
            }
            let Some(deadline) = deadline else {
                return false;
            };
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Moves the pending slices whose events completed into the ring
    /// (waiting for each until `deadline`, when given; then, with `mark`,
    /// saying in the trace what is still pending).
    fn collect(&self, deadline: Option<Instant>, mark: bool) {
        let pending: Vec<Pending> = std::mem::take(&mut self.state.lock().pending).into();
        let mut kept = VecDeque::new();
        for p in pending {
            if !self.wait_for(&p, deadline) {
                kept.push_back(p);
                continue;
            }
            let anchor = self.state.lock().anchors.get(&p.device).copied();
            if let Some(a) = anchor {
                self.resolve(&p, a);
            }
            self.recycle(p.device, p.start);
            self.recycle(p.device, p.end);
        }
        if mark && !kept.is_empty() {
            self.mark_pending(&kept);
        }
        let mut s = self.state.lock();
        kept.extend(s.pending.drain(..));
        s.pending = kept;
    }

    /// Says in the trace (and the log) what a dump left pending: an
    /// instant on each such slice's stream, naming the work, and one on
    /// the host thread with the count and the time waited.
    fn mark_pending(&self, left: &VecDeque<Pending>) {
        let now = now_ns();
        let waited = crate::dump_wait().as_millis() as u64;
        for p in left {
            push(Event {
                name: "still pending at dump",
                cat: p.cat,
                phase: Phase::Instant,
                track: Track::stream(p.device, p.stream),
                ts_ns: now,
                args: Args::new()
                    .with("work", Arg::Str(p.name))
                    .with("waited_ms", Arg::U64(waited)),
            });
        }
        push(Event {
            name: "device work still pending at dump",
            cat: Category::Stream,
            phase: Phase::Instant,
            track: Track::current_thread(),
            ts_ns: now,
            args: Args::new()
                .with("slices", Arg::U64(left.len() as u64))
                .with("waited_ms", Arg::U64(waited)),
        });
        tracing::warn!(
            "dipu profiler: {} device slices still pending after waiting {waited} ms for the dump \
             (a stream that does not finish?); marked as pending in the trace",
            left.len()
        );
    }

    /// Pushes the device slice of `p` (and its flow arrow).
    fn resolve(&self, p: &Pending, a: Anchor) {
        // SAFETY: the anchor and `p`'s events are our own live events.
        let (from_anchor, dur) = unsafe {
            (
                self.api.event_elapsed_ms(a.event, p.start),
                self.api.event_elapsed_ms(p.start, p.end),
            )
        };
        let (Ok(from_anchor), Ok(dur)) = (from_anchor, dur) else {
            return;
        };
        let ts = a.ns as i64 + (f64::from(from_anchor) * 1e6) as i64;
        let ts = ts.max(0) as u64;
        let track = Track::stream(p.device, p.stream);
        push(Event {
            name: p.name,
            cat: p.cat,
            phase: Phase::Complete {
                dur_ns: (f64::from(dur.max(0.0)) * 1e6) as u64,
            },
            track,
            ts_ns: ts,
            args: p.args,
        });
        if let Some(flow) = p.flow {
            push(Event {
                name: "event",
                cat: Category::Stream,
                phase: flow,
                track,
                ts_ns: ts,
                args: Args::new(),
            });
        }
    }
}

impl Flush for DeviceTimes {
    fn flush(&self, deadline: Instant) {
        self.collect(Some(deadline), true);
    }
}
