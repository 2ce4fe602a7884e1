//! Communicators: one per key (the whole group, or one point-to-point
//! pair), created lazily with the vendor's unique id passed through the
//! store, each with its own communication stream.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dipu_deviceapi::{CommHandle, DeviceApi, Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, DeviceGuard, Stream};

use crate::store::Store;

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

/// One vendor communicator and the stream the group runs it on.
pub(crate) struct Comm {
    pub(crate) key: CommKey,
    pub(crate) handle: CommHandle,
    /// This process's rank within the communicator.
    pub(crate) rank: i32,
    pub(crate) size: i32,
    pub(crate) device: i32,
    pub(crate) stream: Stream,
    api: Arc<dyn DeviceApi>,
    ctx: &'static DeviceContext,
    aborted: AtomicBool,
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Comm {
    /// Creates the communicator for `key` as group rank `group_rank` of
    /// `group_size`: the lowest rank gets the unique id and publishes it in
    /// `store`, the others read it (waiting up to the store's timeout).
    pub(crate) fn create(
        ctx: &'static DeviceContext,
        store: &dyn Store,
        key: CommKey,
        (group_rank, group_size): (i32, i32),
        device: i32,
        high_priority: bool,
    ) -> Result<Comm> {
        let api = Arc::clone(ctx.api());
        let (rank, size, leader) = match key {
            CommKey::All => (group_rank, group_size, 0),
            CommKey::Pair(a, _) => (i32::from(group_rank != a), 2, a),
        };
        let _guard = DeviceGuard::new(ctx, device)?;
        let store_key = key.store_key();
        let id = if group_rank == leader {
            let id = api.comm_get_unique_id()?;
            store.set(&store_key, &id)?;
            id
        } else {
            store.get(&store_key).map_err(|e| {
                e.context(format!(
                    "waiting for rank {leader} to publish the communicator id under `{store_key}`"
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
        let priority = if high_priority {
            api.stream_priority_range()?.greatest
        } else {
            0
        };
        let stream = ctx.new_stream(device, priority)?;
        let handle = api.comm_init_rank(size, &id, rank)?;
        Ok(Comm {
            key,
            handle,
            rank,
            size,
            device,
            stream,
            api,
            ctx,
            aborted: AtomicBool::new(false),
        })
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
        // SAFETY: the handle came from this vendor and is destroyed only when
        // the last reference to `self` goes.
        unsafe { self.api.comm_async_error(self.handle) }
    }

    /// Aborts the communicator (once), failing its pending work.
    pub(crate) fn abort(&self) {
        if self.aborted.swap(true, Ordering::AcqRel) {
            return;
        }
        let _guard = DeviceGuard::new(self.ctx, self.device);
        // SAFETY: as in `async_error`; abort is allowed with work pending.
        if let Err(e) = unsafe { self.api.comm_abort(self.handle) } {
            tracing::warn!(target: "dipu::comm", "aborting {}: {e}", self.describe());
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.aborted.load(Ordering::Acquire) {
            return;
        }
        let _guard = DeviceGuard::new(self.ctx, self.device);
        // SAFETY: the last reference is going, so nothing will use the
        // handle again; destroy lets queued work finish first.
        if let Err(e) = unsafe { self.api.comm_destroy(self.handle) } {
            tracing::warn!(target: "dipu::comm", "destroying {}: {e}", self.describe());
        }
    }
}

/// The error for an op given a communicator-less group.
pub(crate) fn no_collectives(api: &dyn DeviceApi) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "the {} vendor does not implement collectives (its capabilities: {:?})",
            api.name(),
            api.capabilities().names()
        ),
    )
}
