//! `Stream`: a small `Copy` value naming one vendor stream of one device.

use std::fmt;
use std::hash::{Hash, Hasher};

use dipu_deviceapi::{Result, StreamHandle};

use crate::{DeviceContext, DeviceGuard, Event};

/// Which kind of stream an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// The device's default stream.
    Default,
    /// A stream of the device's pool of normal- or high-priority streams.
    Pool {
        /// Whether it is from the high-priority pool.
        high_priority: bool,
    },
    /// A stream made by [`DeviceContext::new_stream`].
    Created,
}

/// A stream's id within its device: its kind and index.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(pub(crate) u32);

const KIND_SHIFT: u32 = 30;
const INDEX_MASK: u32 = (1 << KIND_SHIFT) - 1;

impl StreamId {
    /// The id of the default stream.
    pub const DEFAULT: StreamId = StreamId(0);

    pub(crate) fn new(kind: StreamKind, index: u32) -> StreamId {
        let tag = match kind {
            StreamKind::Default => 0,
            StreamKind::Pool {
                high_priority: false,
            } => 1,
            StreamKind::Pool {
                high_priority: true,
            } => 2,
            StreamKind::Created => 3,
        };
        StreamId(tag << KIND_SHIFT | (index & INDEX_MASK))
    }

    /// The stream's kind.
    #[inline]
    pub fn kind(self) -> StreamKind {
        match self.0 >> KIND_SHIFT {
            0 => StreamKind::Default,
            1 => StreamKind::Pool {
                high_priority: false,
            },
            2 => StreamKind::Pool {
                high_priority: true,
            },
            _ => StreamKind::Created,
        }
    }

    /// The index within its kind (the pool slot, or the creation order).
    #[inline]
    pub fn index(self) -> u32 {
        self.0 & INDEX_MASK
    }

    /// The id as one number (stable within a process).
    pub fn as_u32(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}#{}", self.kind(), self.index())
    }
}

/// One stream of one device: a cheap `Copy` value, as c10's `Stream`.
///
/// Streams are never destroyed while the process runs (pooled and created
/// streams alike), so a `Stream` value stays valid wherever it is copied.
#[derive(Clone, Copy)]
pub struct Stream {
    pub(crate) ctx: &'static DeviceContext,
    pub(crate) device: i32,
    pub(crate) id: StreamId,
    pub(crate) raw: StreamHandle,
}

impl Stream {
    /// The device the stream belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The stream's id within its device.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// The vendor's handle. The default stream's handle is
    /// [`StreamHandle::DEFAULT`], which the vendor reads as "the current
    /// device's default stream": use it under a [`DeviceGuard`] for
    /// [`Stream::device`] (a [`crate::StreamGuard`] does that).
    pub fn raw(&self) -> StreamHandle {
        self.raw
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &'static DeviceContext {
        self.ctx
    }

    /// Runs `f` with the stream's device current when the raw handle needs it.
    fn on_device<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        if self.raw.is_default() {
            let _guard = DeviceGuard::new(self.ctx, self.device)?;
            f()
        } else {
            f()
        }
    }

    /// Waits until all work queued on the stream is done.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the handle came from this context's vendor and streams are
        // never destroyed; the default handle is used on its own device.
        self.on_device(|| unsafe { self.ctx.api().stream_synchronize(self.raw) })
    }

    /// Whether all work queued on the stream is done.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: as in `synchronize`.
        self.on_device(|| unsafe { self.ctx.api().stream_query(self.raw) })
    }

    /// Makes later work on this stream wait for `event`'s last record (the
    /// host does not wait). Same as [`Event::block`].
    pub fn wait(&self, event: &Event) -> Result<()> {
        event.block(self)
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.ctx, other.ctx) && self.device == other.device && self.id == other.id
    }
}

impl Eq for Stream {}

impl Hash for Stream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.ctx as *const DeviceContext as usize).hash(state);
        self.device.hash(state);
        self.id.hash(state);
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.device)
            .field("id", &self.id)
            .field("raw", &self.raw)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_kind_and_index() {
        for kind in [
            StreamKind::Default,
            StreamKind::Pool {
                high_priority: false,
            },
            StreamKind::Pool {
                high_priority: true,
            },
            StreamKind::Created,
        ] {
            let id = StreamId::new(kind, 31);
            assert_eq!((id.kind(), id.index()), (kind, 31));
        }
        assert_eq!(StreamId::DEFAULT.kind(), StreamKind::Default);
        assert_eq!(
            format!("{:?}", StreamId::new(StreamKind::Created, 5)),
            "Created#5"
        );
    }
}
