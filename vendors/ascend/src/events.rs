//! Events. ACL's `...WithFlag` events can be waited on only with
//! `ACL_EVENT_SYNC`, so a timing-free event is `SYNC` and a timing event
//! `SYNC | TIME_LINE`. ACL has no notion of "never recorded" that the
//! trait's answers need, so the vendor tracks it.

use std::collections::HashMap;

use dipu_deviceapi::{Error, ErrorKind, EventHandle, Result, StreamHandle};
use parking_lot::Mutex;

use crate::acl::*;
use crate::streams::acl_stream;
use crate::AscendVendor;

/// An event handle as `aclrtEvent`.
pub(crate) fn acl_event(event: EventHandle) -> aclrtEvent {
    event.as_raw() as usize as aclrtEvent
}

/// What the vendor remembers of an event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventInfo {
    /// Created with `ACL_EVENT_TIME_LINE`.
    pub(crate) timing: bool,
    /// Recorded at least once.
    pub(crate) recorded: bool,
}

/// The live events, by their `aclrtEvent` address.
pub(crate) type Events = Mutex<HashMap<usize, EventInfo>>;

impl AscendVendor {
    /// `aclrtCreateEventWithFlag(SYNC [| TIME_LINE])`; running out of the
    /// device's events is a clear error.
    pub(crate) fn create_event(&self, timing: bool) -> Result<EventHandle> {
        let device = self.bind()?;
        let flags = if timing {
            ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE
        } else {
            ACL_EVENT_SYNC
        };
        let mut event = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.acl.aclrtCreateEventWithFlag()?)(&mut event, flags) };
        self.acl.check(code, || {
            format!("aclrtCreateEventWithFlag({flags:#x}) on device {device}")
        })?;
        if event.is_null() {
            return Err(Error::new(
                ErrorKind::Internal,
                "aclrtCreateEventWithFlag returned a null event",
            ));
        }
        self.events.lock().insert(
            event as usize,
            EventInfo {
                timing,
                recorded: false,
            },
        );
        Ok(EventHandle::from_raw(event as usize as u64))
    }

    /// The vendor's record of a live event.
    pub(crate) fn event_info(&self, event: EventHandle) -> Result<EventInfo> {
        self.events
            .lock()
            .get(&(event.as_raw() as usize))
            .copied()
            .ok_or_else(|| {
                Error::invalid_argument(format!("{event:?} is not a live event of this vendor"))
            })
    }

    /// `aclrtDestroyEvent`.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn destroy_event(&self, event: EventHandle) -> Result<()> {
        self.event_info(event)?;
        self.bind()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.acl.aclrtDestroyEvent()?)(acl_event(event)) };
        self.acl
            .check(code, || format!("aclrtDestroyEvent({event:?})"))?;
        self.events.lock().remove(&(event.as_raw() as usize));
        Ok(())
    }

    /// `aclrtRecordEvent`.
    ///
    /// # Safety
    /// `event` is live and `stream` live or the default stream.
    pub(crate) unsafe fn record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        self.event_info(event)?;
        self.bind()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.acl.aclrtRecordEvent()?)(acl_event(event), acl_stream(stream)) };
        self.acl
            .check(code, || format!("aclrtRecordEvent({event:?}, {stream:?})"))?;
        if let Some(info) = self.events.lock().get_mut(&(event.as_raw() as usize)) {
            info.recorded = true;
        }
        Ok(())
    }

    /// `aclrtQueryEventStatus`; `true` for an event never recorded.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn query_event(&self, event: EventHandle) -> Result<bool> {
        if !self.event_info(event)?.recorded {
            return Ok(true);
        }
        self.bind()?;
        let mut status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        // SAFETY: by the caller's contract; a valid out-pointer.
        let code = unsafe { (self.acl.aclrtQueryEventStatus()?)(acl_event(event), &mut status) };
        if code == ACL_ERROR_RT_EVENT_NOT_COMPLETE {
            return Ok(false);
        }
        self.acl
            .check(code, || format!("aclrtQueryEventStatus({event:?})"))?;
        Ok(status == ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    /// `aclrtSynchronizeEvent`; at once for an event never recorded.
    ///
    /// # Safety
    /// `event` is live.
    pub(crate) unsafe fn sync_event(&self, event: EventHandle) -> Result<()> {
        if !self.event_info(event)?.recorded {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.acl.aclrtSynchronizeEvent()?)(acl_event(event)) };
        self.acl
            .check(code, || format!("aclrtSynchronizeEvent({event:?})"))
    }

    /// `aclrtEventElapsedTime` of two completed timing events; a pending
    /// one is `NotReady`, a timing-free or never-recorded one
    /// `InvalidArgument` (checked here, not left to ACL).
    ///
    /// # Safety
    /// Both events are live.
    pub(crate) unsafe fn elapsed(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        for (name, event) in [("start", start), ("end", end)] {
            let info = self.event_info(event)?;
            if !info.timing {
                return Err(Error::invalid_argument(format!(
                    "elapsed time: the {name} event {event:?} was created without timing"
                )));
            }
            if !info.recorded {
                return Err(Error::invalid_argument(format!(
                    "elapsed time: the {name} event {event:?} was never recorded"
                )));
            }
            // SAFETY: a live event.
            if !unsafe { self.query_event(event)? } {
                return Err(Error::new(
                    ErrorKind::NotReady,
                    format!("elapsed time: the {name} event {event:?} is still pending"),
                ));
            }
        }
        let mut ms = 0f32;
        // SAFETY: a valid out-pointer; live, completed events.
        let code = unsafe {
            (self.acl.aclrtEventElapsedTime()?)(&mut ms, acl_event(start), acl_event(end))
        };
        self.acl.check(code, || {
            format!("aclrtEventElapsedTime({start:?}, {end:?})")
        })?;
        Ok(ms)
    }
}
