//! Streams: a stream is an in-order command queue with profiling, and its
//! handle is the `cl_command_queue` itself (so a kernel library can use
//! `diopiGetStream`'s value as it is); the default stream is the current
//! device's default queue, which `native_stream` names.

use dipu_deviceapi::{Error, HostCallback, PriorityRange, Result, StreamHandle};

use crate::cl::{CL_COMPLETE, CL_QUEUED, CL_QUEUE_PRIORITY_HIGH_KHR, CL_QUEUE_PRIORITY_MED_KHR};
use crate::device::current_device;
use crate::errors::failed;
use crate::queues::{create_queue, release_queue};
use crate::OpenClVendor;

impl OpenClVendor {
    /// `{0, 0}`, or `{0, -1}` on a device with `cl_khr_priority_hints`
    /// (0 is its medium priority, -1 its high one).
    pub(crate) fn priorities(&self) -> Result<PriorityRange> {
        let p = self.platform()?;
        let device = current_device();
        p.check_device(device)?;
        let greatest = if p.devices[device as usize].priority_hints {
            -1
        } else {
            0
        };
        Ok(PriorityRange { least: 0, greatest })
    }

    /// A new in-order queue with profiling on the current device.
    pub(crate) fn create_stream(&self, priority: i32) -> Result<StreamHandle> {
        let p = self.platform()?;
        let device = current_device();
        p.check_device(device)?;
        let d = &p.devices[device as usize];
        let hint = d.priority_hints.then(|| {
            if self.priorities().is_ok_and(|r| r.clamp(priority) < 0) {
                CL_QUEUE_PRIORITY_HIGH_KHR
            } else {
                CL_QUEUE_PRIORITY_MED_KHR
            }
        });
        let q = create_queue(&self.cl, p.context, d.id, hint)?;
        p.queues.register(q, device);
        Ok(StreamHandle::from_raw(q.raw()))
    }

    /// Releases a stream's queue; the work queued on it still runs, and
    /// `synchronize_device` and `free` still wait for it (a marker after it
    /// is kept until it completes). The default stream is refused.
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        if stream.is_default() {
            return Err(Error::invalid_argument(
                "the default stream cannot be destroyed",
            ));
        }
        let p = self.platform()?;
        let (q, device) = p.queue(stream)?;
        let marker = p.marker(q)?;
        p.flush(q)?;
        if p.queues.unregister(q).is_none() {
            return Err(Error::invalid_argument(format!(
                "stream_destroy({stream:?}): destroyed meanwhile by another thread"
            )));
        }
        p.queues.retire(&self.cl, device, marker.into_inner());
        release_queue(&self.cl, q);
        Ok(())
    }

    /// Waits for a marker after everything queued on `stream` so far.
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn sync_stream(&self, stream: StreamHandle) -> Result<()> {
        let p = self.platform()?;
        let (q, _) = p.queue(stream)?;
        let marker = p.marker(q)?;
        p.flush(q)?;
        p.wait(&[marker.get()], &|| {
            format!("stream_synchronize({stream:?})")
        })
    }

    /// Whether everything queued on `stream` so far is done, from a fresh
    /// marker's status: complete is done; queued (`CL_QUEUED`: waiting for
    /// earlier commands) is pending. A marker that is submitted or running
    /// no longer waits for anything queued before it on PoCL, only for the
    /// driver to get to it (a marker on an idle queue stayed `CL_SUBMITTED`
    /// for 30 µs, up to 15 ms for a process's first command, measured):
    /// that short wait is taken, so an idle
    /// stream answers true. Another driver may submit a marker before the
    /// commands ahead of it are done: the wait then lasts as long as work
    /// already submitted to the device, never a host function (whose gate
    /// keeps the marker `CL_QUEUED`).
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn query_stream(&self, stream: StreamHandle) -> Result<bool> {
        let p = self.platform()?;
        let (q, _) = p.queue(stream)?;
        let marker = p.marker(q)?;
        p.flush(q)?;
        let what = || format!("stream_query({stream:?})");
        match self.cl.event_status(marker.get())? {
            CL_COMPLETE => Ok(true),
            status if status < 0 => Err(failed(status, &what())),
            CL_QUEUED => Ok(false),
            _ => p.wait(&[marker.get()], &what).map(|()| true),
        }
    }

    /// The `cl_command_queue` a kernel library enqueues on for `stream`:
    /// the current device's default queue for the default stream, the
    /// stream's own queue otherwise (unknown handles are refused).
    pub(crate) fn native_queue(&self, stream: StreamHandle) -> Result<u64> {
        let p = self.platform()?;
        Ok(p.queue(stream)?.0.raw())
    }

    /// Runs `callback` on the vendor's host-function thread after the work
    /// queued on `stream` so far; later work waits for it (see
    /// [`crate::hostfn`]). Exactly once when this returns `Ok`, never when
    /// it returns `Err`.
    ///
    /// # Safety
    /// None beyond the trait's: unknown handles are refused.
    pub(crate) unsafe fn host_func(
        &self,
        stream: StreamHandle,
        callback: HostCallback,
    ) -> Result<()> {
        let p = self.platform()?;
        let (q, _) = p.queue(stream)?;
        p.launch(q, callback)
            .map_err(|e| e.context(format!("launch_host_func({stream:?})")))
    }
}
