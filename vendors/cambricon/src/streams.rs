//! Queues (streams), the default stream, priorities and host functions.
//!
//! `StreamHandle::DEFAULT` is *not* CNRT's NULL queue: that queue is per
//! host thread (each thread has its own default queue on each device), while
//! the trait's default stream is one per device, shared by every thread.
//! So, as torch_mlu does, the vendor creates one queue per device the first
//! time `DEFAULT` is used there, and keeps it for the life of the process.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use dipu_deviceapi::{
    Error, ErrorKind, EventHandle, HostCallback, PriorityRange, Result, StreamHandle,
};

use crate::cnrt::*;
use crate::events::notifier;
use crate::CambriconVendor;

/// CNRT's priorities (least, greatest), 7 and 0 on every MLU so far, on
/// the trait's CUDA scale: 0 is the normal (least) priority and the most
/// urgent is `greatest - least` (-7).
pub(crate) fn to_trait_range(least: c_int, greatest: c_int) -> PriorityRange {
    PriorityRange {
        least: 0,
        greatest: greatest - least,
    }
}

/// A trait priority (already clamped) to CNRT's scale.
pub(crate) fn to_cnrt_priority(priority: i32, least: c_int) -> c_int {
    least + priority
}

impl CambriconVendor {
    /// `cnrtDeviceGetQueuePriorityRange`, raw: (least, greatest).
    fn cnrt_priorities(&self) -> Result<(c_int, c_int)> {
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: valid out-pointers.
        let code =
            unsafe { (self.rt.cnrtDeviceGetQueuePriorityRange()?)(&mut least, &mut greatest) };
        self.rt
            .check(code, || "cnrtDeviceGetQueuePriorityRange".into())?;
        Ok((least, greatest))
    }

    /// The priority range on the trait's scale.
    pub(crate) fn priorities(&self) -> Result<PriorityRange> {
        let (least, greatest) = self.cnrt_priorities()?;
        Ok(to_trait_range(least, greatest))
    }

    fn new_queue(&self, priority: i32) -> Result<cnrtQueue_t> {
        let (least, greatest) = self.cnrt_priorities()?;
        let priority = to_trait_range(least, greatest).clamp(priority);
        let native = to_cnrt_priority(priority, least);
        let mut queue = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cnrtQueueCreateWithPriority()?)(&mut queue, 0, native) };
        self.rt.check(code, || {
            format!("cnrtQueueCreateWithPriority(priority {native})")
        })?;
        if queue.is_null() {
            return Err(Error::new(
                ErrorKind::Internal,
                "cnrtQueueCreateWithPriority returned a null queue",
            ));
        }
        Ok(queue)
    }

    /// The CNRT queue of a stream: its own, or for `DEFAULT` the current
    /// device's shared queue (created on first use).
    pub(crate) fn queue(&self, stream: StreamHandle) -> Result<cnrtQueue_t> {
        if !stream.is_default() {
            return Ok(stream.as_raw() as usize as cnrtQueue_t);
        }
        let device = self.current()?;
        let mut queues = self.default_queues.lock();
        if let Some(&q) = queues.get(&device) {
            return Ok(q as cnrtQueue_t);
        }
        let q = self.new_queue(0)?;
        queues.insert(device, q as usize);
        Ok(q)
    }

    /// A queue of `priority` (clamped into the range) on the current device.
    pub(crate) fn create_stream(&self, priority: i32) -> Result<StreamHandle> {
        Ok(StreamHandle::from_raw(
            self.new_queue(priority)? as usize as u64
        ))
    }

    /// `cnrtQueueSync` then `cnrtQueueDestroy`: CNRT destroys a queue at
    /// once, dropping the work still queued on it, while the trait lets it
    /// finish first.
    ///
    /// # Safety
    /// `stream` is a live stream of this vendor.
    pub(crate) unsafe fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        if stream.is_default() {
            return Err(Error::invalid_argument(
                "the default stream cannot be destroyed",
            ));
        }
        // SAFETY: a live queue by the caller's contract.
        unsafe { self.sync_stream(stream) }?;
        let queue = self.queue(stream)?;
        // SAFETY: a live, drained queue by the caller's contract.
        let code = unsafe { (self.rt.cnrtQueueDestroy()?)(queue) };
        self.rt
            .check(code, || format!("cnrtQueueDestroy({stream:?})"))
    }

    /// `cnrtQueueSync`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn sync_stream(&self, stream: StreamHandle) -> Result<()> {
        let queue = self.queue(stream)?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtQueueSync()?)(queue) };
        self.rt.check(code, || format!("cnrtQueueSync({stream:?})"))
    }

    /// `cnrtQueueQuery`: done, or `false` while pending.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn query_stream(&self, stream: StreamHandle) -> Result<bool> {
        let queue = self.queue(stream)?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtQueueQuery()?)(queue) };
        self.ready(code, || format!("cnrtQueueQuery({stream:?})"))
    }

    /// `cnrtQueueWaitNotifier(notifier, queue, 0)`: the notifier comes first.
    ///
    /// # Safety
    /// `stream` and `event` are live (the stream may be the default one).
    pub(crate) unsafe fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let queue = self.queue(stream)?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtQueueWaitNotifier()?)(notifier(event), queue, 0) };
        self.rt.check(code, || {
            format!("cnrtQueueWaitNotifier({event:?}, {stream:?}, 0)")
        })
    }

    /// Runs `callback` with `cnrtInvokeHostFunc`: exactly once when this
    /// returns `Ok`, never when it returns `Err`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn host_func(
        &self,
        stream: StreamHandle,
        callback: HostCallback,
    ) -> Result<()> {
        let queue = self.queue(stream)?;
        let invoke = self.rt.cnrtInvokeHostFunc()?;
        let data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        // SAFETY: `trampoline` matches cnrtHostFn_t and takes ownership of
        // `data`, which CNRT passes to it once.
        let code = unsafe { invoke(queue, Some(trampoline), data) };
        if code != cnrtSuccess {
            // SAFETY: CNRT refused the call, so it will never run the
            // trampoline: `data` is still ours, from `Box::into_raw` above.
            drop(unsafe { Box::from_raw(data.cast::<HostCallback>()) });
        }
        self.rt
            .check(code, || format!("cnrtInvokeHostFunc({stream:?})"))
    }

    /// `Ok(true)` for success, `Ok(false)` for `cnrtErrorNotReady` or
    /// `cnrtErrorBusy` (and the thread's sticky error cleared), else the error.
    pub(crate) fn ready(&self, code: cnrtRet_t, call: impl FnOnce() -> String) -> Result<bool> {
        if code == cnrtErrorNotReady || code == cnrtErrorBusy {
            self.rt.clear_last_error();
            return Ok(false);
        }
        self.rt.check(code, call).map(|()| true)
    }
}

/// The host function CNRT calls: runs the boxed callback once, catching a
/// panic so that none unwinds into CNRT's thread.
extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostCallback>` leaked by `host_func`, and
    // CNRT calls a host function exactly once.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    if let Err(panic) = catch_unwind(AssertUnwindSafe(callback)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        tracing::error!("a host callback panicked on CNRT's host-function thread: {what}");
    }
}
