//! Streams: one worker thread per stream runs the stream's operations in the
//! order they were queued, truly asynchronously to the host.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use dipu_deviceapi::{Error, ErrorKind, Result, StreamHandle};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;

use crate::wait::{Phases, Schedule, Signal, Waiter};

/// One queued operation; an `Err` becomes the vendor's asynchronous error.
pub(crate) type Op = Box<dyn FnOnce() -> Result<()> + Send + 'static>;

/// The first error an operation reported while running on a stream, kept
/// (like CUDA's sticky errors) until taken, and returned by synchronising
/// calls.
#[derive(Debug, Default)]
pub(crate) struct AsyncErrors {
    first: Mutex<Option<Error>>,
    /// Whether `first` holds an error: set and cleared under its lock, read
    /// without it, so the common check takes no lock.
    kept: AtomicBool,
}

impl AsyncErrors {
    fn record(&self, error: Error) {
        tracing::error!(target: "dipu_vendor_host", "asynchronous error: {error}");
        let mut first = self.first.lock();
        first.get_or_insert(error);
        self.kept.store(true, Ordering::Release);
    }

    /// The kept error, as an `Err`.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.kept.load(Ordering::Acquire) {
            return Ok(());
        }
        self.first.lock().clone().map_or(Ok(()), Err)
    }

    /// Removes and returns the kept error.
    pub(crate) fn take(&self) -> Option<Error> {
        let mut first = self.first.lock();
        self.kept.store(false, Ordering::Release);
        first.take()
    }
}

/// What [`Stream::run_if_idle`] did with its work.
pub(crate) enum Ran<T, W> {
    /// The stream was idle: the work ran on this thread, with this result.
    Here(T),
    /// The stream was busy: the work is given back, not run.
    Busy(W),
}

/// How far a stream got: tickets handed out and operations done. Tickets
/// are taken under the stream's submit lock, so they follow queue order.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    submitted: AtomicU64,
    completed: AtomicU64,
    done: Signal,
}

impl Progress {
    fn complete_one(&self) {
        self.completed.fetch_add(1, Ordering::SeqCst);
        self.done.notify();
    }

    /// Whether the operation with `ticket` (and all before it) is done.
    pub(crate) fn reached(&self, ticket: u64) -> bool {
        self.completed.load(Ordering::SeqCst) >= ticket
    }

    /// Waits, in `phases`, until [`Progress::reached`]`(ticket)`.
    pub(crate) fn wait(&self, ticket: u64, phases: Phases) {
        if !self.reached(ticket) {
            self.done.wait(phases, || self.reached(ticket));
        }
    }
}

