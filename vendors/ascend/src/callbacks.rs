//! Host callbacks, in ACL's two models: `aclrtLaunchHostFunc` where the
//! runtime has it; otherwise `aclrtLaunchCallback` on streams subscribed
//! (`aclrtSubscribeReport`) to a vendor-owned thread that calls
//! `aclrtProcessReport`. The model is chosen once per vendor, so the two
//! are never mixed on one stream. Callbacks never call ACL.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dipu_deviceapi::{Error, ErrorKind, HostCallback, Result, StreamHandle};

use crate::acl::*;
use crate::streams::acl_stream;
use crate::AscendVendor;

/// How long one `aclrtProcessReport` call waits, in milliseconds.
const REPORT_WAIT_MS: i32 = 100;

/// The callback thread of the subscribe-and-report model.
#[derive(Debug)]
pub(crate) struct Reporter {
    /// Its id as ACL wants it (`pthread_self`).
    thread_id: u64,
    stop: Arc<AtomicBool>,
}

impl Drop for Reporter {
    fn drop(&mut self) {
        // The thread ends within one report wait.
        self.stop.store(true, Ordering::Release);
    }
}

impl AscendVendor {
    /// Runs `callback` after the stream's earlier work; later work waits.
    /// It runs exactly once when this returns `Ok`, never on `Err`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn host_func(
        &self,
        stream: StreamHandle,
        callback: HostCallback,
    ) -> Result<()> {
        self.bind()?;
        let data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        let launched = match self.acl.aclrtLaunchHostFunc() {
            Ok(launch) => {
                // SAFETY: `trampoline` matches aclrtHostFunc and takes
                // ownership of `data`, which ACL passes to it once.
                let code = unsafe { launch(acl_stream(stream), Some(trampoline), data) };
                self.acl
                    .check(code, || format!("aclrtLaunchHostFunc({stream:?})"))
            }
            // SAFETY: by the caller's contract.
            Err(_) => unsafe { self.launch_reported(stream, data) },
        };
        if launched.is_err() {
            // SAFETY: ACL refused the launch, so it never calls the
            // trampoline: `data` is still ours, from `Box::into_raw` above.
            drop(unsafe { Box::from_raw(data.cast::<HostCallback>()) });
        }
        launched
    }

    /// `aclrtLaunchCallback(ACL_CALLBACK_BLOCK)` on a stream subscribed to
    /// the vendor's report thread (started and subscribed on first use).
    ///
    /// # Safety
    /// `stream` is live or the default stream; `data` is a leaked callback.
    unsafe fn launch_reported(&self, stream: StreamHandle, data: *mut c_void) -> Result<()> {
        let reporter = self.reporter()?;
        let device = self.bind()?;
        if stream.is_default() {
            let mut subscribed = self.subscribed_defaults.lock();
            if !subscribed.contains(&device) {
                // SAFETY: the default stream of the current device.
                let code = unsafe {
                    (self.acl.aclrtSubscribeReport()?)(reporter.thread_id, acl_stream(stream))
                };
                self.acl
                    .check(code, || "aclrtSubscribeReport(default stream)".into())?;
                subscribed.insert(device);
            }
        } else {
            let mut streams = self.streams.lock();
            let info = streams
                .get_mut(&(stream.as_raw() as usize))
                .ok_or_else(|| {
                    Error::invalid_argument(format!(
                        "{stream:?} is not a live stream of this vendor"
                    ))
                })?;
            if !info.subscribed {
                // SAFETY: a live stream.
                let code = unsafe {
                    (self.acl.aclrtSubscribeReport()?)(reporter.thread_id, acl_stream(stream))
                };
                self.acl
                    .check(code, || format!("aclrtSubscribeReport({stream:?})"))?;
                info.subscribed = true;
            }
        }
        // SAFETY: `trampoline` matches aclrtCallback and takes ownership of
        // `data`, which the report thread passes to it once.
        let code = unsafe {
            (self.acl.aclrtLaunchCallback()?)(
                Some(trampoline),
                data,
                ACL_CALLBACK_BLOCK,
                acl_stream(stream),
            )
        };
        self.acl.check(code, || {
            format!("aclrtLaunchCallback({stream:?}, ACL_CALLBACK_BLOCK)")
        })
    }

    /// `aclrtUnSubscribeReport` for a stream about to be destroyed.
    ///
    /// # Safety
    /// `stream` is live and subscribed.
    pub(crate) unsafe fn unsubscribe(&self, stream: StreamHandle) -> Result<()> {
        let reporter = self.reporter()?;
        // SAFETY: by the caller's contract.
        let code =
            unsafe { (self.acl.aclrtUnSubscribeReport()?)(reporter.thread_id, acl_stream(stream)) };
        self.acl
            .check(code, || format!("aclrtUnSubscribeReport({stream:?})"))
    }

    /// The report thread, started on first use.
    fn reporter(&self) -> Result<&Reporter> {
        if let Some(r) = self.reporter.get() {
            return Ok(r);
        }
        let process = self.acl.aclrtProcessReport()?;
        let set_device = self.acl.aclrtSetDevice()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let stopping = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("dipu-acl-report".into())
            .spawn(move || {
                // SAFETY: device 0 exists (the vendor found devices before
                // anything launched a callback); the report thread needs a
                // context to process reports.
                let _ = unsafe { set_device(0) };
                // SAFETY: pthread_self has no preconditions.
                let _ = tx.send(unsafe { libc::pthread_self() } as u64);
                while !stopping.load(Ordering::Acquire) {
                    // SAFETY: processes this thread's subscribed reports,
                    // calling the trampolines launched on them; a timeout
                    // is an error code we ignore.
                    let _ = unsafe { process(REPORT_WAIT_MS) };
                }
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("cannot start the ACL report thread: {e}"),
                )
            })?;
        let thread_id = rx
            .recv()
            .map_err(|_| Error::new(ErrorKind::Internal, "the ACL report thread ended at once"))?;
        let kept = self.reporter.get_or_init(|| Reporter {
            thread_id,
            stop: Arc::clone(&stop),
        });
        if kept.thread_id != thread_id {
            // Another thread started one first: end ours.
            stop.store(true, Ordering::Release);
        }
        Ok(kept)
    }
}

/// The function ACL calls: runs the boxed callback once, catching a panic
/// so that none unwinds into ACL's thread.
pub(crate) extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostCallback>` leaked by `host_func`, and
    // ACL calls a callback exactly once.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    if let Err(panic) = catch_unwind(AssertUnwindSafe(callback)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        tracing::error!("a host callback panicked on ACL's callback thread: {what}");
    }
}
