//! The bounded ring of recorded events, and switching recording on and off.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use dipu_deviceapi::{Error, Result};
use parking_lot::Mutex;

use crate::{Event, ENABLED};

/// Events kept when `DIPU_PROFILE_EVENTS` does not say: the last 100 000.
pub const DEFAULT_CAPACITY: usize = 100_000;

struct Ring {
    events: VecDeque<Event>,
    capacity: usize,
    /// Events pushed out of the ring since the last clear.
    dropped: u64,
}

static RING: Mutex<Ring> = Mutex::new(Ring {
    events: VecDeque::new(),
    capacity: DEFAULT_CAPACITY,
    dropped: 0,
});

/// Something holding events not yet in the ring (device times waiting for
/// their events): asked to hand them over before a dump.
pub(crate) trait Flush: Send + Sync {
    /// Records what it holds, waiting for the device until `deadline`
    /// (and marking in the trace what was still pending then).
    fn flush(&self, deadline: Instant);
}

static FLUSHERS: Mutex<Vec<Weak<dyn Flush>>> = Mutex::new(Vec::new());

/// Registers `f` to be flushed before each snapshot.
pub(crate) fn register_flusher(f: &Arc<dyn Flush>) {
    let mut list = FLUSHERS.lock();
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(f));
}

/// The longest a dump waits, in all, for device work still queued, in
/// milliseconds ([`set_dump_wait`]).
static DUMP_WAIT_MS: AtomicU64 = AtomicU64::new(DEFAULT_DUMP_WAIT.as_millis() as u64);

/// How long a dump waits by default for device work still queued (5 s).
pub const DEFAULT_DUMP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sets the longest a dump ([`crate::dump`], [`crate::to_json`],
/// [`snapshot`], `dipu_profiler_dump`) waits, in all, for the device work
/// it has timing events for: past it the dump writes what completed and
/// marks the rest as pending in the trace (a stream that never finishes
/// cannot hang it). Default [`DEFAULT_DUMP_WAIT`].
pub fn set_dump_wait(wait: std::time::Duration) {
    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    DUMP_WAIT_MS.store(ms, Ordering::Relaxed);
}

/// The longest a dump waits for device work ([`set_dump_wait`]).
pub fn dump_wait() -> std::time::Duration {
    std::time::Duration::from_millis(DUMP_WAIT_MS.load(Ordering::Relaxed))
}

/// Hands over every flusher's events (waiting for the device, at most
/// [`dump_wait`] in all).
pub(crate) fn flush_all() {
    let list: Vec<_> = FLUSHERS.lock().iter().filter_map(Weak::upgrade).collect();
    let deadline = Instant::now() + dump_wait();
    for f in list {
        f.flush(deadline);
    }
}

/// Starts recording (keeping what the ring holds).
pub fn start() {
    let was_on = ENABLED.swap(true, Ordering::Relaxed);
    dipu_deviceapi::observe::switched_global(was_on, true);
}

/// Stops recording; the ring keeps its events for [`crate::dump`].
pub fn stop() {
    let was_on = ENABLED.swap(false, Ordering::Relaxed);
    dipu_deviceapi::observe::switched_global(was_on, false);
}

/// Forgets every recorded event.
pub fn clear() {
    let mut r = RING.lock();
    r.events = VecDeque::new();
    r.dropped = 0;
}

/// Keeps at most the last `capacity` events (dropping the oldest now if
/// more are held). Zero is an `InvalidArgument` error.
pub fn set_capacity(capacity: usize) -> Result<()> {
    if capacity == 0 {
        return Err(Error::invalid_argument(
            "the trace must keep at least one event",
        ));
    }
    let mut r = RING.lock();
    r.capacity = capacity;
    while r.events.len() > capacity {
        r.events.pop_front();
        r.dropped += 1;
    }
    Ok(())
}

/// Adds `event` to the ring when recording (the oldest event makes way
/// when the ring is full).
#[inline]
pub fn record(event: Event) {
    if crate::enabled() {
        push(event);
    }
}

/// Adds `event` whether recording or not (device times of work queued
/// while recording arrive later).
pub(crate) fn push(event: Event) {
    let mut r = RING.lock();
    if r.events.len() >= r.capacity {
        r.events.pop_front();
        r.dropped += 1;
    }
    r.events.push_back(event);
}

/// How many events the ring holds.
pub fn events() -> usize {
    RING.lock().events.len()
}

/// How many events were pushed out of the full ring since the last clear.
pub fn dropped() -> u64 {
    RING.lock().dropped
}

/// A copy of the ring, oldest first, after the device times still
/// pending have been collected.
pub fn snapshot() -> Vec<Event> {
    flush_all();
    RING.lock().events.iter().copied().collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{Args, Category, Phase, Track};

    /// Serialises the tests that use the process-wide ring.
    pub(crate) static LOCK: Mutex<()> = Mutex::new(());

    pub(crate) fn ev(name: &'static str, ts: u64) -> Event {
        Event {
            name,
            cat: Category::Allocator,
            phase: Phase::Instant,
            track: Track::Thread(1),
            ts_ns: ts,
            args: Args::new(),
        }
    }

    #[test]
    fn records_only_when_on_and_keeps_the_last_n() {
        let _l = LOCK.lock();
        clear();
        set_capacity(3).unwrap();
        stop();
        record(ev("off", 0));
        assert_eq!(events(), 0);
        start();
        for ts in 0..5 {
            record(ev("on", ts));
        }
        stop();
        let kept: Vec<u64> = snapshot().iter().map(|e| e.ts_ns).collect();
        assert_eq!(kept, [2, 3, 4]);
        assert_eq!(dropped(), 2);
        set_capacity(1).unwrap();
        assert_eq!(snapshot()[0].ts_ns, 4);
        assert!(set_capacity(0).is_err());
        clear();
        assert_eq!((events(), dropped()), (0, 0));
        set_capacity(DEFAULT_CAPACITY).unwrap();
    }
}