/// A stream and its worker.
#[derive(Debug)]
pub(crate) struct Stream {
    /// Raw handle value (0 for a device's default stream).
    id: u64,
    device: i32,
    priority: i32,
    schedule: Schedule,
    progress: Arc<Progress>,
    sender: Mutex<Option<Sender<Op>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Stream {
    fn spawn(
        id: u64,
        (device, priority): (i32, i32),
        schedule: Schedule,
        errors: Arc<AsyncErrors>,
    ) -> Result<Stream> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let progress = Arc::new(Progress::default());
        let label = label(id, device);
        let worker = std::thread::Builder::new()
            .name(format!("dipu-host-d{device}-s{id}"))
            .spawn({
                let progress = Arc::clone(&progress);
                let errors = Arc::clone(&errors);
                let idle = schedule.phases(Waiter::Worker);
                move || run_worker(&label, &receiver, idle, &progress, &errors)
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::VendorError,
                    format!("cannot start the worker thread of a host stream: {e}"),
                )
            })?;
        Ok(Stream {
            id,
            device,
            priority,
            schedule,
            progress,
            sender: Mutex::new(Some(sender)),
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The stream's device.
    pub(crate) fn device(&self) -> i32 {
        self.device
    }

    /// The stream's (clamped) priority.
    pub(crate) fn priority(&self) -> i32 {
        self.priority
    }

    /// Words for messages, e.g. `stream 3 of device 0`.
    pub(crate) fn label(&self) -> String {
        label(self.id, self.device)
    }

    fn stopped(&self) -> Error {
        Error::invalid_argument(format!("{} has been destroyed", self.label()))
    }

    /// Queues `op`; returns its ticket for [`Stream::wait`].
    pub(crate) fn submit(&self, op: Op) -> Result<u64> {
        let sender = self.sender.lock();
        let sender = sender.as_ref().ok_or_else(|| self.stopped())?;
        sender.send(op).map_err(|_| {
            Error::new(
                ErrorKind::Internal,
                format!("the worker of {} has stopped", self.label()),
            )
        })?;
        Ok(self.progress.submitted.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Runs `run(work)` on the calling thread, in stream order, if the
    /// stream is idle (nothing queued meanwhile can overtake it); else
    /// gives `work` back untouched. `run` must not call the vendor.
    ///
    /// The work takes no ticket: it runs whole while the submit lock is
    /// held, so every queueing call is before or after it, and a thread
    /// that reads the counters meanwhile (a query, a synchronisation) sees
    /// the stream as it was just before the work, which is a state it
    /// could have seen.
    pub(crate) fn run_if_idle<W, T>(&self, work: W, run: impl FnOnce(W) -> T) -> Result<Ran<T, W>> {
        let sender = self.sender.lock();
        if sender.is_none() {
            return Err(self.stopped());
        }
        if !self.is_idle() {
            return Ok(Ran::Busy(work));
        }
        let out = run(work);
        drop(sender);
        Ok(Ran::Here(out))
    }

    /// Waits until the operation with `ticket` (and all before it) is done.
    pub(crate) fn wait(&self, ticket: u64) {
        self.progress
            .wait(ticket, self.schedule.phases(Waiter::Caller));
    }

    /// The stream's progress counters, which outlive the stream.
    pub(crate) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    /// Waits for everything queued so far.
    pub(crate) fn synchronize(&self) {
        self.wait(self.progress.submitted.load(Ordering::SeqCst));
    }

    /// Whether everything queued so far is done.
    pub(crate) fn is_idle(&self) -> bool {
        let submitted = self.progress.submitted.load(Ordering::SeqCst);
        self.progress.completed.load(Ordering::SeqCst) >= submitted
    }

    /// Lets queued work finish, then stops the worker.
    pub(crate) fn shutdown(&self) {
        drop(self.sender.lock().take());
        if let Some(worker) = self.worker.lock().take() {
            if worker.thread().id() == std::thread::current().id() {
                tracing::error!(
                    target: "dipu_vendor_host",
                    "{} was destroyed from its own worker (a host callback called the vendor)",
                    self.label()
                );
            } else if worker.join().is_err() {
                tracing::error!(target: "dipu_vendor_host", "the worker of {} panicked", self.label());
            }
        }
    }
}

fn label(id: u64, device: i32) -> String {
    if id == 0 {
        format!("the default stream of device {device}")
    } else {
        format!("stream {id} of device {device}")
    }
}

/// Runs one operation; its error becomes the vendor's asynchronous error,
/// and a panic (a host callback's) is logged and survived.
fn run_op(label: impl Fn() -> String, op: Op, errors: &AsyncErrors) {
    match catch_unwind(AssertUnwindSafe(op)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => errors.record(e.context(format!("operation on {}", label()))),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".to_owned());
            tracing::error!(
                target: "dipu_vendor_host",
                "a host callback on {} panicked: {what}; the stream goes on",
                label()
            );
        }
    }
}

/// The next operation: watched for through the idle phases, then waited
/// for asleep; `None` once the stream is shut down and drained.
fn next_op(ops: &Receiver<Op>, idle: Phases) -> Option<Op> {
    let mut next = None;
    let mut closed = false;
    idle.watch(|| match ops.try_recv() {
        Ok(op) => {
            next = Some(op);
            true
        }
        Err(TryRecvError::Empty) => false,
        Err(TryRecvError::Disconnected) => {
            closed = true;
            true
        }
    });
    match (next, closed) {
        (Some(op), _) => Some(op),
        (None, true) => None,
        (None, false) => ops.recv().ok(),
    }
}

fn run_worker(
    label: &str,
    ops: &Receiver<Op>,
    idle: Phases,
    progress: &Progress,
    errors: &AsyncErrors,
) {
    while let Some(op) = next_op(ops, idle) {
        run_op(|| label.to_owned(), op, errors);
        progress.complete_one();
    }
}

/// Every stream of the vendor: the lazily started default stream of each
/// device and the streams made by `stream_create`.
#[derive(Debug)]
pub(crate) struct Streams {
    next_id: AtomicU64,
    created: RwLock<FxHashMap<u64, Arc<Stream>>>,
    defaults: Vec<OnceLock<Arc<Stream>>>,
    /// Held while a default stream starts, so each starts once.
    starting: Mutex<()>,
    errors: Arc<AsyncErrors>,
    schedule: Schedule,
}

impl Streams {
    pub(crate) fn new(devices: i32, schedule: Schedule, errors: Arc<AsyncErrors>) -> Streams {
        Streams {
            schedule,
            next_id: AtomicU64::new(1),
            created: RwLock::new(FxHashMap::default()),
            defaults: (0..devices).map(|_| OnceLock::new()).collect(),
            starting: Mutex::new(()),
            errors,
        }
    }

    /// The stream `handle` names; the default stream is `device`'s.
    pub(crate) fn get(&self, handle: StreamHandle, device: i32) -> Result<Arc<Stream>> {
        self.with(handle, device, Arc::clone)
    }

    /// `f` of the stream `handle` names (the default stream is `device`'s),
    /// called while the stream is found, so nothing is cloned.
    pub(crate) fn with<T>(
        &self,
        handle: StreamHandle,
        device: i32,
        f: impl FnOnce(&Arc<Stream>) -> T,
    ) -> Result<T> {
        if handle.is_default() {
            return self.default_of(device).map(f);
        }
        let created = self.created.read();
        let stream = created.get(&handle.as_raw()).ok_or_else(|| {
            Error::invalid_argument(format!(
                "unknown stream {handle:?} (never created by this vendor, or destroyed)"
            ))
        })?;
        Ok(f(stream))
    }

    /// `device`'s default stream, started on first use.
    pub(crate) fn default_of(&self, device: i32) -> Result<&Arc<Stream>> {
        let slot = &self.defaults[device as usize];
        if let Some(stream) = slot.get() {
            return Ok(stream);
        }
        let _starting = self.starting.lock();
        if let Some(stream) = slot.get() {
            return Ok(stream);
        }
        let stream = Arc::new(Stream::spawn(
            0,
            (device, 0),
            self.schedule,
            Arc::clone(&self.errors),
        )?);
        Ok(slot.get_or_init(|| stream))
    }

    /// Starts a new stream on `device`.
    pub(crate) fn create(&self, device: i32, priority: i32) -> Result<StreamHandle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let stream = Stream::spawn(
            id,
            (device, priority),
            self.schedule,
            Arc::clone(&self.errors),
        )?;
        self.created.write().insert(id, Arc::new(stream));
        Ok(StreamHandle::from_raw(id))
    }

    /// Removes `handle`, lets its queued work finish and stops its worker.
    pub(crate) fn destroy(&self, handle: StreamHandle) -> Result<()> {
        if handle.is_default() {
            return Err(Error::invalid_argument(
                "the default stream cannot be destroyed",
            ));
        }
        let stream = self.created.write().remove(&handle.as_raw());
        let stream = stream.ok_or_else(|| {
            Error::invalid_argument(format!(
                "stream_destroy: unknown stream {handle:?} (never created, or already destroyed)"
            ))
        })?;
        stream.shutdown();
        Ok(())
    }

    /// Every started stream of `device`, or of all devices for `None`.
    pub(crate) fn all(&self, device: Option<i32>) -> Vec<Arc<Stream>> {
        let mine = |s: &Arc<Stream>| device.is_none_or(|d| s.device == d);
        let mut streams: Vec<_> = self
            .created
            .read()
            .values()
            .filter(|s| mine(s))
            .cloned()
            .collect();
        streams.extend(
            self.defaults
                .iter()
                .filter_map(OnceLock::get)
                .filter(|s| mine(s))
                .cloned(),
        );
        streams
    }

    /// Lets every stream finish its work and stops the workers.
    pub(crate) fn shutdown_all(&mut self) {
        let streams = self.all(None);
        for stream in &streams {
            drop(stream.sender.lock().take());
        }
        for stream in &streams {
            stream.shutdown();
        }
        self.created.write().clear();
        for slot in &mut self.defaults {
            slot.take();
        }
    }
}
