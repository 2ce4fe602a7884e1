//! Events. An OpenCL event is the single-use result of one enqueue, while
//! a stream event is recorded again and again: the vendor's event holds its
//! latest record, a marker, and a new record replaces it.

use std::collections::HashMap;
use std::sync::Arc;

use dipu_deviceapi::{Error, ErrorKind, EventHandle, Result, StreamHandle};
use parking_lot::Mutex;

use crate::cl::*;
use crate::device::current_device;
use crate::errors::{error, failed};
use crate::handles::{release_event, retain_event, Ev};
use crate::init::Platform;
use crate::status::CL_PROFILING_INFO_NOT_AVAILABLE;
use crate::OpenClVendor;

/// One event: its device, whether it is timed, and its latest record.
#[derive(Debug)]
pub(crate) struct Event {
    device: i32,
    timing: bool,
    /// The marker of the latest record; `None` before the first.
    last: Mutex<Option<Ev>>,
}

/// The live events by handle: a destroyed or made-up handle is an error,
/// never a dereference.
#[derive(Debug, Default)]
pub(crate) struct Events {
    live: Mutex<HashMap<u64, Arc<Event>>>,
}

impl Events {
    /// The event of `handle`, or `InvalidArgument`.
    fn get(&self, handle: EventHandle) -> Result<Arc<Event>> {
        self.live
            .lock()
            .get(&handle.as_raw())
            .cloned()
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                "{handle:?} is not a live event of the OpenCL vendor (never created, or destroyed)"
            ))
            })
    }

    /// Releases every event's record (the vendor's end).
    pub(crate) fn release_all(&self, cl: &Cl) {
        for (_, event) in self.live.lock().drain() {
            if let Some(ev) = event.last.lock().take() {
                release_event(cl, ev);
            }
        }
    }
}

impl Platform {
    /// The marker of `event`'s latest record, retained (`None`: never recorded).
    fn latest(&self, event: &Event) -> Result<Option<crate::handles::OwnedEv<'_>>> {
        let last = event.last.lock();
        last.map(|ev| retain_event(&self.cl, ev)).transpose()
    }

    /// `Ok(true)` when `ev` is done, `Ok(false)` while it is pending, the
    /// failure of `what` when its work failed.
    fn done(&self, ev: Ev, what: &dyn Fn() -> String) -> Result<bool> {
        let status = self.cl.event_status(ev)?;
        if status < 0 {
            return Err(failed(status, &what()));
        }
        Ok(status == CL_COMPLETE)
    }
}

impl OpenClVendor {
    /// A new event on the current device.
    pub(crate) fn create_event(&self, timing: bool) -> Result<EventHandle> {
        let p = self.platform()?;
        let event = Arc::new(Event {
            device: current_device(),
            timing,
            last: Mutex::new(None),
        });
        let handle = EventHandle::from_raw(Arc::as_ptr(&event) as usize as u64);
        p.events.live.lock().insert(handle.as_raw(), event);
        Ok(handle)
    }

    /// Destroys an event; a pending record still completes.
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn destroy_event(&self, event: EventHandle) -> Result<()> {
        let p = self.platform()?;
        let removed = p.events.live.lock().remove(&event.as_raw());
        let event = removed.ok_or_else(|| {
            Error::invalid_argument(format!(
                "event_destroy({event:?}): not a live event of the OpenCL vendor"
            ))
        })?;
        if let Some(ev) = event.last.lock().take() {
            release_event(&self.cl, ev);
        }
        Ok(())
    }

    /// A marker on `stream`'s queue, flushed (so another queue may wait for
    /// it), replacing the event's previous record. The stream must be of
    /// the event's device.
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        let p = self.platform()?;
        let e = p.events.get(event)?;
        let (q, device) = p.queue(stream)?;
        if device != e.device {
            return Err(Error::invalid_argument(format!(
                "event_record({event:?}, {stream:?}): the event belongs to device {} and the                  stream to device {device}",
                e.device
            )));
        }
        let marker = p.marker(q)?;
        p.flush(q)?;
        let old = e.last.lock().replace(marker.into_inner());
        if let Some(old) = old {
            release_event(&self.cl, old);
        }
        Ok(())
    }

    /// Whether the latest record is done (`true` if never recorded).
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn query_event(&self, event: EventHandle) -> Result<bool> {
        let p = self.platform()?;
        let e = p.events.get(event)?;
        match p.latest(&e)? {
            None => Ok(true),
            Some(ev) => p.done(ev.get(), &|| format!("event_query({event:?})")),
        }
    }

    /// Waits for the latest record (none: returns at once).
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn sync_event(&self, event: EventHandle) -> Result<()> {
        let p = self.platform()?;
        let e = p.events.get(event)?;
        match p.latest(&e)? {
            None => Ok(()),
            Some(ev) => p.wait(&[ev.get()], &|| format!("event_synchronize({event:?})")),
        }
    }

    /// Makes `stream`'s later work wait for the event's latest record (a
    /// barrier on its marker; none: nothing to wait for).
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let p = self.platform()?;
        let e = p.events.get(event)?;
        let (q, _) = p.queue(stream)?;
        let Some(ev) = p.latest(&e)? else {
            return Ok(());
        };
        p.barrier(q, ev.get(), &|| {
            format!("stream_wait_event({stream:?}, {event:?})")
        })
    }

    /// Milliseconds between the two records' completions, from the
    /// markers' `CL_PROFILING_COMMAND_END` (every queue has profiling on).
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn elapsed(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let p = self.platform()?;
        let call = || format!("event_elapsed_ms({start:?}, {end:?})");
        let mut ends = [0u64; 2];
        for (i, handle) in [start, end].into_iter().enumerate() {
            let e = p.events.get(handle)?;
            if !e.timing {
                return Err(Error::invalid_argument(format!(
                    "{}: {handle:?} was created without timing",
                    call()
                )));
            }
            let Some(ev) = p.latest(&e)? else {
                return Err(Error::invalid_argument(format!(
                    "{}: {handle:?} was never recorded",
                    call()
                )));
            };
            if !p.done(ev.get(), &call)? {
                return Err(Error::new(
                    ErrorKind::NotReady,
                    format!("{}: {handle:?} is still pending", call()),
                ));
            }
            ends[i] = p.command_end(ev.get(), &call)?;
        }
        let ns = ends[1] as i128 - ends[0] as i128;
        Ok((ns as f64 / 1e6) as f32)
    }
}

impl Platform {
    /// `CL_PROFILING_COMMAND_END` of a completed marker, in nanoseconds.
    fn command_end(&self, ev: Ev, call: &dyn Fn() -> String) -> Result<u64> {
        let mut ns: cl_ulong = 0;
        // SAFETY: a live event and an out-value of the size given.
        let code = unsafe {
            (self.cl.clGetEventProfilingInfo()?)(
                ev.0,
                CL_PROFILING_COMMAND_END,
                std::mem::size_of::<cl_ulong>(),
                (&mut ns as *mut cl_ulong).cast(),
                std::ptr::null_mut(),
            )
        };
        if code == CL_PROFILING_INFO_NOT_AVAILABLE {
            // Done, yet without times: the queue had no profiling.
            return Err(Error::vendor(
                ErrorKind::InvalidArgument,
                i64::from(code),
                format!(
                    "{}: clGetEventProfilingInfo(CL_PROFILING_COMMAND_END) of a completed marker: \
                     CL_PROFILING_INFO_NOT_AVAILABLE (-7)",
                    call()
                ),
            ));
        }
        if code != 0 {
            return Err(error(code, &format!("{}: clGetEventProfilingInfo", call())));
        }
        Ok(ns)
    }
}
