//! Streams: one worker thread per stream runs the stream's operations in the
//! order they were queued, truly asynchronously to the host.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use dipu_deviceapi::{Error, ErrorKind, Result, StreamHandle};
use parking_lot::{Condvar, Mutex};

/// One queued operation; an `Err` becomes the vendor's asynchronous error.
pub(crate) type Op = Box<dyn FnOnce() -> Result<()> + Send + 'static>;

/// The first error an operation reported while running on a stream, kept
/// (like CUDA's sticky errors) until taken, and returned by synchronising
/// calls.
#[derive(Debug, Default)]
pub(crate) struct AsyncErrors {
    first: Mutex<Option<Error>>,
}

impl AsyncErrors {
    fn record(&self, error: Error) {
        tracing::error!(target: "dipu_vendor_host", "asynchronous error: {error}");
        self.first.lock().get_or_insert(error);
    }

    /// The kept error, as an `Err`.
    pub(crate) fn check(&self) -> Result<()> {
        self.first.lock().clone().map_or(Ok(()), Err)
    }

    /// Removes and returns the kept error.
    pub(crate) fn take(&self) -> Option<Error> {
        self.first.lock().take()
    }
}

#[derive(Debug, Default)]
struct Counters {
    submitted: u64,
    completed: u64,
}

#[derive(Debug, Default)]
struct Progress {
    counters: Mutex<Counters>,
    done: Condvar,
}

/// A stream and its worker.
#[derive(Debug)]
pub(crate) struct Stream {
    /// Raw handle value (0 for a device's default stream).
    id: u64,
    device: i32,
    priority: i32,
    progress: Arc<Progress>,
    sender: Mutex<Option<Sender<Op>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Stream {
    fn spawn(id: u64, device: i32, priority: i32, errors: Arc<AsyncErrors>) -> Result<Stream> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let progress = Arc::new(Progress::default());
        let label = label(id, device);
        let worker = std::thread::Builder::new()
            .name(format!("dipu-host-d{device}-s{id}"))
            .spawn({
                let progress = Arc::clone(&progress);
                move || run_worker(&label, &receiver, &progress, &errors)
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

    /// Queues `op`; returns its ticket for [`Stream::wait`].
    pub(crate) fn submit(&self, op: Op) -> Result<u64> {
        let sender = self.sender.lock();
        let sender = sender.as_ref().ok_or_else(|| {
            Error::invalid_argument(format!("{} has been destroyed", self.label()))
        })?;
        let mut counters = self.progress.counters.lock();
        sender.send(op).map_err(|_| {
            Error::new(
                ErrorKind::Internal,
                format!("the worker of {} has stopped", self.label()),
            )
        })?;
        counters.submitted += 1;
        Ok(counters.submitted)
    }

    /// Waits until the operation with `ticket` (and all before it) is done.
    pub(crate) fn wait(&self, ticket: u64) {
        let mut counters = self.progress.counters.lock();
        while counters.completed < ticket {
            self.progress.done.wait(&mut counters);
        }
    }

    /// Waits for everything queued so far.
    pub(crate) fn synchronize(&self) {
        let ticket = self.progress.counters.lock().submitted;
        self.wait(ticket);
    }

    /// Whether everything queued so far is done.
    pub(crate) fn is_idle(&self) -> bool {
        let counters = self.progress.counters.lock();
        counters.completed == counters.submitted
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

fn run_worker(label: &str, ops: &Receiver<Op>, progress: &Progress, errors: &AsyncErrors) {
    while let Ok(op) = ops.recv() {
        match catch_unwind(AssertUnwindSafe(op)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.record(e.context(format!("operation on {label}"))),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic payload".to_owned());
                tracing::error!(
                    target: "dipu_vendor_host",
                    "a host callback on {label} panicked: {what}; the stream goes on"
                );
            }
        }
        let mut counters = progress.counters.lock();
        counters.completed += 1;
        progress.done.notify_all();
    }
}

/// Every stream of the vendor: the lazily started default stream of each
/// device and the streams made by `stream_create`.
#[derive(Debug)]
pub(crate) struct Streams {
    next_id: AtomicU64,
    created: Mutex<HashMap<u64, Arc<Stream>>>,
    defaults: Vec<Mutex<Option<Arc<Stream>>>>,
    errors: Arc<AsyncErrors>,
}

impl Streams {
    pub(crate) fn new(devices: i32, errors: Arc<AsyncErrors>) -> Streams {
        Streams {
            next_id: AtomicU64::new(1),
            created: Mutex::new(HashMap::new()),
            defaults: (0..devices).map(|_| Mutex::new(None)).collect(),
            errors,
        }
    }

    /// The stream `handle` names; the default stream is `device`'s.
    pub(crate) fn get(&self, handle: StreamHandle, device: i32) -> Result<Arc<Stream>> {
        if handle.is_default() {
            return self.default_of(device);
        }
        self.created
            .lock()
            .get(&handle.as_raw())
            .cloned()
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "unknown stream {handle:?} (never created by this vendor, or destroyed)"
                ))
            })
    }

    /// `device`'s default stream, started on first use.
    pub(crate) fn default_of(&self, device: i32) -> Result<Arc<Stream>> {
        let mut slot = self.defaults[device as usize].lock();
        if let Some(stream) = slot.as_ref() {
            return Ok(Arc::clone(stream));
        }
        let stream = Arc::new(Stream::spawn(0, device, 0, Arc::clone(&self.errors))?);
        *slot = Some(Arc::clone(&stream));
        Ok(stream)
    }

    /// Starts a new stream on `device`.
    pub(crate) fn create(&self, device: i32, priority: i32) -> Result<StreamHandle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let stream = Stream::spawn(id, device, priority, Arc::clone(&self.errors))?;
        self.created.lock().insert(id, Arc::new(stream));
        Ok(StreamHandle::from_raw(id))
    }

    /// Removes `handle`, lets its queued work finish and stops its worker.
    pub(crate) fn destroy(&self, handle: StreamHandle) -> Result<()> {
        if handle.is_default() {
            return Err(Error::invalid_argument(
                "the default stream cannot be destroyed",
            ));
        }
        let stream = self.created.lock().remove(&handle.as_raw());
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
            .lock()
            .values()
            .filter(|s| mine(s))
            .cloned()
            .collect();
        streams.extend(
            self.defaults
                .iter()
                .filter_map(|d| d.lock().clone())
                .filter(mine),
        );
        streams
    }

    /// Lets every stream finish its work and stops the workers.
    pub(crate) fn shutdown_all(&self) {
        let streams = self.all(None);
        for stream in &streams {
            drop(stream.sender.lock().take());
        }
        for stream in &streams {
            stream.shutdown();
        }
        self.created.lock().clear();
        for slot in &self.defaults {
            slot.lock().take();
        }
    }
}
