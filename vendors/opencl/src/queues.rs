//! The vendor's queues: each device's default queue, the queues streams
//! are made of (a registry, so the vendor can wait for all of them), and
//! the last work of destroyed ones; markers, flushes and waits on them.
//!
//! Every queue is in-order with profiling on. The vendor does not see every
//! command (a kernel library enqueues straight onto a stream's queue), so
//! "everything queued so far" is always a marker, never a tracked last
//! command.

use std::collections::HashMap;

use dipu_deviceapi::{Error, Result, StreamHandle};
use parking_lot::Mutex;

use crate::cl::*;
use crate::errors::{check, error, failed};
use crate::handles::{release_event, retain_event, Context, DeviceId, Ev, OwnedEv, Queue};
use crate::init::Platform;
use crate::status::{CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, CL_SUCCESS};

/// The queues of the context.
#[derive(Debug)]
pub(crate) struct Queues {
    /// Each device's default queue, by device index.
    defaults: Vec<Queue>,
    /// The live created queues (raw handle) and their devices.
    created: Mutex<HashMap<u64, i32>>,
    /// Markers after the last work of destroyed queues, with their devices,
    /// until they complete.
    retired: Mutex<Vec<(i32, Ev)>>,
}

/// Creates an in-order queue with profiling on `device`, with a
/// `cl_khr_priority_hints` priority when given.
pub(crate) fn create_queue(
    cl: &Cl,
    context: Context,
    device: DeviceId,
    priority: Option<cl_queue_priority_khr>,
) -> Result<Queue> {
    let mut props = vec![CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE];
    if let Some(p) = priority {
        props.extend([CL_QUEUE_PRIORITY_KHR, cl_queue_properties::from(p)]);
    }
    props.push(0);
    let mut code = 0;
    // SAFETY: a live context and one of its devices, a 0-terminated
    // property list and a valid out-pointer.
    let q = unsafe {
        (cl.clCreateCommandQueueWithProperties()?)(context.0, device.0, props.as_ptr(), &mut code)
    };
    check(code, || {
        format!(
            "clCreateCommandQueueWithProperties(CL_QUEUE_PROFILING_ENABLE, priority {priority:?})"
        )
    })?;
    if q.is_null() {
        return Err(error(
            code,
            "clCreateCommandQueueWithProperties returned NULL",
        ));
    }
    Ok(Queue(q))
}

/// `clReleaseCommandQueue`, logging a failure.
pub(crate) fn release_queue(cl: &Cl, q: Queue) {
    if let Ok(release) = cl.clReleaseCommandQueue() {
        // SAFETY: the caller gives up one reference it held to a live queue.
        let code = unsafe { release(q.0) };
        if code != CL_SUCCESS {
            tracing::warn!("{}", error(code, "clReleaseCommandQueue"));
        }
    }
}

/// A queue retained while the vendor waits for it (another thread may
/// destroy its stream meanwhile); released when dropped.
struct Retained<'a> {
    cl: &'a Cl,
    q: Queue,
}

impl Drop for Retained<'_> {
    fn drop(&mut self) {
        release_queue(self.cl, self.q);
    }
}

impl Queues {
    /// The default queue of each device.
    pub(crate) fn new(cl: &Cl, context: Context, devices: &[DeviceId]) -> Result<Queues> {
        let mut defaults = Vec::new();
        for &device in devices {
            match create_queue(cl, context, device, None) {
                Ok(q) => defaults.push(q),
                Err(e) => {
                    for q in defaults {
                        release_queue(cl, q);
                    }
                    return Err(e.context("the default queue"));
                }
            }
        }
        Ok(Queues {
            defaults,
            created: Mutex::default(),
            retired: Mutex::default(),
        })
    }

    /// Registers a created queue of `device`.
    pub(crate) fn register(&self, q: Queue, device: i32) {
        self.created.lock().insert(q.raw(), device);
    }

    /// Takes a created queue out of the registry; its device, or `None`
    /// when it is not a live created queue.
    pub(crate) fn unregister(&self, q: Queue) -> Option<i32> {
        self.created.lock().remove(&q.raw())
    }

    /// Keeps `marker` (after the last work of a destroyed queue of
    /// `device`) until it completes, and drops those that have.
    pub(crate) fn retire(&self, cl: &Cl, device: i32, marker: Ev) {
        let mut retired = self.retired.lock();
        retired.retain(|&(_, ev)| {
            let done = cl.event_status(ev).map_or(true, |s| s <= 0);
            if done {
                release_event(cl, ev);
            }
            !done
        });
        retired.push((device, marker));
    }

    /// Releases every queue and retired marker (the vendor's end).
    pub(crate) fn release_all(&self, cl: &Cl) {
        for (_, ev) in self.retired.lock().drain(..) {
            release_event(cl, ev);
        }
        for (raw, _) in self.created.lock().drain() {
            release_queue(cl, Queue::from_raw(raw));
        }
        for &q in &self.defaults {
            release_queue(cl, q);
        }
    }
}

