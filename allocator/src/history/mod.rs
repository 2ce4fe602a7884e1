//! Memory history: the last N allocation, free and segment events of each
//! device (`DIPU_MEM_HISTORY=N`), with a short stack per event when asked
//! (`DIPU_MEM_HISTORY_STACKS=1`), and snapshots of it in the pickle layout
//! PyTorch's `torch.cuda._memory_viz` reads.
//!
//! [`History`] holds the settings and one log per device; [`History::wrap`]
//! puts a recording wrapper around a device allocator (one atomic load per
//! call while history is off). [`MemorySnapshot`] is segments, blocks and
//! the logs at one moment, written and read by [`MemorySnapshot::to_pickle`]
//! and [`MemorySnapshot::from_pickle`].

mod model;
mod pickle;
mod stacks;
mod traced;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use crate::{DeviceAllocator, SegmentMap};

pub use model::{Action, Block, Frame, MemorySnapshot, Segment, TraceEntry};

/// `DIPU_MEM_HISTORY=N`: record the last N events of each device (0 or
/// unset: off).
pub const ENV_MEM_HISTORY: &str = "DIPU_MEM_HISTORY";
/// `DIPU_MEM_HISTORY_STACKS=1`: record a short stack with each event.
pub const ENV_MEM_HISTORY_STACKS: &str = "DIPU_MEM_HISTORY_STACKS";

/// The most frames a recorded stack keeps.
pub const MAX_FRAMES: usize = 24;

/// The settings and per-device logs of the memory history of one set of
/// device allocators.
pub struct History {
    /// Events kept per device; 0 is off.
    max_entries: AtomicUsize,
    stacks: AtomicBool,
    logs: Mutex<Vec<Arc<DeviceLog>>>,
    /// Microseconds since the Unix epoch at `start`.
    epoch_us: u64,
    start: Instant,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("max_entries", &self.max_entries())
            .field("stacks", &self.stacks.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One device's log: its ring of events and the segments it has seen.
pub(crate) struct DeviceLog {
    pub(crate) device: i32,
    pub(crate) segments: Arc<SegmentMap>,
    pub(crate) state: Mutex<LogState>,
}

#[derive(Default)]
pub(crate) struct LogState {
    pub(crate) entries: VecDeque<Recorded>,
    /// Segment bases (and sizes) known to exist, to notice new and returned ones.
    pub(crate) known: std::collections::BTreeMap<usize, usize>,
}

/// An event as recorded (its stack unresolved).
pub(crate) struct Recorded {
    pub(crate) action: Action,
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) stream: u32,
    pub(crate) time_us: u64,
    pub(crate) stack: Option<stacks::Stack>,
}

impl History {
    /// A history, off.
    pub fn new() -> Arc<History> {
        let epoch_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Arc::new(History {
            max_entries: AtomicUsize::new(0),
            stacks: AtomicBool::new(false),
            logs: Mutex::new(Vec::new()),
            epoch_us,
            start: Instant::now(),
        })
    }

    /// A history set by `DIPU_MEM_HISTORY` and `DIPU_MEM_HISTORY_STACKS`;
    /// a value that is not a number (or 0/1 for stacks) is an error.
    pub fn from_env() -> Result<Arc<History>> {
        let history = History::new();
        let max = match std::env::var(ENV_MEM_HISTORY) {
            Ok(v) => parse_count(ENV_MEM_HISTORY, &v)?,
            Err(_) => 0,
        };
        let stacks = match std::env::var(ENV_MEM_HISTORY_STACKS) {
            Ok(v) => match v.trim() {
                "" | "0" | "false" | "False" => false,
                "1" | "true" | "True" => true,
                other => {
                    return Err(Error::new(
                        ErrorKind::InvalidConfig,
                        format!("{ENV_MEM_HISTORY_STACKS}={other:?}: expected 0 or 1"),
                    ))
                }
            },
            Err(_) => false,
        };
        let _ = history.record(max, stacks);
        Ok(history)
    }

    /// Records the last `max_entries` events of each device from now on,
    /// with stacks when `stacks`; 0 stops recording (what was recorded is
    /// kept for snapshots). A smaller `max_entries` drops the oldest.
    /// Returns the `max_entries` it replaced.
    pub fn record(&self, max_entries: usize, stacks: bool) -> usize {
        let was_on = self.max_entries() > 0;
        for log in self.logs.lock().iter() {
            let mut st = log.state.lock();
            if !was_on && max_entries > 0 {
                // Segments made while off were never seen: know them now
                // without inventing events for them.
                st.known = log.current_segments();
            }
            while max_entries > 0 && st.entries.len() > max_entries {
                st.entries.pop_front();
            }
        }
        self.stacks.store(stacks, Ordering::Relaxed);
        self.max_entries.swap(max_entries, Ordering::AcqRel)
    }

