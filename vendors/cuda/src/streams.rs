//! Streams and host functions.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use dipu_deviceapi::{Error, EventHandle, HostCallback, PriorityRange, Result, StreamHandle};

use crate::cudart::*;
use crate::events::cuda_event;
use crate::memory::cuda_stream;
use crate::CudaVendor;

impl CudaVendor {
    /// `cudaDeviceGetStreamPriorityRange`: CUDA's scale is ours (0 is
    /// normal, negative is more urgent).
    pub(crate) fn priorities(&self) -> Result<PriorityRange> {
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: valid out-pointers.
        let code =
            unsafe { (self.rt.cudaDeviceGetStreamPriorityRange()?)(&mut least, &mut greatest) };
        self.rt
            .check(code, || "cudaDeviceGetStreamPriorityRange".into())?;
        Ok(PriorityRange { least, greatest })
    }

    /// A non-blocking stream of `priority` (clamped into the range).
    pub(crate) fn create_stream(&self, priority: i32) -> Result<StreamHandle> {
        self.initialised()?;
        let priority = self.priorities()?.clamp(priority);
        let mut stream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe {
            (self.rt.cudaStreamCreateWithPriority()?)(&mut stream, cudaStreamNonBlocking, priority)
        };
        self.rt.check(code, || {
            format!("cudaStreamCreateWithPriority(cudaStreamNonBlocking, {priority})")
        })?;
        if stream.is_null() {
            return Err(Error::new(
                dipu_deviceapi::ErrorKind::Internal,
                "cudaStreamCreateWithPriority returned a null stream",
            ));
        }
        Ok(StreamHandle::from_raw(stream as usize as u64))
    }

    /// `cudaStreamDestroy`; the default stream is refused. CUDA releases
    /// the stream once its queued work is done.
    ///
    /// # Safety
    /// `stream` is a live stream of this vendor.
    pub(crate) unsafe fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        if stream.is_default() {
            return Err(Error::invalid_argument(
                "the default stream cannot be destroyed",
            ));
        }
        // SAFETY: a live stream by the caller's contract.
        let code = unsafe { (self.rt.cudaStreamDestroy()?)(cuda_stream(stream)) };
        self.rt
            .check(code, || format!("cudaStreamDestroy({stream:?})"))
    }

    /// `cudaStreamSynchronize`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn sync_stream(&self, stream: StreamHandle) -> Result<()> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cudaStreamSynchronize()?)(cuda_stream(stream)) };
        self.rt
            .check(code, || format!("cudaStreamSynchronize({stream:?})"))
    }

    /// `cudaStreamQuery`: done, or `false` for `cudaErrorNotReady`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn query_stream(&self, stream: StreamHandle) -> Result<bool> {
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.rt.cudaStreamQuery()?)(cuda_stream(stream)) };
        self.ready(code, || format!("cudaStreamQuery({stream:?})"))
    }

    /// `cudaStreamWaitEvent(stream, event, 0)`.
    ///
    /// # Safety
    /// `stream` and `event` are live (the stream may be the default one).
    pub(crate) unsafe fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        // SAFETY: by the caller's contract.
        let code =
            unsafe { (self.rt.cudaStreamWaitEvent()?)(cuda_stream(stream), cuda_event(event), 0) };
        self.rt.check(code, || {
            format!("cudaStreamWaitEvent({stream:?}, {event:?})")
        })
    }

    /// Runs `callback` with `cudaLaunchHostFunc`: exactly once when this
    /// returns `Ok` (unless the CUDA context dies first, when CUDA runs no
    /// more host functions), never when it returns `Err`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn host_func(
        &self,
        stream: StreamHandle,
        callback: HostCallback,
    ) -> Result<()> {
        let launch = self.rt.cudaLaunchHostFunc()?;
        let data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        // SAFETY: `trampoline` matches cudaHostFn_t and takes ownership of
        // `data`, which CUDA passes to it once.
        let code = unsafe { launch(cuda_stream(stream), Some(trampoline), data) };
        if code != cudaSuccess {
            // SAFETY: CUDA refused the launch, so it will never call the
            // trampoline: `data` is still ours, from `Box::into_raw` above.
            drop(unsafe { Box::from_raw(data.cast::<HostCallback>()) });
        }
        self.rt
            .check(code, || format!("cudaLaunchHostFunc({stream:?})"))
    }

    /// `Ok(true)` for success, `Ok(false)` for `cudaErrorNotReady` (and the
    /// thread's last error cleared), else the error.
    pub(crate) fn ready(&self, code: cudaError_t, call: impl FnOnce() -> String) -> Result<bool> {
        if code == cudaErrorNotReady {
            if let Ok(clear) = self.rt.cudaGetLastError() {
                // SAFETY: takes no arguments and only resets thread-local state.
                unsafe { clear() };
            }
            return Ok(false);
        }
        self.rt.check(code, call).map(|()| true)
    }
}

/// The host function CUDA calls: runs the boxed callback once, catching a
/// panic so that none unwinds into CUDA's thread.
pub(crate) extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostCallback>` leaked by `host_func`, and
    // CUDA calls a host function exactly once.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    if let Err(panic) = catch_unwind(AssertUnwindSafe(callback)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        tracing::error!("a host callback panicked on CUDA's host-function thread: {what}");
    }
}
