//! Events: timing and timing-free, record, query, wait, elapsed time.

use dipu_deviceapi::{Error, EventHandle, Result, StreamHandle};

use crate::cudart::*;
use crate::memory::cuda_stream;
use crate::CudaVendor;

/// An event handle as `cudaEvent_t`.
pub(crate) fn cuda_event(event: EventHandle) -> cudaEvent_t {
    event.as_raw() as usize as cudaEvent_t
}

impl CudaVendor {
    /// `cudaEventCreateWithFlags`: `cudaEventDefault` for a timing event,
    /// `cudaEventDisableTiming` otherwise.
    pub(crate) fn create_event(&self, timing: bool) -> Result<EventHandle> {
        self.initialised()?;
        let flags = if timing {
            cudaEventDefault
        } else {
            cudaEventDisableTiming
        };
        let mut event = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cudaEventCreateWithFlags()?)(&mut event, flags) };
        self.rt
            .check(code, || format!("cudaEventCreateWithFlags({flags})"))?;
        if event.is_null() {
            return Err(Error::new(
                dipu_deviceapi::ErrorKind::Internal,
                "cudaEventCreateWithFlags returned a null event",
            ));
        }
        Ok(EventHandle::from_raw(event as usize as u64))
    }

    /// `cudaEventDestroy` (pending records still complete).
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn destroy_event(&self, event: EventHandle) -> Result<()> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cudaEventDestroy()?)(cuda_event(event)) };
        self.rt
            .check(code, || format!("cudaEventDestroy({event:?})"))
    }

    /// `cudaEventRecord`.
    ///
    /// # Safety
    /// `event` is live and `stream` live or the default stream.
    pub(crate) unsafe fn record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cudaEventRecord()?)(cuda_event(event), cuda_stream(stream)) };
        self.rt
            .check(code, || format!("cudaEventRecord({event:?}, {stream:?})"))
    }

    /// `cudaEventQuery`: done (or never recorded), or `false` while pending.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn query_event(&self, event: EventHandle) -> Result<bool> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cudaEventQuery()?)(cuda_event(event)) };
        self.ready(code, || format!("cudaEventQuery({event:?})"))
    }

    /// `cudaEventSynchronize`.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn sync_event(&self, event: EventHandle) -> Result<()> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cudaEventSynchronize()?)(cuda_event(event)) };
        self.rt
            .check(code, || format!("cudaEventSynchronize({event:?})"))
    }

    /// `cudaEventElapsedTime`: a pending event is `NotReady`
    /// (`cudaErrorNotReady`), a timing-free or never-recorded one
    /// `InvalidArgument` (`cudaErrorInvalidResourceHandle`).
    ///
    /// # Safety
    /// Both events are live.
    pub(crate) unsafe fn elapsed(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: a valid out-pointer; live events by the caller's contract.
        let code = unsafe {
            (self.rt.cudaEventElapsedTime()?)(&mut ms, cuda_event(start), cuda_event(end))
        };
        self.rt.check(code, || {
            format!(
                "cudaEventElapsedTime({start:?}, {end:?}) (both events must be recorded, done, \
                 and created with timing)"
            )
        })?;
        Ok(ms)
    }
}
