//! Replays an allocation trace (`../shared/traces/README.md` format)
//! through a device allocator and measures it.

use std::collections::HashMap;
use std::ffi::c_void;
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::Stream;

use crate::DeviceAllocator;

/// One trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// `a <id> <bytes>`: allocate block `id`.
    Allocate {
        /// Block id.
        id: u64,
        /// Bytes.
        bytes: usize,
    },
    /// `f <id>`: free block `id`.
    Free {
        /// Block id.
        id: u64,
    },
}

/// A parsed trace.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The events in order.
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// Parses a trace; `#` lines are comments. Errors name the line.
    pub fn parse(text: &str) -> Result<Trace> {
        let mut events = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("trace line {}: cannot read {line:?}", n + 1),
                )
            };
            let mut words = line.split_whitespace();
            let event = match (words.next(), words.next(), words.next(), words.next()) {
                (Some("a"), Some(id), Some(bytes), None) => TraceEvent::Allocate {
                    id: id.parse().map_err(|_| bad())?,
                    bytes: bytes.parse().map_err(|_| bad())?,
                },
                (Some("f"), Some(id), None, None) => TraceEvent::Free {
                    id: id.parse().map_err(|_| bad())?,
                },
                _ => return Err(bad()),
            };
            events.push(event);
        }
        Ok(Trace { events })
    }

    /// The peak of the sum of live requested bytes.
    pub fn peak_requested(&self) -> usize {
        let (mut live, mut peak) = (HashMap::new(), 0usize);
        let mut current = 0usize;
        for e in &self.events {
            match *e {
                TraceEvent::Allocate { id, bytes } => {
                    live.insert(id, bytes);
                    current += bytes;
                    peak = peak.max(current);
                }
                TraceEvent::Free { id } => current -= live.remove(&id).unwrap_or(0),
            }
        }
        peak
    }
}

/// What a replay measured.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// Events replayed.
    pub events: usize,
    /// Peak of live requested bytes.
    pub peak_requested: usize,
    /// Peak reserved bytes.
    pub peak_reserved: u64,
    /// Segments at the end.
    pub segments: u64,
    /// Vendor allocations made.
    pub vendor_mallocs: u64,
    /// Mean time of one allocate.
    pub allocate_time: Duration,
    /// Mean time of one free.
    pub free_time: Duration,
}

impl ReplayReport {
    /// Peak reserved over peak requested: the fragmentation figure.
    pub fn ratio(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_requested.max(1) as f64
    }
}

/// Replays `trace` through `alloc`, spreading blocks round-robin over
/// `streams`; with more than one stream every third block is also used on
/// the next stream (`record_stream`), exercising deferred frees. Blocks
/// still live at the end are freed (not timed). `check` runs after every
/// event (e.g. to verify invariants); pass `|_| Ok(())` to skip.
pub fn replay(
    trace: &Trace,
    alloc: &dyn DeviceAllocator,
    streams: &[Stream],
    mut check: impl FnMut(&dyn DeviceAllocator) -> Result<()>,
) -> Result<ReplayReport> {
    assert!(!streams.is_empty(), "replay needs a stream");
    alloc.reset_peak_stats();
    let before = alloc.stats().num_device_alloc;
    let mut live: HashMap<u64, *mut c_void> = HashMap::new();
    let (mut allocs, mut frees) = (0u32, 0u32);
    let (mut alloc_time, mut free_time) = (Duration::ZERO, Duration::ZERO);
    for (i, event) in trace.events.iter().enumerate() {
        match *event {
            TraceEvent::Allocate { id, bytes } => {
                let stream = streams[i % streams.len()];
                let start = Instant::now();
                let a = alloc.allocate(bytes, stream)?;
                alloc_time += start.elapsed();
                allocs += 1;
                if streams.len() > 1 && id % 3 == 0 {
                    alloc.record_stream(a.ptr, streams[(i + 1) % streams.len()])?;
                }
                if live.insert(id, a.ptr).is_some() {
                    return Err(Error::invalid_argument(format!(
                        "trace allocates block {id} twice"
                    )));
                }
            }
            TraceEvent::Free { id } => {
                let ptr = live.remove(&id).ok_or_else(|| {
                    Error::invalid_argument(format!("trace frees unknown block {id}"))
                })?;
                let start = Instant::now();
                alloc.free(ptr)?;
                free_time += start.elapsed();
                frees += 1;
            }
        }
        check(alloc)?;
    }
    let stats = alloc.stats();
    let report = ReplayReport {
        events: trace.events.len(),
        peak_requested: trace.peak_requested(),
        peak_reserved: stats.reserved_bytes.peak,
        segments: stats.segment.current,
        vendor_mallocs: stats.num_device_alloc - before,
        allocate_time: alloc_time / allocs.max(1),
        free_time: free_time / frees.max(1),
    };
    for (_, ptr) in live {
        alloc.free(ptr)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_measures_peak() {
        let t = Trace::parse("# c\na 0 100\na 1 50\nf 0\na 2 70\n").unwrap();
        assert_eq!(t.events.len(), 4);
        assert_eq!(t.peak_requested(), 150);
        let e = Trace::parse("a 0\n").unwrap_err();
        assert!(e.message().contains("line 1"));
        assert!(Trace::parse("x 1 2\n").is_err());
    }
}
