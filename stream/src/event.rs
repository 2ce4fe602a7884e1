//! `Event`: c10's event, created lazily on its first record.

use dipu_deviceapi::{Error, ErrorKind, EventHandle, Result};

use crate::event_pool::wrong_device;
use crate::{DeviceContext, DeviceGuard, Stream};

/// Whether an event records timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventFlag {
    /// No timing: cheaper, for ordering only (c10's default).
    #[default]
    NoTiming,
    /// Records timestamps for [`Event::elapsed_time`].
    Timing,
}

/// A marker in a stream's work, as c10's `Event`: the vendor event is
/// created on the first [`Event::record`], on that stream's device, and
/// destroyed when the `Event` is dropped.
#[derive(Debug)]
pub struct Event {
    ctx: &'static DeviceContext,
    flag: EventFlag,
    created: Option<(i32, EventHandle)>,
    recorded: bool,
}

impl Event {
    /// An event not yet created on any device.
    pub fn new(ctx: &'static DeviceContext, flag: EventFlag) -> Event {
        Event {
            ctx,
            flag,
            created: None,
            recorded: false,
        }
    }

    /// The device the event was created on (none before the first record).
    pub fn device(&self) -> Option<i32> {
        self.created.map(|(device, _)| device)
    }

    /// The vendor handle, once created.
    pub fn raw(&self) -> Option<EventHandle> {
        self.created.map(|(_, raw)| raw)
    }

    /// Whether the event has been recorded at least once.
    pub fn was_recorded(&self) -> bool {
        self.recorded
    }

    /// Captures the work queued on `stream` so far. The first record
    /// creates the event on `stream`'s device; later records must use a
    /// stream of that same device.
    pub fn record(&mut self, stream: &Stream) -> Result<()> {
        let _guard = DeviceGuard::new(self.ctx, stream.device())?;
        let raw = match self.created {
            Some((device, raw)) if device == stream.device() => raw,
            Some((device, _)) => return Err(wrong_device(device, stream.device())),
            None => {
                let raw = self
                    .ctx
                    .api()
                    .event_create(self.flag == EventFlag::Timing)?;
                self.created = Some((stream.device(), raw));
                raw
            }
        };
        // SAFETY: the event is ours and alive; the stream came from this
        // context's vendor and is never destroyed; its device is current.
        unsafe { self.ctx.api().event_record(raw, stream.raw()) }?;
        self.recorded = true;
        Ok(())
    }

    /// Makes later work on `stream` (of any device) wait for the last
    /// record; the host does not wait. Nothing to wait for if never recorded.
    pub fn block(&self, stream: &Stream) -> Result<()> {
        let Some((_, raw)) = self.created.filter(|_| self.recorded) else {
            return Ok(());
        };
        let _guard = DeviceGuard::new(self.ctx, stream.device())?;
        // SAFETY: as in `record`.
        unsafe { self.ctx.api().stream_wait_event(stream.raw(), raw) }
    }

    /// Whether the last record is done (`true` if never recorded).
    pub fn query(&self) -> Result<bool> {
        match self.created {
            // SAFETY: the event is ours and alive.
            Some((_, raw)) if self.recorded => unsafe { self.ctx.api().event_query(raw) },
            _ => Ok(true),
        }
    }

    /// Waits on the host until the last record is done.
    pub fn synchronize(&self) -> Result<()> {
        match self.created {
            // SAFETY: the event is ours and alive.
            Some((_, raw)) if self.recorded => unsafe { self.ctx.api().event_synchronize(raw) },
            _ => Ok(()),
        }
    }

    /// Milliseconds from this event to `end`; both must be timing events,
    /// recorded and complete (`NotReady` while pending).
    pub fn elapsed_time(&self, end: &Event) -> Result<f32> {
        if self.flag != EventFlag::Timing || end.flag != EventFlag::Timing {
            return Err(Error::invalid_argument(
                "elapsed time needs two events created with EventFlag::Timing",
            ));
        }
        let (Some((_, start)), Some((_, stop))) = (self.created, end.created) else {
            return Err(Error::invalid_argument(
                "elapsed time needs two recorded events",
            ));
        };
        // SAFETY: both events are ours and alive.
        unsafe { self.ctx.api().event_elapsed_ms(start, stop) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some((device, raw)) = self.created {
            let destroyed = DeviceGuard::new(self.ctx, device)
                // SAFETY: the event is ours, alive, and never used again.
                .and_then(|_guard| unsafe { self.ctx.api().event_destroy(raw) });
            if let Err(e) = destroyed {
                if e.kind() != ErrorKind::NoDevice {
                    tracing::warn!("destroying an event of device {device} failed: {e}");
                }
            }
        }
    }
}
