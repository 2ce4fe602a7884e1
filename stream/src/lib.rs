//! Streams, events, stream and event pools, and device/stream guards with
//! c10's semantics, over any [`dipu_deviceapi::DeviceApi`] vendor.
//!
//! A [`DeviceContext`] wraps one vendor's devices for the rest of the
//! process. Per device it has a default stream, 32 normal- and 32
//! high-priority pooled streams (created on first use, handed out
//! round-robin) and a pool of timing-free events; per thread it keeps a
//! current device and a current stream of each device. [`Stream`] is a small
//! `Copy` value; [`Event`] is created lazily on its first record; the guards
//! restore what they changed when dropped, also during a panic.
//!
//! ```
//! use std::sync::Arc;
//! use dipu_stream::{DeviceContext, Event, EventFlag, StreamGuard};
//! # use dipu_vendor_host::{HostConfig, HostVendor};
//! # let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
//! let ctx = DeviceContext::new(vendor)?;
//! let stream = ctx.stream_from_pool(1, false)?;
//! {
//!     let _guard = StreamGuard::new(stream)?;
//!     assert_eq!(ctx.current_device()?, 1);
//!     assert_eq!(ctx.current_stream(1)?, stream);
//! }
//! assert_eq!(ctx.current_device()?, 0);
//! let mut done = Event::new(ctx, EventFlag::NoTiming);
//! done.record(&stream)?;
//! ctx.default_stream(0)?.wait(&done)?;
//! # Ok::<(), dipu_deviceapi::Error>(())
//! ```

mod context;
mod current;
mod event;
mod event_pool;
mod guard;
mod pool;
mod stream;
#[doc(hidden)]
pub mod sync;

pub use context::DeviceContext;
pub use event::{Event, EventFlag};
pub use event_pool::PooledEvent;
pub use guard::{DeviceGuard, MultiStreamGuard, OptionalDeviceGuard, StreamGuard};
pub use pool::STREAMS_PER_POOL;
pub use stream::{Stream, StreamId, StreamKind};
