//! Host-staged collectives, for a vendor that reports no collectives.
//!
//! A communicator of this kind queues each batch of operations (one
//! operation, or those of a vendor group) on its communication stream as:
//! copies of the inputs down to one pinned staging buffer, an event, a
//! host function (the gate) that holds the stream, and copies of the
//! results back up. Its worker ([`worker`]) waits for the event, runs the
//! batch over a host transport between the ranks, shared memory on one
//! machine ([`shm`], the host vendor's collectives) or TCP between
//! machines ([`tcp`]), and opens the gate. Everything the process group
//! builds on a stream (the event after the caller's work, `record_stream`,
//! the end event, `Work`, the watchdog) therefore holds as for a vendor's
//! own collectives. A transport failure (a peer gone, a mismatch) becomes
//! the communicator's asynchronous error; an abort ends every wait.
//!
//! - [`batch`]: operations, laid out in the staging buffer.
//! - [`reduce`]: the host reductions of the TCP transport.
//! - [`rendezvous`]: meeting through the store, choosing the transport.
//! - [`shared`]: the stop flag, gates and backoff both sides use.

mod batch;
mod reduce;
mod rendezvous;
mod shared;
mod shm;
mod tcp;
mod worker;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::ThreadId;

use dipu_deviceapi::{CopyKind, Error, Result};
use dipu_runtime::Runtime;
use dipu_stream::Stream;
use parking_lot::Mutex;

pub(crate) use batch::DeviceOp;

use batch::Layout;
use rendezvous::Setup;
use shared::{Gate, Shared};
use worker::Job;

use super::options::Options;
use crate::store::Store;

/// A host transport: runs a batch on its staging buffer.
pub(crate) trait Transport: Send {
    /// Runs `layout`'s operations on the staging buffer at `base`
    /// (`layout.bytes` bytes, the caller's alone until this returns).
    fn run(&mut self, layout: &Layout, base: usize) -> Result<()>;
}

/// Where a host-staged communicator lives.
pub(crate) struct Place<'a> {
    pub(crate) runtime: &'a Arc<Runtime>,
    pub(crate) store: &'a Arc<dyn Store>,
    /// The store key its record is published under.
    pub(crate) key: String,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) stream: Stream,
    pub(crate) options: &'a Options,
}

/// The operations a thread has issued inside a group, not yet queued.
#[derive(Default)]
struct Open {
    depth: usize,
    ops: Vec<DeviceOp>,
}

struct Submit {
    open: HashMap<ThreadId, Open>,
    jobs: Sender<Job>,
}

/// One rank's host-staged communicator.
pub(crate) struct StagedComm {
    runtime: Arc<Runtime>,
    stream: Stream,
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
    /// Held while a batch is queued, so that the worker gets batches in the
    /// order of their gates on the stream.
    submit: Mutex<Submit>,
}

impl StagedComm {
    /// Publishes or reads the communicator's record (see [`rendezvous`])
    /// and starts its worker; the transport is connected on the first
    /// operation.
    pub(crate) fn create(place: Place<'_>) -> Result<StagedComm> {
        let nonce = rendezvous::meet(place.store.as_ref(), &place.key, place.rank, place.size)?;
        let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let setup = Setup {
            store: Arc::clone(place.store),
            prefix: format!("{}/staged/{hex}", place.key),
            nonce,
            rank: place.rank,
            size: place.size,
            transport: place.options.staged_transport,
            address: place.options.staged_address,
            timeout: place.options.timeout,
        };
        let shared = Arc::new(Shared::default());
        let (jobs, queue) = mpsc::channel();
        worker::spawn(setup, Arc::clone(&shared), queue)?;
        Ok(StagedComm {
            runtime: Arc::clone(place.runtime),
            stream: place.stream,
            rank: place.rank,
            size: place.size,
            shared,
            submit: Mutex::new(Submit {
                open: HashMap::new(),
                jobs,
            }),
        })
    }

    /// Queues `op`, or keeps it until the calling thread's group ends.
    pub(crate) fn issue(&self, op: DeviceOp) -> Result<()> {
        let mut submit = self.submit.lock();
        if let Some(open) = submit.open.get_mut(&std::thread::current().id()) {
            open.ops.push(op);
            return Ok(());
        }
        self.queue(&submit, &[op])
    }

