//! `dipu_event`: an opaque handle to an event, looked up in a registry of
//! live events on every use, so a destroyed or made-up handle is an error.

use std::collections::HashMap;
use std::sync::Arc;

use dipu_runtime::{DeviceContext, Error, Event, EventFlag, Result, Stream};
use parking_lot::Mutex;

use crate::status::{dipu_status, ffi_boundary, non_null, write_out};
use crate::stream::{self, dipu_stream};

/// An event: a marker in a stream's work (opaque; create it with
/// dipu_event_create, destroy it with dipu_event_destroy).
pub struct dipu_event {
    /// The context the event belongs to (its runtime's).
    ctx: &'static DeviceContext,
    event: Mutex<Event>,
}

/// Live events, by the address handed to C.
static EVENTS: Mutex<Option<HashMap<usize, Arc<dipu_event>>>> = Mutex::new(None);

/// The live event `handle` names, or `InvalidArgument`.
fn lookup(handle: *const dipu_event, what: &str) -> Result<Arc<dipu_event>> {
    non_null(handle, what)?;
    EVENTS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&(handle as usize)).cloned())
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{what} {handle:p} is not a live event (never created, or already destroyed)"
            ))
        })
}

/// `stream` in the current runtime, checked to be of `event`'s runtime.
fn stream_for(event: &dipu_event, s: dipu_stream) -> Result<Stream> {
    let rt = dipu_runtime::get()?;
    let stream = stream::from_c(&rt, s)?;
    if !std::ptr::eq(event.ctx, stream.context()) {
        return Err(Error::invalid_argument(
            "the event was created before dipu_shutdown, by another runtime than the stream's",
        ));
    }
    Ok(stream)
}

/// Creates an event and stores it in `*out`; `timing` non-zero makes it
/// record timestamps for dipu_event_elapsed_ms. The vendor event is made
/// on its first record, on that stream's device. Destroy it with
/// dipu_event_destroy.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_event_create(timing: i32, out: *mut *mut dipu_event) -> dipu_status {
    ffi_boundary!("dipu_event_create", {
        non_null(out, "out")?;
        let ctx = dipu_runtime::get()?.context();
        let flag = if timing != 0 {
            EventFlag::Timing
        } else {
            EventFlag::NoTiming
        };
        let event = Arc::new(dipu_event {
            ctx,
            event: Mutex::new(Event::new(ctx, flag)),
        });
        let handle = Arc::as_ptr(&event).cast_mut();
        EVENTS
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(handle as usize, event);
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", handle) }
    })
}

/// Destroys `event` (NULL is a no-op). A call still using it on another
/// thread finishes first. Errors: DIPU_STATUS_INVALID_ARGUMENT for a
/// handle that is not a live event (a second destroy, for one).
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_event_destroy(event: *mut dipu_event) -> dipu_status {
    ffi_boundary!("dipu_event_destroy", {
        if event.is_null() {
            return Ok(());
        }
        let removed = EVENTS
            .lock()
            .as_mut()
            .and_then(|m| m.remove(&(event as usize)));
        match removed {
            Some(_) => Ok(()),
            None => Err(Error::invalid_argument(format!(
                "{event:p} is not a live event (never created, or already destroyed)"
            ))),
        }
    })
}

/// Captures the work queued on `stream` so far in `event`. Later records
/// must use streams of the same device as the first.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown event or stream or
/// a stream of another device, DIPU_STATUS_INVALID_DEVICE. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_event_record(event: *mut dipu_event, stream: dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_event_record", {
        let e = lookup(event, "event")?;
        let stream = stream_for(&e, stream)?;
        let result = e.event.lock().record(&stream);
        result
    })
}

/// Makes later work on `stream` wait for `event`'s last record; the host
/// does not wait (nothing to wait for if never recorded).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown event or stream.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_event_block(event: *mut dipu_event, stream: dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_event_block", {
        let e = lookup(event, "event")?;
        let stream = stream_for(&e, stream)?;
        let result = e.event.lock().block(&stream);
        result
    })
}

/// Same as dipu_event_block(event, stream): later work on `stream` waits
/// for `event`'s last record; the host does not wait.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown event or stream.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_stream_wait_event(
    stream: dipu_stream,
    event: *mut dipu_event,
) -> dipu_status {
    ffi_boundary!("dipu_stream_wait_event", {
        let e = lookup(event, "event")?;
        let stream = stream_for(&e, stream)?;
        let result = e.event.lock().block(&stream);
        result
    })
}

/// Stores 1 in `*done` if `event`'s last record is done (or it was never
/// recorded), else 0.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown event or a NULL
/// `done`. Thread-safe.
///
/// # Safety
/// `done` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_event_query(event: *mut dipu_event, done: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_event_query", {
        non_null(done, "done")?;
        let e = lookup(event, "event")?;
        let finished = e.event.lock().query()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(done, "done", finished.into()) }
    })
}

/// Waits on the host until `event`'s last record is done.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown event. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_event_synchronize(event: *mut dipu_event) -> dipu_status {
    ffi_boundary!("dipu_event_synchronize", {
        let e = lookup(event, "event")?;
        let result = e.event.lock().synchronize();
        result
    })
}

/// Stores the milliseconds from `start` to `end` in `*out`. Both must be
/// timing events (created with timing = 1), recorded, and complete.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for unknown or non-timing or
/// unrecorded events or a NULL `out`, DIPU_STATUS_NOT_READY while pending.
/// Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a float.
#[no_mangle]
pub unsafe extern "C" fn dipu_event_elapsed_ms(
    start: *mut dipu_event,
    end: *mut dipu_event,
    out: *mut f32,
) -> dipu_status {
    ffi_boundary!("dipu_event_elapsed_ms", {
        non_null(out, "out")?;
        let s = lookup(start, "start")?;
        let e = lookup(end, "end")?;
        let ms = if Arc::ptr_eq(&s, &e) {
            let one = s.event.lock();
            one.elapsed_time(&one)?
        } else {
            // Lock in address order, so that two threads timing (a, b) and
            // (b, a) at once cannot deadlock.
            let (first, second) = if (start as usize) < (end as usize) {
                (&s, &e)
            } else {
                (&e, &s)
            };
            let first = first.event.lock();
            let second = second.event.lock();
            if (start as usize) < (end as usize) {
                first.elapsed_time(&second)?
            } else {
                second.elapsed_time(&first)?
            }
        };
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", ms) }
    })
}
