//! The DICL process group: c10d's collectives over a vendor's collective
//! capability, or staged through host memory for a vendor without it
//! ([`staged`]).
//!
//! Each operation is queued on the communicator's own stream after an
//! event recorded on the caller's current stream, its buffers are
//! `record_stream`ed onto that stream, and it returns a [`Work`]. A
//! watchdog thread settles finished work, and fails overdue work (or work
//! whose communicator reports an error): it aborts the group's
//! communicators and fails every pending operation with an error naming
//! the operation, the rank and how long it ran. After that the group only
//! returns that error.

mod args;
mod buffer;
mod calls;
mod collectives;
mod comms;
mod emulate;
mod gathered;
mod launch;
mod options;
mod outcome;
mod staged;
mod watchdog;
mod widen;
mod work;

pub use buffer::Buffer;
pub use options::{
    Options, StagedTransport, ENV_BLOCKING_WAIT, ENV_STAGED_ADDR, ENV_STAGED_TRANSPORT, ENV_TIMEOUT,
};
pub use work::Work;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;
use std::time::Instant;

use dipu_deviceapi::{Capabilities, DeviceApi, Error, ErrorKind, Result};
use dipu_runtime::Runtime;
use dipu_stream::{DeviceContext, DeviceGuard, Event, EventFlag};
use parking_lot::Mutex;

use crate::store::Store;
use comms::{Comm, CommKey};
use work::WorkState;

/// A group of `world_size` ranks, this process being `rank`, driving the
/// vendor's collectives on one device (c10d's `ProcessGroup` for the
/// `PrivateUse1` backend). Cheap to clone.
#[derive(Debug, Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    runtime: Arc<Runtime>,
    ctx: &'static DeviceContext,
    api: Arc<dyn DeviceApi>,
    store: Arc<dyn Store>,
    rank: i32,
    size: i32,
    device: i32,
    options: Options,
    comms: Mutex<HashMap<CommKey, Arc<Comm>>>,
    seq: AtomicU64,
    pending: Mutex<Vec<Arc<WorkState>>>,
    /// Set once the group has been aborted; every later call returns it.
    failure: Mutex<Option<Error>>,
    coalescing: Mutex<Option<Coalescing>>,
    /// Whether the vendor averages natively: 0 unknown, 1 yes, 2 no.
    native_avg: AtomicU8,
    watchdog: Mutex<Option<watchdog::Handle>>,
    /// Whether a coalesced batch is open (its collectives are launched
    /// only at its end).
    batch_open: std::sync::atomic::AtomicBool,
    /// Work to queue after the open batch's collectives.
    after_batch: Mutex<Vec<AfterBatch>>,
    /// Whether the vendor refused `I16` reductions (NCCL): they are widened
    /// to `I32` ([`widen`]).
    no_i16: std::sync::atomic::AtomicBool,
    /// Whether the vendor refused `F64` reductions (CNCL): they are
    /// all-gathered and reduced on the host ([`gathered`]).
    no_f64: std::sync::atomic::AtomicBool,
    /// Whether the vendor has no collectives: communicators are
    /// host-staged ([`staged`]).
    staged: bool,
}

/// Work queued after a coalesced batch's collectives.
type AfterBatch = Box<dyn FnOnce(&Inner, &Comm) -> Result<()> + Send>;

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.rank)
            .field("world_size", &self.size)
            .field("device", &self.device)
            .field("vendor", &self.api.name())
            .finish()
    }
}

/// A batch of operations between `start_coalescing` and `end_coalescing`.
struct Coalescing {
    thread: ThreadId,
    work: Arc<WorkState>,
    start: Event,
    comm: Option<Arc<Comm>>,
}