impl Platform {
    /// The queue of `stream` and its device: the default stream is the
    /// current device's default queue; any other must be a live stream or
    /// a device's default queue named by its handle.
    pub(crate) fn queue(&self, stream: StreamHandle) -> Result<(Queue, i32)> {
        if stream.is_default() {
            let device = crate::device::current_device();
            let q = self
                .queues
                .defaults
                .get(device as usize)
                .ok_or_else(|| Error::invalid_device(device, self.devices.len() as i32))?;
            return Ok((*q, device));
        }
        let q = Queue::from_raw(stream.as_raw());
        // A default queue by its own handle: what `native_stream` names
        // (a kernel library passes it back, e.g. to `launch_host_func`).
        if let Some(device) = self.queues.defaults.iter().position(|d| d.raw() == q.raw()) {
            return Ok((q, device as i32));
        }
        match self.queues.created.lock().get(&q.raw()) {
            Some(&device) => Ok((q, device)),
            None => Err(Error::invalid_argument(format!(
                "{stream:?} is not a live stream of the OpenCL vendor (never created, or destroyed)"
            ))),
        }
    }

    /// `device`'s default queue.
    pub(crate) fn default_queue(&self, device: i32) -> Queue {
        self.queues.defaults[device as usize]
    }

    /// A marker after everything queued on `q` so far.
    pub(crate) fn marker(&self, q: Queue) -> Result<OwnedEv<'_>> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: a live queue, no wait list, a valid out-pointer.
        let code =
            unsafe { (self.cl.clEnqueueMarkerWithWaitList()?)(q.0, 0, std::ptr::null(), &mut ev) };
        check(code, || "clEnqueueMarkerWithWaitList".into())?;
        Ok(OwnedEv::new(&self.cl, Ev(ev)))
    }

    /// Makes `q`'s later work wait for `ev` (a barrier). The barrier's own
    /// event is asked for and released at once: PoCL 3.1 aborts the process
    /// (`pocl_update_event_failed`) when a barrier enqueued without one has
    /// a wait list that fails (measured).
    pub(crate) fn barrier(&self, q: Queue, ev: Ev, what: &dyn Fn() -> String) -> Result<()> {
        let list = [ev.0];
        let mut own = std::ptr::null_mut();
        // SAFETY: a live queue, a one-event wait list of this context and a
        // valid out-pointer.
        let code =
            unsafe { (self.cl.clEnqueueBarrierWithWaitList()?)(q.0, 1, list.as_ptr(), &mut own) };
        check(code, || {
            format!("clEnqueueBarrierWithWaitList ({})", what())
        })?;
        release_event(&self.cl, Ev(own));
        Ok(())
    }

    /// `clFlush`: submits what `q` holds, so that the device starts it and
    /// another queue may wait for it (the application's duty in OpenCL).
    pub(crate) fn flush(&self, q: Queue) -> Result<()> {
        // SAFETY: a live queue.
        let code = unsafe { (self.cl.clFlush()?)(q.0) };
        check(code, || "clFlush".into())
    }

    /// Waits on the host for `events`; a failed one is the error of `what`
    /// (its status, the failed command's error).
    pub(crate) fn wait(&self, events: &[Ev], what: &dyn Fn() -> String) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let list: Vec<cl_event> = events.iter().map(|e| e.0).collect();
        // SAFETY: live events of this context.
        let code = unsafe { (self.cl.clWaitForEvents()?)(list.len() as cl_uint, list.as_ptr()) };
        if code == CL_SUCCESS {
            return Ok(());
        }
        if code == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST {
            for &ev in events {
                let status = self.cl.event_status(ev)?;
                if status < 0 {
                    return Err(failed(status, &what()));
                }
            }
        }
        Err(error(code, &format!("clWaitForEvents ({})", what())))
    }

    /// Waits until everything queued so far on every queue of `device`
    /// (every device for `None`) is done: the default queues, the created
    /// ones, and the last work of destroyed ones.
    pub(crate) fn finish(&self, device: Option<i32>) -> Result<()> {
        let of = |d: i32| device.is_none_or(|want| want == d);
        let mut held = Vec::new();
        {
            let created = self.queues.created.lock();
            for (&raw, _) in created.iter().filter(|(_, &d)| of(d)) {
                let q = Queue::from_raw(raw);
                // SAFETY: a live queue (registered, under the registry's lock).
                let code = unsafe { (self.cl.clRetainCommandQueue()?)(q.0) };
                check(code, || "clRetainCommandQueue".into())?;
                held.push(Retained { cl: &self.cl, q });
            }
        }
        let mut markers = Vec::new();
        for (d, &q) in self.queues.defaults.iter().enumerate() {
            if of(d as i32) {
                markers.push(self.marker(q)?);
                self.flush(q)?;
            }
        }
        for r in &held {
            markers.push(self.marker(r.q)?);
            self.flush(r.q)?;
        }
        for &(d, ev) in self.queues.retired.lock().iter() {
            if of(d) {
                markers.push(retain_event(&self.cl, ev)?);
            }
        }
        let events: Vec<Ev> = markers.iter().map(OwnedEv::get).collect();
        self.wait(&events, &|| match device {
            Some(d) => format!("waiting for every queue of device {d}"),
            None => "waiting for every queue of the context".to_owned(),
        })
    }
}
