//! The worker of a host-staged communicator: a thread that takes its
//! batches in the order their gates were queued on the communication
//! stream, waits until the stream has copied a batch's inputs down (an
//! event, polled: no host function of the stream's vendor is waited on),
//! connects the transport on the first batch, runs the batch, and opens the
//! gate, so that the stream copies the results up. When the communicator
//! has stopped (an error, an abort) it only opens gates.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::PooledEvent;

use super::batch::Layout;
use super::rendezvous::{self, Setup};
use super::shared::{Backoff, Gate, Shared};
use super::Transport;

/// One batch, queued on the communication stream.
pub(crate) struct Job {
    pub(crate) layout: Layout,
    /// The pinned staging buffer's address (`layout.bytes` bytes).
    pub(crate) base: usize,
    /// Recorded after the copies down.
    pub(crate) staged: PooledEvent,
    /// The host function the stream waits at before the copies up.
    pub(crate) gate: Arc<Gate>,
    /// Whether queuing it failed after the gate: only the gate is opened.
    pub(crate) broken: bool,
}

/// Starts the worker; it ends once the communicator is dropped and every
/// batch queued before has been handled.
pub(crate) fn spawn(setup: Setup, shared: Arc<Shared>, jobs: Receiver<Job>) -> Result<()> {
    std::thread::Builder::new()
        .name("dipu-comm-staged".into())
        .spawn(move || {
            let mut transport = None;
            for job in jobs {
                if !job.broken && !shared.stopped() {
                    let ran = catch_unwind(AssertUnwindSafe(|| {
                        run(&setup, &shared, &mut transport, &job)
                    }));
                    let failed = match ran {
                        Ok(result) => result.err(),
                        Err(panic) => Some(Error::new(
                            ErrorKind::Internal,
                            format!(
                                "the host-staged transport panicked: {}",
                                panic_text(panic.as_ref())
                            ),
                        )),
                    };
                    if let Some(e) = failed {
                        shared.fail(e);
                    }
                }
                job.gate.open();
            }
        })
        .map(drop)
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot start a host-staged communicator's worker thread: {e}"),
            )
        })
}

fn run(
    setup: &Setup,
    shared: &Arc<Shared>,
    transport: &mut Option<Box<dyn Transport>>,
    job: &Job,
) -> Result<()> {
    let mut backoff = Backoff::new(Duration::from_millis(1));
    while !job.staged.query()? {
        shared.check()?;
        backoff.pause();
    }
    let transport = match transport {
        Some(t) => t,
        None => transport.insert(rendezvous::connect(setup, shared)?),
    };
    transport.run(&job.layout, job.base)
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}