    /// Events kept per device (0: off).
    pub fn max_entries(&self) -> usize {
        self.max_entries.load(Ordering::Relaxed)
    }

    /// `inner` (the allocator of `device`, whose segments `segments` records)
    /// with its events recorded in this history.
    pub fn wrap(
        self: &Arc<Self>,
        device: i32,
        inner: Box<dyn DeviceAllocator>,
        segments: Arc<SegmentMap>,
    ) -> Box<dyn DeviceAllocator> {
        let log = Arc::new(DeviceLog {
            device,
            segments,
            state: Mutex::new(LogState::default()),
        });
        if self.max_entries() > 0 {
            log.state.lock().known = log.current_segments();
        }
        self.logs.lock().push(Arc::clone(&log));
        Box::new(traced::Traced::new(Arc::clone(self), log, inner))
    }

    /// Segments and blocks of `allocators` now, with every device's log
    /// (stacks resolved).
    pub fn snapshot<'a>(
        &self,
        allocators: impl IntoIterator<Item = &'a dyn DeviceAllocator>,
    ) -> MemorySnapshot {
        let logs: Vec<Arc<DeviceLog>> = self.logs.lock().clone();
        for log in &logs {
            self.reconcile(log);
        }
        model::build(allocators, &logs)
    }

    fn now_us(&self) -> u64 {
        self.epoch_us + self.start.elapsed().as_micros() as u64
    }

    /// Appends an event to `log` (stack captured here when asked).
    pub(crate) fn push(
        &self,
        log: &DeviceLog,
        action: Action,
        addr: usize,
        size: usize,
        stream: u32,
    ) {
        let max = self.max_entries.load(Ordering::Acquire);
        if max == 0 {
            return;
        }
        let stack = self
            .stacks
            .load(Ordering::Relaxed)
            .then(stacks::Stack::capture);
        let entry = Recorded {
            action,
            addr,
            size,
            stream,
            time_us: self.now_us(),
            stack,
        };
        let mut st = log.state.lock();
        while st.entries.len() >= max {
            st.entries.pop_front();
        }
        st.entries.push_back(entry);
    }

    /// Records the segments of `log`'s device that appeared or went back to
    /// the vendor since it last looked.
    pub(crate) fn reconcile(&self, log: &DeviceLog) {
        if self.max_entries() == 0 {
            return;
        }
        let now = log.current_segments();
        let (gone, new) = {
            let st = log.state.lock();
            let gone: Vec<(usize, usize)> = st
                .known
                .iter()
                .filter(|(b, s)| now.get(b) != Some(s))
                .map(|(b, s)| (*b, *s))
                .collect();
            let new: Vec<(usize, usize)> = now
                .iter()
                .filter(|(b, s)| st.known.get(b) != Some(s))
                .map(|(b, s)| (*b, *s))
                .collect();
            (gone, new)
        };
        for (base, size) in gone {
            self.push(log, Action::SegmentFree, base, size, 0);
        }
        for (base, size) in new {
            self.push(log, Action::SegmentAlloc, base, size, 0);
        }
        log.state.lock().known = now;
    }
}

impl DeviceLog {
    /// The device's segments now, by base.
    fn current_segments(&self) -> std::collections::BTreeMap<usize, usize> {
        self.segments
            .ranges()
            .into_iter()
            .filter(|r| r.device == self.device)
            .map(|r| (r.base, r.size))
            .collect()
    }

    /// Whether the segment holding `addr` is one this log knows.
    pub(crate) fn knows_segment_of(&self, addr: usize) -> bool {
        match self.segments.find(addr) {
            Some(r) => self.state.lock().known.get(&r.base) == Some(&r.size),
            None => true,
        }
    }
}

fn parse_count(name: &str, value: &str) -> Result<usize> {
    value.trim().parse::<usize>().map_err(|_| {
        Error::new(
            ErrorKind::InvalidConfig,
            format!("{name}={value:?}: expected a number of events (0 for off)"),
        )
    })
}

#[cfg(all(test, not(loom)))]
mod tests;
