//! Communicators: one per key (the whole group, or one point-to-point
//! pair), created lazily with the vendor's unique id passed through the
//! store (or host-staged, for a vendor without collectives), each with its
//! own communication stream.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dipu_deviceapi::{CommHandle, DeviceApi, Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, DeviceGuard, Stream};

use super::staged::{Place, StagedComm};
use super::Inner;

/// Which ranks a communicator connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CommKey {
    /// Every rank of the group.
    All,
    /// Two ranks (lower first), for standalone send and recv.
    Pair(i32, i32),
}

impl CommKey {
    /// The store key its unique id is published under.
    fn store_key(self) -> String {
        match self {
            CommKey::All => "dicl/comm/all".to_string(),
            CommKey::Pair(a, b) => format!("dicl/comm/p2p/{a}:{b}"),
        }
    }
}

/// What carries a communicator's operations.
pub(crate) enum Backend {
    /// The vendor's collectives.
    Vendor(CommHandle),
    /// Host-staged collectives, for a vendor without them.
    Staged(StagedComm),
}

/// One communicator and the stream the group runs it on.
pub(crate) struct Comm {
    pub(crate) key: CommKey,
    pub(crate) backend: Backend,
    /// This process's rank within the communicator.
    pub(crate) rank: i32,
    pub(crate) size: i32,
    pub(crate) device: i32,
    pub(crate) stream: Stream,
    pub(crate) api: Arc<dyn DeviceApi>,
    ctx: &'static DeviceContext,
    aborted: AtomicBool,
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Comm {
    /// Creates the communicator for `key` of group `g`. On the vendor's
    /// collectives the lowest rank gets the unique id and publishes it in
    /// the store, the others read it (waiting up to the store's timeout);
    /// host-staged ones publish and read their record the same way.
    pub(crate) fn create(g: &Inner, key: CommKey) -> Result<Comm> {
        let (ctx, store) = (g.ctx, g.store.as_ref());
        let api = Arc::clone(ctx.api());
        let (rank, size, leader) = match key {
            CommKey::All => (g.rank, g.size, 0),
            CommKey::Pair(a, _) => (i32::from(g.rank != a), 2, a),
        };
        let device = g.device;
        let _guard = DeviceGuard::new(ctx, device)?;
        let priority = if g.options.high_priority_streams {
            api.stream_priority_range()?.greatest
        } else {
            0
        };
        let store_key = key.store_key();
        if g.staged {
            let stream = ctx.new_stream(device, priority)?;
            let staged = StagedComm::create(Place {
                runtime: &g.runtime,
                store: &g.store,
                key: store_key,
                rank: rank as usize,
                size: size as usize,
                stream,
                options: &g.options,
            })?;
            return Ok(Comm::new(
                key,
                Backend::Staged(staged),
                (rank, size),
                stream,
                ctx,
            ));
        }
        let id = if g.rank == leader {
            let id = api.comm_get_unique_id()?;
            store.set(&store_key, &id)?;
            id
        } else {
            store.get(&store_key).map_err(|e| {
                e.context(format!(
                    "waiting for rank {leader} to publish the communicator id under \
                         `{store_key}`"
                ))
            })?
        };
        let expected = api.comm_unique_id_size();
        if id.len() != expected {
            return Err(Error::invalid_argument(format!(
                "the communicator id under `{store_key}` has {} bytes; {} ids have {expected} \
                 (do all ranks use the same vendor?)",
                id.len(),
                api.name()
            )));
        }
        let stream = ctx.new_stream(device, priority)?;
        let handle = api.comm_init_rank(size, &id, rank)?;
        Ok(Comm::new(
            key,
            Backend::Vendor(handle),
            (rank, size),
            stream,
            ctx,
        ))
    }

    fn new(
        key: CommKey,
        backend: Backend,
        (rank, size): (i32, i32),
        stream: Stream,
        ctx: &'static DeviceContext,
    ) -> Comm {
        Comm {
            key,
            backend,
            rank,
            size,
            device: stream.device(),
            stream,
            api: Arc::clone(ctx.api()),
            ctx,
            aborted: AtomicBool::new(false),
        }
    }

    /// Words for messages.
    pub(crate) fn describe(&self) -> String {
        let what = match self.key {
            CommKey::All => "the group communicator".to_string(),
            CommKey::Pair(a, b) => format!("the point-to-point communicator of ranks {a} and {b}"),
        };
        format!(
            "{what} (rank {} of {}, device {})",
            self.rank, self.size, self.device
        )
    }

    /// The vendor's asynchronous error for this communicator.
    pub(crate) fn async_error(&self) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::VendorError,
                "the communicator was aborted",
            ));
        }
        match &self.backend {
            // SAFETY: the handle came from this vendor and is destroyed only
            // when the last reference to `self` goes.
            Backend::Vendor(handle) => unsafe { self.api.comm_async_error(*handle) },
            Backend::Staged(staged) => staged.async_error(),
        }
    }

    /// Aborts the communicator (once), failing its pending work.
    pub(crate) fn abort(&self) {
        if self.aborted.swap(true, Ordering::AcqRel) {
            return;
        }
        let handle = match &self.backend {
            Backend::Vendor(handle) => *handle,
            Backend::Staged(staged) => {
                staged.abort(Error::new(
                    ErrorKind::VendorError,
                    "the communicator was aborted",
                ));
                return;
            }
        };
        let _guard = DeviceGuard::new(self.ctx, self.device);
        // SAFETY: as in `async_error`; abort is allowed with work pending.
        if let Err(e) = unsafe { self.api.comm_abort(handle) } {
            tracing::warn!(target: "dipu::comm", "aborting {}: {e}", self.describe());
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // A host-staged communicator's worker finishes its queued work on
        // its own.
        let Backend::Vendor(handle) = self.backend else {
            return;
        };
        if self.aborted.load(Ordering::Acquire) {
            return;
        }
        let _guard = DeviceGuard::new(self.ctx, self.device);
        // SAFETY: the last reference is going, so nothing will use the
        // handle again; destroy lets queued work finish first.
        if let Err(e) = unsafe { self.api.comm_destroy(handle) } {
            tracing::warn!(target: "dipu::comm", "destroying {}: {e}", self.describe());
        }
    }
}
