//! The vendor decorator: every vendor call on its host thread's track, and
//! the work it queues on its stream's track at device time.
//!
//! Work queued on a stream (copies, memsets, collectives, event records
//! and waits) is bracketed by two timing events of the profiler's own; a
//! per-device anchor event, synchronized so that its completion is a host
//! time known to within half a record-and-synchronise round (the narrowest
//! of a few, stated in the trace), turns their elapsed times into the host
//! clock.
//! Device slices reach the ring once their events have completed (checked
//! as work is queued, and waited for before a dump). Off, each call costs
//! one relaxed load.

mod api;
mod device;

use std::sync::Arc;

use dipu_deviceapi::DeviceApi;

use crate::ring::{register_flusher, Flush};

/// Wraps `api` so that its calls are recorded while the trace is on.
pub fn wrap(api: Arc<dyn DeviceApi>) -> Arc<dyn DeviceApi> {
    let device = Arc::new(device::DeviceTimes::new(Arc::clone(&api)));
    let flusher: Arc<dyn Flush> = device.clone();
    register_flusher(&flusher);
    Arc::new(api::Profiled { inner: api, device })
}
