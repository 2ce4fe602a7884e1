//! A per-device pool of timing-free events for reuse (the allocator and the
//! process group record many events; creating each anew costs a vendor call).

use dipu_deviceapi::{Error, EventHandle, Result};

use crate::sync::Mutex;
use crate::{DeviceContext, DeviceGuard, Stream};

/// Idle events of one device.
#[derive(Default)]
pub(crate) struct EventPool {
    free: Mutex<Vec<EventHandle>>,
}

impl EventPool {
    /// An empty pool.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// An idle event, or a new one from `create` when none is idle.
    pub(crate) fn get(&self, create: impl FnOnce() -> Result<EventHandle>) -> Result<EventHandle> {
        let reused = self.free.lock().pop();
        match reused {
            Some(event) => Ok(event),
            None => create(),
        }
    }

    /// Returns an event for reuse.
    pub(crate) fn put(&self, event: EventHandle) {
        self.free.lock().push(event);
    }

    /// Number of idle events.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn idle(&self) -> usize {
        self.free.lock().len()
    }
}

/// A timing-free event borrowed from its device's pool; dropping it returns
/// it. Records and waits as [`crate::Event`] does, but is always created.
#[derive(Debug)]
pub struct PooledEvent {
    ctx: &'static DeviceContext,
    device: i32,
    raw: EventHandle,
}

impl PooledEvent {
    pub(crate) fn new(ctx: &'static DeviceContext, device: i32, raw: EventHandle) -> Self {
        PooledEvent { ctx, device, raw }
    }

    /// The device the event belongs to.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The vendor's handle.
    pub fn raw(&self) -> EventHandle {
        self.raw
    }

    /// Captures the work queued on `stream` so far (a stream of the event's device).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        if stream.device() != self.device {
            return Err(wrong_device(self.device, stream.device()));
        }
        let _guard = DeviceGuard::new(self.ctx, self.device)?;
        // SAFETY: the event and the stream came from this context's vendor
        // and are alive (pooled events are never destroyed, streams neither).
        unsafe { self.ctx.api().event_record(self.raw, stream.raw()) }
    }

    /// Makes later work on `stream` (of any device) wait for the last record.
    pub fn block(&self, stream: &Stream) -> Result<()> {
        let _guard = DeviceGuard::new(self.ctx, stream.device())?;
        // SAFETY: as in `record`.
        unsafe { self.ctx.api().stream_wait_event(stream.raw(), self.raw) }
    }

    /// Whether the last record is done.
    pub fn query(&self) -> Result<bool> {
        // SAFETY: as in `record`.
        unsafe { self.ctx.api().event_query(self.raw) }
    }

    /// Waits on the host until the last record is done.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: as in `record`.
        unsafe { self.ctx.api().event_synchronize(self.raw) }
    }
}

impl Drop for PooledEvent {
    fn drop(&mut self) {
        self.ctx.return_event(self.device, self.raw);
    }
}

/// The error for recording on a stream of another device.
pub(crate) fn wrong_device(event_device: i32, stream_device: i32) -> Error {
    Error::invalid_argument(format!(
        "an event of device {event_device} cannot be recorded on a stream of device {stream_device}: \
         record it on a stream of device {event_device}, or use an event of device {stream_device} \
         (any stream may wait on any device's event)"
    ))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reuses_returned_events_before_creating() {
        let pool = EventPool::new();
        let a = pool.get(|| Ok(EventHandle::from_raw(1))).unwrap();
        let b = pool.get(|| Ok(EventHandle::from_raw(2))).unwrap();
        assert_ne!(a, b);
        pool.put(a);
        let c = pool.get(|| panic!("an idle event exists")).unwrap();
        assert_eq!(c, a);
        assert_eq!(pool.idle(), 0);
        let e = pool
            .get(|| Err(Error::new(dipu_deviceapi::ErrorKind::OutOfMemory, "none")))
            .unwrap_err();
        assert_eq!(e.kind(), dipu_deviceapi::ErrorKind::OutOfMemory);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::{AtomicU64, Ordering};
    use loom::sync::Arc;

    /// Two threads each take an event, use it and give it back, while the
    /// pool starts with one idle event: no event is ever held by both at
    /// once, and every event ends up idle again.
    #[test]
    fn get_and_put_never_share_an_event() {
        loom::model(|| {
            let pool = Arc::new(EventPool::new());
            pool.put(EventHandle::from_raw(1));
            let next = Arc::new(AtomicU64::new(2));
            let held = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
            let worker = {
                let (pool, next, held) = (pool.clone(), next.clone(), held.clone());
                move || {
                    let e = pool
                        .get(|| Ok(EventHandle::from_raw(next.fetch_add(1, Ordering::Relaxed))))
                        .unwrap();
                    let slot = &held[e.as_raw() as usize - 1];
                    assert_eq!(
                        slot.fetch_add(1, Ordering::SeqCst),
                        0,
                        "event {e:?} handed out twice"
                    );
                    slot.fetch_sub(1, Ordering::SeqCst);
                    pool.put(e);
                }
            };
            let t = loom::thread::spawn(worker.clone());
            worker();
            t.join().unwrap();
            let made = next.load(Ordering::Relaxed) - 1;
            assert_eq!(pool.free.lock().len() as u64, made, "every event came back");
        });
    }
}