    /// Starts (or nests) a group on the calling thread.
    pub(crate) fn group_start(&self) {
        let me = std::thread::current().id();
        self.submit.lock().open.entry(me).or_default().depth += 1;
    }

    /// Ends the calling thread's group: the outermost end queues its
    /// operations as one batch.
    pub(crate) fn group_end(&self) -> Result<()> {
        let me = std::thread::current().id();
        let mut submit = self.submit.lock();
        let Some(open) = submit.open.get_mut(&me) else {
            return Err(Error::invalid_argument("group_end without group_start"));
        };
        open.depth -= 1;
        if open.depth > 0 {
            return Ok(());
        }
        let ops = submit.open.remove(&me).map(|o| o.ops).unwrap_or_default();
        self.queue(&submit, &ops)
    }

    /// The error it stopped with, if any.
    pub(crate) fn async_error(&self) -> Result<()> {
        self.shared.check()
    }

    /// Stops it with `error`: its transport is torn down, every wait ends,
    /// and its queued batches only open their gates.
    pub(crate) fn abort(&self, error: Error) {
        self.shared.fail(error);
    }

    /// Queues `ops` as one batch on the stream (see the module
    /// documentation) and hands it to the worker.
    fn queue(&self, submit: &Submit, ops: &[DeviceOp]) -> Result<()> {
        self.shared.check()?;
        let layout = Layout::plan(ops, self.rank, self.size)?;
        if layout.ops.is_empty() {
            return Ok(());
        }
        let ctx = self.runtime.context();
        let api = ctx.api();
        let raw = self.stream.raw();
        let base = self.runtime.host_allocator().allocate(layout.bytes)? as usize;
        // Freed once the stream has passed the work queued so far (the
        // copies up, or whatever was queued before a failure).
        let staging = Staging {
            runtime: &self.runtime,
            base,
            stream: self.stream,
        };
        let mv = |dst: usize, src: usize, bytes: usize, kind: CopyKind| {
            // SAFETY: the device side is live device memory of the
            // communicator's device (the process group's buffer contract)
            // and the host side lies in the staging buffer of
            // `layout.bytes`, freed only after the stream passes this copy.
            unsafe { api.memcpy_async(dst as *mut c_void, src as *const c_void, bytes, kind, raw) }
        };
        for m in &layout.downs {
            mv(base + m.offset, m.device, m.bytes, CopyKind::DeviceToHost)?;
        }
        let staged = ctx.pooled_event(self.stream.device())?;
        staged.record(&self.stream)?;
        let gate = Arc::new(Gate::default());
        let held = Arc::clone(&gate);
        // SAFETY: the stream is the communicator's own; the host function
        // calls no vendor function and waits only for the worker, which
        // waits on no host function of this vendor.
        unsafe { api.launch_host_func(raw, Box::new(move || held.wait())) }?;
        // The stream now waits at the gate: the worker must get the batch.
        let ups = layout
            .ups
            .iter()
            .try_for_each(|m| mv(m.device, base + m.offset, m.bytes, CopyKind::HostToDevice));
        if let Err(e) = &ups {
            self.shared.fail(e.clone());
        }
        let job = Job {
            layout,
            base,
            staged,
            gate: Arc::clone(&gate),
            broken: ups.is_err(),
        };
        if submit.jobs.send(job).is_err() {
            gate.open();
            self.shared.fail(Error::new(
                dipu_deviceapi::ErrorKind::Internal,
                "the host-staged communicator's worker is gone",
            ));
        }
        drop(staging);
        ups
    }
}

/// A pinned staging buffer, given back (stream-ordered) when dropped.
struct Staging<'a> {
    runtime: &'a Arc<Runtime>,
    base: usize,
    stream: Stream,
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        let ptr = self.base as *mut c_void;
        let freed = self
            .runtime
            .record_host_event_raw(ptr, self.stream)
            .and_then(|()| self.runtime.free_host_raw(ptr));
        if let Err(e) = freed {
            tracing::warn!(target: "dipu::comm", "freeing a host-staged buffer: {e}");
        }
    }
}
