//! `DeviceContext`: one vendor's devices, with their stream and event pools.

use std::fmt;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use dipu_deviceapi::{DeviceApi, Error, Result, StreamHandle};

use crate::current;
use crate::event_pool::{EventPool, PooledEvent};
use crate::pool::{StreamPool, STREAMS_PER_POOL};
use crate::stream::{StreamId, StreamKind};
use crate::sync::Mutex;
use crate::{DeviceGuard, Stream};

/// Per-device pools.
struct DeviceStreams {
    normal: StreamPool,
    high: StreamPool,
    /// The vendor handles of the streams `new_stream` made, by index.
    created: Mutex<Vec<StreamHandle>>,
    events: EventPool,
}

/// One vendor's devices as the stream layer sees them: per device a default
/// stream, pools of normal- and high-priority streams, and an event pool;
/// per thread a current device and a current stream of each device.
///
/// A context lives for the rest of the process (like a CUDA context), so
/// the [`Stream`] values it hands out can be copied freely.
pub struct DeviceContext {
    api: Arc<dyn DeviceApi>,
    pub(crate) id: usize,
    devices: Box<[DeviceStreams]>,
}

impl fmt::Debug for DeviceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceContext")
            .field("vendor", &self.api.name())
            .field("devices", &self.devices.len())
            .finish()
    }
}

