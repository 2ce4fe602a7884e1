//! Host functions on a queue, run by a thread the vendor owns.
//!
//! OpenCL has no "run this host function in order on a queue". The vendor
//! builds one from a user event G (the gate), a marker M and a callback:
//! M after the queue's earlier work, `clSetEventCallback(M, CL_COMPLETE)`,
//! then a barrier on G, so the queue's later work waits for G. When M
//! completes, the callback only posts the job to the vendor's thread, which
//! runs the host function and then completes G.
//!
//! When earlier work failed, OpenCL calls the callback with the error and
//! the host function still runs; PoCL 3.1 was seen not to call it at all
//! (the work after G then fails through the queue's order without waiting
//! for G, and the host function never runs, as CUDA documents for a
//! failed context).
//!
//! The callback does no more than post because OpenCL runs it on a driver
//! thread, or inside an OpenCL call on the application's thread (both seen
//! on PoCL), where a blocking OpenCL call is undefined and user code could
//! stall every queue (PoCL ran a 100 ms callback on its only worker, and
//! every queue waited). The callback takes no lock: the application's
//! thread may hold one inside the OpenCL call that runs it.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};
use dipu_deviceapi::{Error, ErrorKind, HostCallback, Result};
use parking_lot::Mutex;

use crate::cl::*;
use crate::errors::{check, error};
use crate::handles::{release_event, Ev, OwnedEv, Queue};
use crate::init::Platform;

/// One launched host function.
struct Job {
    /// The host function; taken by the thread.
    callback: Mutex<Option<HostCallback>>,
    /// Whether the launch succeeded: held locked by the launching thread
    /// until it knows, so the vendor's thread never runs a host function
    /// whose launch then failed.
    launched: Mutex<bool>,
    /// G: later work on the queue waits for it.
    gate: Ev,
    /// M: after the queue's earlier work.
    marker: Ev,
    /// M's status when its callback ran (`CL_COMPLETE` or an error), logged.
    status: AtomicI32,
    /// Where the callback posts the job.
    post: Sender<Message>,
}

/// What the vendor's thread is sent.
enum Message {
    /// Run a job whose marker completed.
    Run(Arc<Job>),
    /// End (every job launched so far has run). A job whose callback never
    /// came (PoCL skips callbacks of failed events) keeps its sender, so the
    /// end cannot wait for every sender to go.
    Stop,
}

/// The vendor's host-function thread.
#[derive(Debug)]
pub(crate) struct HostFuncs {
    post: Mutex<Option<Sender<Message>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl HostFuncs {
    /// Starts the thread.
    pub(crate) fn start(cl: Arc<Cl>) -> Result<HostFuncs> {
        let (post, jobs) = unbounded::<Message>();
        let thread = std::thread::Builder::new()
            .name("dipu-opencl-host".into())
            .spawn(move || {
                while let Ok(Message::Run(job)) = jobs.recv() {
                    run(&cl, &job);
                }
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::VendorInitFailed,
                    format!("the OpenCL vendor's host-function thread did not start: {e}"),
                )
            })?;
        Ok(HostFuncs {
            post: Mutex::new(Some(post)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Ends the thread once every job launched so far has run (the
    /// vendor's end, after every queue was waited for).
    pub(crate) fn stop(&self) {
        if let Some(post) = self.post.lock().take() {
            let _ = post.send(Message::Stop);
        }
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!("the OpenCL vendor's host-function thread panicked");
            }
        }
    }
}

impl Drop for HostFuncs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs one job on the vendor's thread: the host function (if its launch
/// succeeded), then opens the gate.
fn run(cl: &Cl, job: &Job) {
    let launched = *job.launched.lock();
    let callback = job.callback.lock().take();
    if let (true, Some(callback)) = (launched, callback) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(callback)) {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            tracing::error!("a host callback panicked on the OpenCL vendor's thread: {what}");
        }
    }
    let status = job.status.load(Ordering::Acquire);
    if status < 0 {
        tracing::warn!(
            "a host function ran after work on its stream failed ({})",
            crate::errors::describe(status)
        );
    }
    match cl.clSetUserEventStatus() {
        Ok(set) => {
            // SAFETY: G is a live user event of this vendor, set once.
            // Always complete: the failure already reaches the work after
            // G through the queue's order, and PoCL aborts the process when
            // an error status reaches a command whose event was released.
            let code = unsafe { set(job.gate.0, CL_COMPLETE) };
            if code != 0 {
                tracing::error!(
                    "{}",
                    error(code, "clSetUserEventStatus (a host function's gate)")
                );
            }
        }
        Err(e) => tracing::error!("{e}"),
    }
    release_event(cl, job.gate);
    release_event(cl, job.marker);
}

/// The marker's callback: posts the job to the vendor's thread, nothing
/// more (see the module documentation).
unsafe extern "C" fn posted(_event: cl_event, status: cl_int, data: *mut c_void) {
    // SAFETY: `data` is the `Arc<Job>` leaked by `launch` for this
    // callback, which OpenCL calls once.
    let job = unsafe { Arc::from_raw(data.cast_const().cast::<Job>()) };
    job.status.store(status, Ordering::Release);
    let post = job.post.clone();
    // Fails only after the vendor's end, when no one waits for the gate.
    let _ = post.send(Message::Run(job));
}

impl Platform {
    /// Launches `callback` on `q` (see the module documentation).
    pub(crate) fn launch(&self, q: Queue, callback: HostCallback) -> Result<()> {
        let post = self.host.post.lock().clone().ok_or_else(|| {
            Error::new(ErrorKind::Internal, "the host-function thread has stopped")
        })?;
        let mut code = 0;
        // SAFETY: a live context and a valid out-pointer.
        let gate = unsafe { (self.cl.clCreateUserEvent()?)(self.context.0, &mut code) };
        check(code, || "clCreateUserEvent".into())?;
        let gate = OwnedEv::new(&self.cl, Ev(gate));
        let marker = self.marker(q)?;
        let job = Arc::new(Job {
            callback: Mutex::new(Some(callback)),
            launched: Mutex::new(false),
            gate: gate.get(),
            marker: marker.get(),
            status: AtomicI32::new(CL_COMPLETE),
            post,
        });
        let mut launched = job.launched.lock();
        let data = Arc::into_raw(Arc::clone(&job)).cast_mut().cast::<c_void>();
        // SAFETY: a live marker; `posted` matches the callback type and
        // takes over `data`, which OpenCL passes to it once.
        let code = unsafe {
            (self.cl.clSetEventCallback()?)(marker.get().0, CL_COMPLETE, Some(posted), data)
        };
        if let Err(e) = check(code, || "clSetEventCallback(CL_COMPLETE)".into()) {
            // SAFETY: OpenCL refused the callback, so it never runs: `data`
            // is still the reference leaked above.
            drop(unsafe { Arc::from_raw(data.cast_const().cast::<Job>()) });
            return Err(e);
        }
        // From here the callback runs: the thread releases G and M.
        let gate = gate.into_inner();
        let _ = marker.into_inner();
        self.barrier(q, gate, &|| "the host function's gate".into())?;
        *launched = true;
        drop(launched);
        if let Err(e) = self.flush(q) {
            // The host function is queued and will run once the queue goes
            // on; only its start may be late.
            tracing::warn!("launch_host_func: {e}");
        }
        Ok(())
    }
}
