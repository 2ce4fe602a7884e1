//! Memory history: the last N allocation, free and segment events of each
//! device (`DIPU_MEM_HISTORY=N`), with a short native stack per event when
//! asked (`DIPU_MEM_HISTORY_STACKS=1`) and the framework's frames (Python's,
//! through a [`FrameSource`]) when set, and snapshots of it in the pickle
//! layout PyTorch's `torch.cuda._memory_viz` reads.
//!
//! [`History`] holds the settings and one log per device; [`History::wrap`]
//! puts a recording wrapper around a device allocator (one atomic load per
//! call while history is off). [`MemorySnapshot`] is segments, blocks and
//! the logs at one moment, written and read by [`MemorySnapshot::to_pickle`]
//! and [`MemorySnapshot::from_pickle`].

mod external;
mod model;
mod pickle;
mod stacks;
mod traced;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::{Mutex, RwLock};

use crate::{DeviceAllocator, SegmentMap};

pub use external::FrameSource;
pub use model::{Action, Block, Frame, MemorySnapshot, Segment, TraceEntry};

use external::Captured;

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
    /// Whether events take the frame source's frames.
    framework: AtomicBool,
    source: RwLock<Option<Arc<dyn FrameSource>>>,
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
            .field("framework", &self.framework.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Which stacks recorded events carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stacks {
    /// The native stack (the runtime's and its caller's frames).
    pub native: bool,
    /// The frame source's frames (outer to the native ones).
    pub framework: bool,
}

/// What an event's stacks are, captured before the log is locked.
#[derive(Clone, Default)]
pub(crate) struct Context {
    native: Option<Arc<stacks::Stack>>,
    framework: Option<Arc<Captured>>,
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
    pub(crate) context: Context,
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
            framework: AtomicBool::new(false),
            source: RwLock::new(None),
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
    /// with native stacks when `stacks`; 0 stops recording (what was
    /// recorded is kept for snapshots). A smaller `max_entries` drops the
    /// oldest. Returns the `max_entries` it replaced.
    pub fn record(&self, max_entries: usize, stacks: bool) -> usize {
        let kinds = Stacks {
            native: stacks,
            framework: false,
        };
        self.record_stacks(max_entries, kinds)
            .expect("native stacks need no frame source")
    }

    /// [`History::record`] with the stacks `stacks` says. Framework frames
    /// need a frame source ([`History::set_frame_source`]): without one it
    /// is an `InvalidArgument` error and nothing changes.
    pub fn record_stacks(&self, max_entries: usize, stacks: Stacks) -> Result<usize> {
        if stacks.framework && self.source.read().is_none() {
            return Err(Error::invalid_argument(
                "framework stacks asked for, but no frame source is set",
            ));
        }
        let was_on = self.max_entries() > 0;
        let mut dropped = Vec::new();
        for log in self.logs.lock().iter() {
            let mut st = log.state.lock();
            if !was_on && max_entries > 0 {
                // Segments made while off were never seen: know them now
                // without inventing events for them.
                st.known = log.current_segments();
            }
            while max_entries > 0 && st.entries.len() > max_entries {
                dropped.extend(st.entries.pop_front());
            }
        }
        // (Released here, outside the logs' locks: a frame source's
        // release may wait for the framework's own lock.)
        drop(dropped);
        self.stacks.store(stacks.native, Ordering::Relaxed);
        self.framework.store(stacks.framework, Ordering::Relaxed);
        Ok(self.max_entries.swap(max_entries, Ordering::AcqRel))
    }

    /// Sets (or, with `None`, removes) where framework frames come from.
    /// Removing it stops framework frames; events already recorded keep
    /// theirs (and the source they came from).
    pub fn set_frame_source(&self, source: Option<Arc<dyn FrameSource>>) {
        if source.is_none() {
            self.framework.store(false, Ordering::Relaxed);
        }
        *self.source.write() = source;
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

    /// The stacks of an event happening now, as the settings ask.
    #[inline(never)]
    pub(crate) fn capture(&self) -> Context {
        let native = self
            .stacks
            .load(Ordering::Relaxed)
            .then(|| Arc::new(stacks::Stack::capture()));
        let framework = if self.framework.load(Ordering::Relaxed) {
            let source = self.source.read().clone();
            source.and_then(|s| Captured::capture(&s))
        } else {
            None
        };
        Context { native, framework }
    }

    /// Appends an event to `log` (stacks captured here when asked).
    pub(crate) fn push(
        &self,
        log: &DeviceLog,
        action: Action,
        addr: usize,
        size: usize,
        stream: u32,
    ) {
        if self.max_entries() == 0 {
            return;
        }
        let context = self.capture();
        self.push_with(log, action, addr, size, stream, context);
    }

    /// Appends an event whose stacks were captured already.
    pub(crate) fn push_with(
        &self,
        log: &DeviceLog,
        action: Action,
        addr: usize,
        size: usize,
        stream: u32,
        context: Context,
    ) {
        let max = self.max_entries.load(Ordering::Acquire);
        if max == 0 {
            return;
        }
        let entry = Recorded {
            action,
            addr,
            size,
            stream,
            time_us: self.now_us(),
            context,
        };
        let mut dropped = Vec::new();
        {
            let mut st = log.state.lock();
            while st.entries.len() >= max {
                dropped.extend(st.entries.pop_front());
            }
            st.entries.push_back(entry);
        }
        // Released outside the log's lock (see `record_stacks`).
        drop(dropped);
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

impl Context {
    /// The event's frames, innermost first: the native stack's (names
    /// cached by address in `cache`), then the framework's.
    pub(crate) fn frames(
        &self,
        cache: &mut std::collections::HashMap<usize, Vec<Frame>>,
    ) -> Vec<Frame> {
        let mut frames = self
            .native
            .as_ref()
            .map_or_else(Vec::new, |s| s.resolve(cache));
        if let Some(f) = &self.framework {
            frames.extend(f.resolve());
        }
        frames
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

#[cfg(all(test, not(loom)))]
mod external_tests;
