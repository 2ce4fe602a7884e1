//! Notifiers (events): timing and timing-free, place, query, wait,
//! elapsed time. A notifier is destroyed with its own device current.

use dipu_deviceapi::{Error, EventHandle, Result, StreamHandle};

use crate::cnrt::*;
use crate::CambriconVendor;

/// An event handle as `cnrtNotifier_t`.
pub(crate) fn notifier(event: EventHandle) -> cnrtNotifier_t {
    event.as_raw() as usize as cnrtNotifier_t
}

impl CambriconVendor {
    /// `cnrtNotifierCreateWithFlags`: `CNRT_NOTIFIER_DEFAULT` for a timing
    /// notifier, `CNRT_NOTIFIER_DISABLE_TIMING_ALL` otherwise.
    pub(crate) fn create_event(&self, timing: bool) -> Result<EventHandle> {
        let flags = if timing {
            CNRT_NOTIFIER_DEFAULT
        } else {
            CNRT_NOTIFIER_DISABLE_TIMING_ALL
        };
        let device = self.current()?;
        let mut n = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cnrtNotifierCreateWithFlags()?)(&mut n, flags) };
        self.rt
            .check(code, || format!("cnrtNotifierCreateWithFlags({flags:#x})"))?;
        if n.is_null() {
            return Err(Error::new(
                dipu_deviceapi::ErrorKind::Internal,
                "cnrtNotifierCreateWithFlags returned a null notifier",
            ));
        }
        self.notifier_devices.lock().insert(n as usize, device);
        Ok(EventHandle::from_raw(n as usize as u64))
    }

    /// `cnrtNotifierDestroy`, with the notifier's own device current for
    /// the call (pending places still complete).
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn destroy_event(&self, event: EventHandle) -> Result<()> {
        let owner = self
            .notifier_devices
            .lock()
            .get(&(event.as_raw() as usize))
            .copied();
        let previous = self.current()?;
        let switch = owner.filter(|&d| d != previous);
        if let Some(device) = switch {
            self.set_current(device)?;
        }
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtNotifierDestroy()?)(notifier(event)) };
        let result = self
            .rt
            .check(code, || format!("cnrtNotifierDestroy({event:?})"));
        if switch.is_some() {
            self.set_current(previous)?;
        }
        if result.is_ok() {
            self.notifier_devices
                .lock()
                .remove(&(event.as_raw() as usize));
        }
        result
    }

    /// `cnrtPlaceNotifier`.
    ///
    /// # Safety
    /// `event` is live and `stream` live or the default stream.
    pub(crate) unsafe fn record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        let queue = self.queue(stream)?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtPlaceNotifier()?)(notifier(event), queue) };
        self.rt
            .check(code, || format!("cnrtPlaceNotifier({event:?}, {stream:?})"))
    }

    /// `cnrtQueryNotifier`: done (or never placed), or `false` while pending.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn query_event(&self, event: EventHandle) -> Result<bool> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtQueryNotifier()?)(notifier(event)) };
        self.ready(code, || format!("cnrtQueryNotifier({event:?})"))
    }

    /// `cnrtWaitNotifier`.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn sync_event(&self, event: EventHandle) -> Result<()> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cnrtWaitNotifier()?)(notifier(event)) };
        self.rt
            .check(code, || format!("cnrtWaitNotifier({event:?})"))
    }

    /// `cnrtNotifierElapsedTime(start, end, &ms)`: the notifiers first, the
    /// result last (CUDA's order is the other way round).
    ///
    /// # Safety
    /// Both events are live.
    pub(crate) unsafe fn elapsed(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: a valid out-pointer; live notifiers by the caller's contract.
        let code = unsafe {
            (self.rt.cnrtNotifierElapsedTime()?)(notifier(start), notifier(end), &mut ms)
        };
        self.rt.check(code, || {
            format!(
                "cnrtNotifierElapsedTime({start:?}, {end:?}) (both notifiers must be placed, \
                 done, and created with timing)"
            )
        })?;
        Ok(ms)
    }
}