impl ProcessGroup {
    /// A group of `world_size` ranks meeting through `store`, this process
    /// being `rank` and using `device` of `runtime`'s vendor. Communicators
    /// are created on first use.
    pub fn new(
        runtime: Arc<Runtime>,
        store: Arc<dyn Store>,
        rank: i32,
        world_size: i32,
        device: i32,
        options: Options,
    ) -> Result<ProcessGroup> {
        if world_size < 1 || !(0..world_size).contains(&rank) {
            return Err(Error::invalid_argument(format!(
                "rank {rank} of world size {world_size}: need 0 <= rank < world_size"
            )));
        }
        runtime.check_device(device)?;
        let api = Arc::clone(runtime.api());
        let staged = !api.capabilities().contains(Capabilities::COLLECTIVES);
        if staged {
            tracing::debug!(
                target: "dipu::comm",
                vendor = api.name(),
                "the vendor has no collectives: the process group stages them through host memory"
            );
        }
        let inner = Arc::new(Inner {
            ctx: runtime.context(),
            runtime,
            api,
            store,
            rank,
            size: world_size,
            device,
            options,
            comms: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            pending: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            coalescing: Mutex::new(None),
            native_avg: AtomicU8::new(0),
            watchdog: Mutex::new(None),
            batch_open: std::sync::atomic::AtomicBool::new(false),
            no_i16: std::sync::atomic::AtomicBool::new(false),
            no_f64: std::sync::atomic::AtomicBool::new(false),
            staged,
            after_batch: Mutex::new(Vec::new()),
        });
        let handle = watchdog::spawn(Arc::downgrade(&inner))?;
        *inner.watchdog.lock() = Some(handle);
        Ok(ProcessGroup { inner })
    }

    /// This process's rank.
    pub fn rank(&self) -> i32 {
        self.inner.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> i32 {
        self.inner.size
    }

    /// The device the group runs on.
    pub fn device(&self) -> i32 {
        self.inner.device
    }

    /// Whether the collectives are staged through host memory (the vendor
    /// reports no collectives of its own).
    pub fn host_staged(&self) -> bool {
        self.inner.staged
    }

    /// The group's options.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// The store the group rendezvouses through.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The error the group was aborted with, if it was.
    pub fn failure(&self) -> Option<Error> {
        self.inner.failure.lock().clone()
    }

    /// Aborts every communicator of the group and fails its pending work
    /// with `ErrorKind::VendorError` (or the given reason).
    pub fn abort(&self, reason: &str) {
        let error = Error::new(
            ErrorKind::VendorError,
            format!("{}: aborted: {reason}", self.inner.label()),
        );
        self.inner.abort_all(error);
    }

    /// Starts a coalesced batch: operations issued by this thread until
    /// [`ProcessGroup::end_coalescing`] are launched together (the vendor's
    /// group start/end) and complete as one [`Work`].
    pub fn start_coalescing(&self) -> Result<()> {
        let inner = &self.inner;
        inner.check_healthy()?;
        let mut coalescing = inner.coalescing.lock();
        if coalescing.is_some() {
            return Err(Error::invalid_argument(format!(
                "{}: start_coalescing while a batch is already open",
                inner.label()
            )));
        }
        let comm = inner.comm(CommKey::All)?;
        let _guard = DeviceGuard::new(inner.ctx, inner.device)?;
        let start = inner.order_after_current(&comm)?;
        comm.group_start()?;
        inner.batch_open.store(true, Ordering::Release);
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        *coalescing = Some(Coalescing {
            thread: std::thread::current().id(),
            work: inner.work_state(format!("coalesced batch #{seq}"), vec![Arc::clone(&comm)]),
            start,
            comm: Some(comm),
        });
        Ok(())
    }

    /// Ends the batch started by [`ProcessGroup::start_coalescing`] and
    /// returns its [`Work`].
    pub fn end_coalescing(&self) -> Result<Work> {
        let inner = &self.inner;
        let batch = inner.coalescing.lock().take().ok_or_else(|| {
            Error::invalid_argument(format!(
                "{}: end_coalescing without start_coalescing",
                inner.label()
            ))
        })?;
        let _guard = DeviceGuard::new(inner.ctx, inner.device)?;
        inner.batch_open.store(false, Ordering::Release);
        let comm = batch.comm.expect("a batch always has its communicator");
        let ended = comm.group_end();
        let after = std::mem::take(&mut *inner.after_batch.lock());
        ended?;
        for f in after {
            f(inner, &comm)?;
        }
        let mut end = Event::new(inner.ctx, EventFlag::Timing);
        end.record(&comm.stream)?;
        *batch.work.events.lock() = Some((batch.start, end));
        inner.watch(Arc::clone(&batch.work));
        Ok(inner.work(batch.work))
    }
}

impl Inner {
    fn label(&self) -> String {
        format!(
            "process group rank {} of {} (device {})",
            self.rank, self.size, self.device
        )
    }

