//! Tracks: one per host thread and one per stream, each with a name.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

/// Where an event is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Track {
    /// A host thread, by the trace's own thread number.
    Thread(u32),
    /// A stream of a device, by its vendor handle (0: the default stream).
    Stream {
        /// The device.
        device: i32,
        /// The vendor's stream handle, raw.
        stream: u64,
    },
}

impl Track {
    /// The calling thread's track (named after the thread on first use).
    #[inline]
    pub fn current_thread() -> Track {
        Track::Thread(thread_number())
    }

    /// The track of `stream` on `device`.
    #[inline]
    pub fn stream(device: i32, stream: u64) -> Track {
        Track::Stream { device, stream }
    }
}

static NEXT_THREAD: AtomicU32 = AtomicU32::new(1);
/// The names of the threads seen, by thread number.
static THREAD_NAMES: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());
/// Names given to streams with [`name_stream`].
static STREAM_NAMES: Mutex<Option<HashMap<(i32, u64), String>>> = Mutex::new(None);

thread_local! {
    static THREAD: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's number in the trace, registering its name the
/// first time.
#[inline]
fn thread_number() -> u32 {
    THREAD.with(|t| match t.get() {
        0 => {
            let n = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            let name = match std::thread::current().name() {
                Some(name) => format!("{name} (thread {n})"),
                None => format!("thread {n}"),
            };
            THREAD_NAMES.lock().push((n, name));
            t.set(n);
            n
        }
        n => n,
    })
}

/// Names the track of `stream` on `device` (otherwise "stream 0x..").
pub fn name_stream(device: i32, stream: u64, name: impl Into<String>) {
    STREAM_NAMES
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert((device, stream), name.into());
}

/// The name of a thread track.
pub(crate) fn thread_name(n: u32) -> String {
    THREAD_NAMES
        .lock()
        .iter()
        .find(|(m, _)| *m == n)
        .map_or_else(|| format!("thread {n}"), |(_, name)| name.clone())
}

/// The name of a stream track.
pub(crate) fn stream_name(device: i32, stream: u64) -> String {
    if let Some(name) = STREAM_NAMES
        .lock()
        .as_ref()
        .and_then(|m| m.get(&(device, stream)))
    {
        return name.clone();
    }
    match stream {
        0 => format!("device {device} default stream"),
        s => format!("device {device} stream {s:#x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_numbers_and_their_names() {
        let here = Track::current_thread();
        assert_eq!(here, Track::current_thread());
        let there = std::thread::Builder::new()
            .name("worker-x".into())
            .spawn(Track::current_thread)
            .unwrap()
            .join()
            .unwrap();
        assert_ne!(here, there);
        let Track::Thread(n) = there else {
            panic!("a thread track")
        };
        assert!(thread_name(n).starts_with("worker-x"), "{}", thread_name(n));
    }

    #[test]
    fn streams_are_named_by_default_or_as_told() {
        assert_eq!(stream_name(3, 0), "device 3 default stream");
        assert_eq!(stream_name(3, 0x20), "device 3 stream 0x20");
        name_stream(3, 0x20, "compute");
        assert_eq!(stream_name(3, 0x20), "compute");
    }
}
