//! The runtime trace (`DIPU_PROFILE`): start, stop, clear and dump it.

use std::ffi::c_char;

use dipu_runtime::profiler as prof;
use dipu_runtime::Error;

use crate::handles::c_str;
use crate::status::{dipu_status, ffi_boundary, write_out};

/// Starts recording the runtime trace (as DIPU_PROFILE=path does when the
/// runtime is created): vendor calls with host and device times,
/// allocator events, stream and event operations, collectives and host
/// callbacks, kept in a ring of the last DIPU_PROFILE_EVENTS events
/// (default 100000). Events already in the ring are kept.
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_start() -> dipu_status {
    ffi_boundary!("dipu_profiler_start", {
        prof::start();
        Ok(())
    })
}

/// Stops recording; the ring keeps its events for dipu_profiler_dump.
/// Device times of work queued while recording are still collected.
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_stop() -> dipu_status {
    ffi_boundary!("dipu_profiler_stop", {
        prof::stop();
        Ok(())
    })
}

/// Forgets every recorded event (recording goes on if it was on).
/// Errors: none besides DIPU_STATUS_INTERNAL. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_clear() -> dipu_status {
    ffi_boundary!("dipu_profiler_clear", {
        prof::clear();
        Ok(())
    })
}

/// Keeps at most the last `events` events (the oldest are dropped now if
/// more are held), as DIPU_PROFILE_EVENTS does.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for 0. Thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_profiler_set_capacity(events: usize) -> dipu_status {
    ffi_boundary!("dipu_profiler_set_capacity", { prof::set_capacity(events) })
}

/// Writes the recorded events to the file `path` (created or replaced) in
/// Chrome's trace event format, which chrome://tracing and Perfetto open,
/// after waiting for the device times still pending, at most 5 s in all:
/// work still queued then (a stream that never finishes) is marked in the
/// trace as `still pending at dump` instead. The ring keeps the events.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL or non-UTF-8 path or a
/// file that cannot be written (the message says why). Thread-safe; needs
/// no runtime.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_profiler_dump(path: *const c_char) -> dipu_status {
    ffi_boundary!("dipu_profiler_dump", {
        // SAFETY: NULL or NUL-terminated by the caller's contract.
        let path = unsafe { c_str(path, "path")? };
        prof::dump(path)
            .map(drop)
            .map_err(|e| Error::invalid_argument(format!("cannot write the trace: {e}")))
    })
}

/// Stores in `*count` how many events the ring holds now.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `count`. Thread-safe;
/// needs no runtime.
///
/// # Safety
/// `count` must be NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_profiler_events(count: *mut usize) -> dipu_status {
    ffi_boundary!("dipu_profiler_events", {
        // SAFETY: NULL or valid for writing by the caller's contract.
        unsafe { write_out(count, "count", prof::events()) }
    })
}

/// One recorded event as dipu_profiler_read gives it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct dipu_trace_event {
    /// What happened ("malloc", "allocate", "all_reduce"...); a string
    /// that stays valid for the rest of the process.
    pub name: *const c_char,
    /// Which part of the runtime: "vendor", "device", "allocator",
    /// "stream", "comm" or "callback"; valid for the rest of the process.
    pub category: *const c_char,
    /// 0 a slice, 1 an instant, 2 the start of flow arrow `flow_id`, 3 its end.
    pub kind: i32,
    /// The device of a stream track; -1 for a host thread's track.
    pub device: i32,
    /// The track: the trace's thread number, or the vendor stream handle.
    pub track: u64,
    /// Start, in dipu_profiler_now_ns's clock.
    pub ts_ns: u64,
    /// Duration of a slice (0 otherwise).
    pub dur_ns: u64,
    /// The flow arrow of kinds 2 and 3 (0 otherwise).
    pub flow_id: u64,
}

/// A NUL-terminated copy of `s`, made once per distinct string and kept
/// for the rest of the process (event names are a small fixed set).
fn c_name(s: &'static str) -> *const c_char {
    use std::collections::HashMap;
    use std::ffi::CString;
    static NAMES: parking_lot::Mutex<Option<HashMap<&'static str, &'static std::ffi::CStr>>> =
        parking_lot::Mutex::new(None);
    let mut names = NAMES.lock();
    let names = names.get_or_insert_with(HashMap::new);
    let c = names.entry(s).or_insert_with(|| {
        let owned = CString::new(s.replace('\0', " ")).unwrap_or_default();
        Box::leak(owned.into_boxed_c_str())
    });
    c.as_ptr()
}

fn to_c(e: &prof::Event) -> dipu_trace_event {
    let (kind, dur_ns, flow_id) = match e.phase {
        prof::Phase::Complete { dur_ns } => (0, dur_ns, 0),
        prof::Phase::Instant => (1, 0, 0),
        prof::Phase::FlowStart(id) => (2, 0, id),
        prof::Phase::FlowEnd(id) => (3, 0, id),
    };
    let (device, track) = match e.track {
        prof::Track::Thread(n) => (-1, u64::from(n)),
        prof::Track::Stream { device, stream } => (device, stream),
    };
    dipu_trace_event {
        name: c_name(e.name),
        category: c_name(e.cat.as_str()),
        kind,
        device,
        track,
        ts_ns: e.ts_ns,
        dur_ns,
        flow_id,
    }
}

/// Copies up to `capacity` of the recorded events (oldest first, after
/// waiting for the device times still pending) from the `skip`-th on into
/// `out`, and stores in `*count` how many it copied. The ring keeps them.
/// For frameworks that put the runtime's events into their own traces.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `count`, or a NULL
/// `out` with a `capacity` above 0. Thread-safe; needs no runtime.
///
/// # Safety
/// `out` must be NULL or valid for writing `capacity` elements; `count`
/// NULL or valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_profiler_read(
    skip: usize,
    out: *mut dipu_trace_event,
    capacity: usize,
    count: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_profiler_read", {
        crate::status::non_null(count, "count")?;
        if capacity > 0 {
            crate::status::non_null(out, "out")?;
        }
        let events = prof::snapshot();
        let mut n = 0;
        for (i, e) in events.iter().skip(skip).take(capacity).enumerate() {
            // SAFETY: `i < capacity`, and `out` is valid for `capacity`
            // elements by the caller's contract.
            unsafe { out.add(i).write(to_c(e)) };
            n = i + 1;
        }
        // SAFETY: not NULL (checked), valid by the caller's contract.
        unsafe { write_out(count, "count", n) }
    })
}

/// Stores in `*ns` the trace clock's time now (nanoseconds since its
/// epoch, the first use in the process): the clock of ts_ns.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `ns`. Thread-safe.
///
/// # Safety
/// `ns` must be NULL or valid for writing a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_profiler_now_ns(ns: *mut u64) -> dipu_status {
    ffi_boundary!("dipu_profiler_now_ns", {
        // SAFETY: NULL or valid for writing by the caller's contract.
        unsafe { write_out(ns, "ns", prof::now_ns()) }
    })
}
