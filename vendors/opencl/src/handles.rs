//! OpenCL object handles that cross threads, and temporary events that
//! release themselves.
//!
//! OpenCL objects are reference-counted handles that every API call except
//! `clSetKernelArg`/`clSetKernelExecInfo` may use from any thread (OpenCL
//! 3.0, "Shared OpenCL Objects" and "Multiple Host Threads"); the raw
//! pointers are wrapped only to say so to Rust.

use std::ffi::c_void;

use crate::cl::{cl_command_queue, cl_context, cl_device_id, cl_event, cl_mem, cl_platform_id, Cl};

/// Declares a `Copy` newtype over an OpenCL handle that is `Send + Sync`.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident($raw:ty)) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) $raw);

        // SAFETY: OpenCL handles may be used from any host thread (see the
        // module documentation); the wrapper adds no state of its own.
        unsafe impl Send for $name {}
        // SAFETY: as for Send: OpenCL's calls on these objects are thread-safe.
        unsafe impl Sync for $name {}
    };
}

handle!(
    /// A `cl_platform_id`.
    PlatformId(cl_platform_id)
);
handle!(
    /// A `cl_device_id`.
    DeviceId(cl_device_id)
);
handle!(
    /// A `cl_context`.
    Context(cl_context)
);
handle!(
    /// A `cl_command_queue`.
    Queue(cl_command_queue)
);
handle!(
    /// A `cl_event` (released by whoever holds it).
    Ev(cl_event)
);
handle!(
    /// A `cl_mem` (a pinned host buffer).
    Mem(cl_mem)
);

impl Queue {
    /// The queue as a stream handle's raw value.
    pub(crate) fn raw(self) -> u64 {
        self.0 as usize as u64
    }

    /// The queue a stream handle's raw value names.
    pub(crate) fn from_raw(raw: u64) -> Queue {
        Queue(raw as usize as *mut c_void)
    }
}

/// An event this vendor owns for a while (a marker waited for, a retained
/// reference): released when dropped.
pub(crate) struct OwnedEv<'a> {
    cl: &'a Cl,
    ev: Ev,
}

impl<'a> OwnedEv<'a> {
    /// Takes over one reference to `ev`.
    pub(crate) fn new(cl: &'a Cl, ev: Ev) -> Self {
        OwnedEv { cl, ev }
    }

    /// The event.
    pub(crate) fn get(&self) -> Ev {
        self.ev
    }

    /// Gives up the reference without releasing it (to store it).
    pub(crate) fn into_inner(self) -> Ev {
        let ev = self.ev;
        std::mem::forget(self);
        ev
    }
}

impl Drop for OwnedEv<'_> {
    fn drop(&mut self) {
        release_event(self.cl, self.ev);
    }
}

/// `clReleaseEvent`, logging a failure (a release has no one to report to).
pub(crate) fn release_event(cl: &Cl, ev: Ev) {
    if let Ok(release) = cl.clReleaseEvent() {
        // SAFETY: the caller gives up one reference it held to a live event.
        let code = unsafe { release(ev.0) };
        if code != 0 {
            tracing::warn!("{}", crate::errors::error(code, "clReleaseEvent"));
        }
    }
}

/// `clRetainEvent`: one more reference to `ev`, released when dropped.
pub(crate) fn retain_event(cl: &Cl, ev: Ev) -> dipu_deviceapi::Result<OwnedEv<'_>> {
    // SAFETY: `ev` is a live event the caller holds a reference to.
    let code = unsafe { (cl.clRetainEvent()?)(ev.0) };
    crate::errors::check(code, || "clRetainEvent".into())?;
    Ok(OwnedEv::new(cl, ev))
}