    fn check_healthy(&self) -> Result<()> {
        match self.failure.lock().as_ref() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The communicator for `key`, created on first use.
    fn comm(&self, key: CommKey) -> Result<Arc<Comm>> {
        if let Some(comm) = self.comms.lock().get(&key) {
            return Ok(Arc::clone(comm));
        }
        // Created outside the map's lock: creation waits on the store.
        let comm = Comm::create(self, key)
            .map_err(|e| e.context(format!("{}: creating a communicator", self.label())))?;
        let comm = Arc::new(comm);
        Ok(Arc::clone(self.comms.lock().entry(key).or_insert(comm)))
    }

    /// Makes `comm`'s stream wait for the caller's current stream and
    /// returns a timing event recorded on `comm`'s stream after that wait.
    fn order_after_current(&self, comm: &Comm) -> Result<Event> {
        let current = self.ctx.current_stream(self.device)?;
        let ready = self.ctx.pooled_event(self.device)?;
        ready.record(&current)?;
        ready.block(&comm.stream)?;
        let mut start = Event::new(self.ctx, EventFlag::Timing);
        start.record(&comm.stream)?;
        Ok(start)
    }

    fn work_state(&self, what: String, comms: Vec<Arc<Comm>>) -> Arc<WorkState> {
        Arc::new(WorkState {
            what: format!("{what} on {}", self.label()),
            enqueued: Instant::now(),
            timeout: self.options.timeout,
            blocking_wait: self.options.blocking_wait,
            device: self.device,
            ctx: self.ctx,
            comms,
            events: Mutex::new(None),
            outcome: outcome::Outcome::default(),
        })
    }

    fn work(self: &Arc<Self>, state: Arc<WorkState>) -> Work {
        let group: Weak<Inner> = Arc::downgrade(self);
        Work {
            state,
            on_failure: Arc::new(move |state: &WorkState, error: Error| {
                if let Some(group) = group.upgrade() {
                    group.work_failed(state, error);
                } else {
                    state.outcome.fail(error);
                }
            }),
        }
    }

    fn watch(&self, state: Arc<WorkState>) {
        self.pending.lock().push(state);
    }

    /// Settles finished work and fails the group on overdue or failed work.
    pub(crate) fn check_pending(&self) {
        let now = Instant::now();
        let mut failed: Option<(Arc<WorkState>, Error)> = None;
        {
            let mut pending = self.pending.lock();
            pending.retain(|w| {
                if w.poll() {
                    if let outcome::State::Failed(e) = w.outcome.state() {
                        failed.get_or_insert((Arc::clone(w), e));
                    }
                    return false;
                }
                if failed.is_none() && w.is_overdue(now) {
                    failed = Some((Arc::clone(w), w.timeout_error(now)));
                }
                true
            });
        }
        if let Some((work, error)) = failed {
            self.work_failed(&work, error);
        }
    }

    /// `work` failed (timed out, or its communicator broke): the group is
    /// aborted and all its pending work fails.
    fn work_failed(&self, work: &WorkState, error: Error) {
        work.outcome.fail(error.clone());
        let reason = Error::new(
            error.kind(),
            format!(
                "{error}; the group's communicators were aborted and its pending operations failed"
            ),
        );
        self.abort_all(reason);
    }

    fn abort_all(&self, error: Error) {
        {
            let mut failure = self.failure.lock();
            if failure.is_some() {
                return;
            }
            *failure = Some(error.clone());
        }
        tracing::error!(target: "dipu::comm", "{error}");
        let comms: Vec<Arc<Comm>> = self.comms.lock().values().cloned().collect();
        for comm in &comms {
            comm.abort();
        }
        let pending = std::mem::take(&mut *self.pending.lock());
        for work in pending {
            work.outcome
                .fail(Error::new(error.kind(), format!("{}: {error}", work.what)));
        }
        if let Some(batch) = self.coalescing.lock().as_ref() {
            batch.work.outcome.fail(error);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(handle) = self.watchdog.get_mut().take() {
            handle.stop();
        }
        // Destroying a communicator waits for its queued work, which may
        // never finish (a peer that is gone): with work still pending the
        // group aborts instead, as c10d's destructor does.
        let pending = self.pending.get_mut();
        pending.retain(|w| !w.poll());
        if !pending.is_empty() {
            let n = pending.len();
            self.abort_all(Error::new(
                ErrorKind::VendorError,
                format!(
                    "{}: dropped with {n} operation(s) still pending; its communicators were \
                     aborted",
                    self.label()
                ),
            ));
        }
        // Otherwise the communicators are destroyed as the map drops.
    }
}
