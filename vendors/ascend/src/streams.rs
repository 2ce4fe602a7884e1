//! Streams: create (with ACL's priority where it has one), destroy (after
//! synchronising, with the stream's device current), synchronise, query,
//! wait on events.

use std::collections::HashMap;

use dipu_deviceapi::{Error, ErrorKind, EventHandle, PriorityRange, Result, StreamHandle};
use parking_lot::Mutex;

use crate::acl::*;
use crate::AscendVendor;

/// A stream handle as `aclrtStream` (the default stream is null).
pub(crate) fn acl_stream(stream: StreamHandle) -> aclrtStream {
    stream.as_raw() as usize as aclrtStream
}

/// What the vendor remembers of a stream it created.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamInfo {
    /// The device it belongs to.
    pub(crate) device: i32,
    /// Subscribed to the callback thread (`aclrtSubscribeReport`).
    pub(crate) subscribed: bool,
}

/// The streams the vendor created, by their `aclrtStream` address.
pub(crate) type Streams = Mutex<HashMap<usize, StreamInfo>>;

impl AscendVendor {
    /// `(0, 0)` (ACL documents stream priority as reserved), unless
    /// `aclrtDeviceGetStreamPriorityRange` exists: then its range,
    /// translated to ours (0 least urgent, negative more urgent).
    pub(crate) fn priorities(&self) -> Result<PriorityRange> {
        Ok(match self.acl_priorities()? {
            Some((least, greatest)) => PriorityRange {
                least: 0,
                greatest: -(least - greatest).abs(),
            },
            None => PriorityRange {
                least: 0,
                greatest: 0,
            },
        })
    }

    /// ACL's own `(least, greatest)`, when it has the call.
    fn acl_priorities(&self) -> Result<Option<(i32, i32)>> {
        let Ok(range) = self.acl.aclrtDeviceGetStreamPriorityRange() else {
            return Ok(None);
        };
        self.bind()?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: valid out-pointers.
        let code = unsafe { range(&mut least, &mut greatest) };
        self.acl
            .check(code, || "aclrtDeviceGetStreamPriorityRange".into())?;
        Ok(Some((least, greatest)))
    }

    /// A stream on the current device; our priority (clamped) becomes
    /// ACL's by stepping from its least priority towards its greatest.
    pub(crate) fn create_stream(&self, priority: i32) -> Result<StreamHandle> {
        let device = self.bind()?;
        let steps = -self.priorities()?.clamp(priority);
        let acl_priority = match self.acl_priorities()? {
            Some((least, greatest)) => least + steps * (greatest - least).signum(),
            None => 0,
        };
        let mut stream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; flag 0 is the default stream kind.
        let code = unsafe {
            (self.acl.aclrtCreateStreamWithConfig()?)(&mut stream, acl_priority.max(0) as u32, 0)
        };
        self.acl.check(code, || {
            format!("aclrtCreateStreamWithConfig(priority {acl_priority}) on device {device}")
        })?;
        if stream.is_null() {
            return Err(Error::new(
                ErrorKind::Internal,
                "aclrtCreateStreamWithConfig returned a null stream",
            ));
        }
        self.streams.lock().insert(
            stream as usize,
            StreamInfo {
                device,
                subscribed: false,
            },
        );
        Ok(StreamHandle::from_raw(stream as usize as u64))
    }

    /// Destroys a stream: ACL needs it synchronised and its device current
    /// first, and unsubscribed from the callback thread.
    ///
    /// # Safety
    /// `stream` is a live stream of this vendor.
    pub(crate) unsafe fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        if stream.is_default() {
            return Err(Error::invalid_argument(
                "the default stream cannot be destroyed",
            ));
        }
        let info = self
            .streams
            .lock()
            .get(&(stream.as_raw() as usize))
            .copied();
        let info = info.ok_or_else(|| {
            Error::invalid_argument(format!("{stream:?} is not a live stream of this vendor"))
        })?;
        self.on_device(info.device, || {
            // SAFETY: a live stream.
            unsafe { self.sync_stream(stream)? };
            if info.subscribed {
                // SAFETY: a live, subscribed stream.
                unsafe { self.unsubscribe(stream)? };
            }
            // SAFETY: a live, synchronised stream with its device current.
            let code = unsafe { (self.acl.aclrtDestroyStream()?)(acl_stream(stream)) };
            self.acl
                .check(code, || format!("aclrtDestroyStream({stream:?})"))
        })?;
        self.streams.lock().remove(&(stream.as_raw() as usize));
        Ok(())
    }

    /// `aclrtSynchronizeStream`.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn sync_stream(&self, stream: StreamHandle) -> Result<()> {
        self.bind()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.acl.aclrtSynchronizeStream()?)(acl_stream(stream)) };
        self.acl
            .check(code, || format!("aclrtSynchronizeStream({stream:?})"))
    }

    /// `aclrtStreamQuery`: done, or `false` while work is pending.
    ///
    /// # Safety
    /// `stream` is live or the default stream.
    pub(crate) unsafe fn query_stream(&self, stream: StreamHandle) -> Result<bool> {
        self.bind()?;
        let mut status = ACL_STREAM_STATUS_NOT_READY;
        // SAFETY: by the caller's contract; a valid out-pointer.
        let code = unsafe { (self.acl.aclrtStreamQuery()?)(acl_stream(stream), &mut status) };
        if code == ACL_ERROR_RT_STREAM_NOT_COMPLETE {
            return Ok(false);
        }
        self.acl
            .check(code, || format!("aclrtStreamQuery({stream:?})"))?;
        Ok(status == ACL_STREAM_STATUS_COMPLETE)
    }

    /// `aclrtStreamWaitEvent` (stream first); an event never recorded is
    /// already done, so nothing is queued for it.
    ///
    /// # Safety
    /// `stream` and `event` are live (the stream may be the default one).
    pub(crate) unsafe fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        if !self.event_info(event)?.recorded {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: by the caller's contract.
        let code = unsafe {
            (self.acl.aclrtStreamWaitEvent()?)(acl_stream(stream), crate::events::acl_event(event))
        };
        self.acl.check(code, || {
            format!("aclrtStreamWaitEvent({stream:?}, {event:?})")
        })
    }
}