impl DeviceContext {
    /// A context over `api`'s devices, living for the rest of the process.
    /// Fails with the vendor's error when it has no device.
    pub fn new(api: Arc<dyn DeviceApi>) -> Result<&'static DeviceContext> {
        static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
        let count = api.device_count()?;
        let devices = (0..count)
            .map(|_| DeviceStreams {
                normal: StreamPool::new(STREAMS_PER_POOL),
                high: StreamPool::new(STREAMS_PER_POOL),
                created: Mutex::new(Vec::new()),
                events: EventPool::new(),
            })
            .collect();
        let ctx: &'static DeviceContext = Box::leak(Box::new(DeviceContext {
            api,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            devices,
        }));
        // Every context stays reachable (leak checkers see it as kept, not
        // lost) for the rest of the process, as its streams may be used.
        static ALL: std::sync::Mutex<Vec<&'static DeviceContext>> =
            std::sync::Mutex::new(Vec::new());
        ALL.lock().unwrap_or_else(|p| p.into_inner()).push(ctx);
        Ok(ctx)
    }

    /// The vendor.
    pub fn api(&self) -> &Arc<dyn DeviceApi> {
        &self.api
    }

    /// Number of devices.
    pub fn device_count(&self) -> i32 {
        self.devices.len() as i32
    }

    /// `device` as an index into the per-device tables, or `InvalidDevice`.
    #[inline]
    pub(crate) fn check_device(&self, device: i32) -> Result<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&d| d < self.devices.len())
            .ok_or_else(|| Error::invalid_device(device, self.device_count()))
    }

    /// The calling thread's current device (initially the vendor's, 0).
    pub fn current_device(&self) -> Result<i32> {
        current::current_device(self)
    }

    /// Makes `device` current for the calling thread.
    pub fn set_device(&self, device: i32) -> Result<()> {
        current::exchange_device(self, device).map(drop)
    }

    /// Waits until all work on every stream of `device` is done.
    pub fn synchronize_device(&self, device: i32) -> Result<()> {
        let _guard = DeviceGuard::new(self, device)?;
        self.api.synchronize_device()
    }

    /// The default stream of `device`.
    pub fn default_stream(&'static self, device: i32) -> Result<Stream> {
        self.check_device(device)?;
        Ok(Stream {
            ctx: self,
            device,
            id: StreamId::DEFAULT,
            raw: StreamHandle::DEFAULT,
        })
    }

    /// The next stream of `device`'s pool of 32 normal- or high-priority
    /// streams (created together on first use, handed out round-robin).
    pub fn stream_from_pool(&'static self, device: i32, high_priority: bool) -> Result<Stream> {
        let slot = self.check_device(device)?;
        let streams = &self.devices[slot];
        let pool = if high_priority {
            &streams.high
        } else {
            &streams.normal
        };
        let (index, raw) = pool.next(|| {
            let _guard = DeviceGuard::new(self, device)?;
            let priority = if high_priority {
                self.api.stream_priority_range()?.greatest
            } else {
                0
            };
            self.api.stream_create(priority)
        })?;
        Ok(Stream {
            ctx: self,
            device,
            id: StreamId::new(StreamKind::Pool { high_priority }, index),
            raw,
        })
    }

    /// A new stream of `device` with `priority` (0 normal, negative more
    /// urgent; clamped to the vendor's range). It lives for the process.
    pub fn new_stream(&'static self, device: i32, priority: i32) -> Result<Stream> {
        let slot = self.check_device(device)?;
        let raw = {
            let _guard = DeviceGuard::new(self, device)?;
            let range = self.api.stream_priority_range()?;
            self.api.stream_create(range.clamp(priority))?
        };
        let index = {
            let mut created = self.devices[slot].created.lock();
            created.push(raw);
            created.len() as u32 - 1
        };
        Ok(Stream {
            ctx: self,
            device,
            id: StreamId::new(StreamKind::Created, index),
            raw,
        })
    }

    /// `device`'s stream for `raw`, a vendor stream handle made outside
    /// dipu-rs (e.g. by a library the framework calls), so work can be
    /// queued on it: the same stream for the same handle. The handle stays
    /// its maker's (dipu-rs never destroys it) and must outlive its use.
    /// `InvalidArgument` for the null handle (the default stream has its
    /// own call).
    pub fn external_stream(&'static self, device: i32, raw: u64) -> Result<Stream> {
        let slot = self.check_device(device)?;
        if raw == 0 {
            return Err(Error::invalid_argument(
                "an external stream handle is 0 (the default stream: use default_stream)",
            ));
        }
        let raw = StreamHandle::from_raw(raw);
        let index = {
            let mut created = self.devices[slot].created.lock();
            match created.iter().position(|h| *h == raw) {
                Some(i) => i as u32,
                None => {
                    created.push(raw);
                    created.len() as u32 - 1
                }
            }
        };
        Ok(Stream {
            ctx: self,
            device,
            id: StreamId::new(StreamKind::Created, index),
            raw,
        })
    }

    /// The stream of `device` whose id is `id` (its [`StreamId::as_u32`])
    /// and whose vendor handle is `raw`, if this context handed it out
    /// (`None` for a made-up, corrupted or foreign value); `InvalidDevice`
    /// for a bad device. Default and pool streams are found without a
    /// lock, streams from `new_stream` under their device's lock.
    #[inline]
    pub fn stream_from_parts(
        &'static self,
        device: i32,
        id: u32,
        raw: u64,
    ) -> Result<Option<Stream>> {
        Ok(self
            .stream_from_id(device, id)?
            .filter(|s| s.raw.as_raw() == raw))
    }

    /// [`DeviceContext::stream_from_parts`] for the streams frameworks pass
    /// on every call (default and pooled ones), without a lock or an error
    /// value, inlined into the caller: `None` for anything else (a created
    /// stream, a bad device, a handle that does not match), which
    /// `stream_from_parts` then answers.
    #[inline]
    pub fn pooled_stream_from_parts(
        &'static self,
        device: i32,
        id: u32,
        raw: u64,
    ) -> Option<Stream> {
        let streams = self.devices.get(usize::try_from(device).ok()?)?;
        let id = StreamId(id);
        let handle = match id.kind() {
            StreamKind::Default if id.index() == 0 => StreamHandle::DEFAULT,
            StreamKind::Pool { high_priority } => match high_priority {
                true => streams.high.get(id.index())?,
                false => streams.normal.get(id.index())?,
            },
            _ => return None,
        };
        (handle.as_raw() == raw).then_some(Stream {
            ctx: self,
            device,
            id,
            raw: handle,
        })
    }

    /// The stream of `device` whose id is `id`, if this context handed one
    /// out (`InvalidDevice` for a bad device): a stream rebuilt from the
    /// (device, id) pair frameworks keep. No lock for default and pool
    /// streams, the device's lock for created ones.
    pub fn stream_from_id(&'static self, device: i32, id: u32) -> Result<Option<Stream>> {
        let slot = self.check_device(device)?;
        let id = StreamId(id);
        let streams = &self.devices[slot];
        let handle = match id.kind() {
            StreamKind::Default => (id.index() == 0).then_some(StreamHandle::DEFAULT),
            StreamKind::Pool { high_priority } => match high_priority {
                true => streams.high.get(id.index()),
                false => streams.normal.get(id.index()),
            },
            StreamKind::Created => streams.created.lock().get(id.index() as usize).copied(),
        };
        Ok(handle.map(|raw| Stream {
            ctx: self,
            device,
            id,
            raw,
        }))
    }

    /// The calling thread's current stream on `device` (initially its default stream).
    pub fn current_stream(&'static self, device: i32) -> Result<Stream> {
        current::current_stream(self, device)
    }

    /// Makes `stream` the calling thread's current stream on its device.
    pub fn set_current_stream(&self, stream: Stream) {
        current::exchange_stream(stream);
    }

    /// A timing-free event of `device` from its pool; it returns there when dropped.
    pub fn pooled_event(&'static self, device: i32) -> Result<PooledEvent> {
        let slot = self.check_device(device)?;
        self.devices[slot]
            .events
            .get(|| {
                let _guard = DeviceGuard::new(self, device)?;
                self.api.event_create(false)
            })
            .map(|raw| PooledEvent::new(self, device, raw))
    }

    /// Puts a pooled event back (called by `PooledEvent`'s drop).
    pub(crate) fn return_event(&self, device: i32, raw: dipu_deviceapi::EventHandle) {
        self.devices[device as usize].events.put(raw);
    }
}
