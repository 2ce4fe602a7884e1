//! Raw copies and memsets, with every device pointer checked against the
//! runtime's live allocations.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, Error, Result};
use dipu_stream::{OptionalDeviceGuard, Stream};

use crate::Runtime;

/// The devices of a checked copy's two sides (`None`: host memory).
struct Checked {
    dst: Option<i32>,
    src: Option<i32>,
}

impl Runtime {
    /// The allocators' range check, with the
    /// memory checker's account (backtraces) of a failure when it is on.
    fn check_range(
        &self,
        ptr: *const c_void,
        bytes: usize,
        op: &str,
        what: &str,
    ) -> Result<crate::LiveAllocation> {
        self.live_range(ptr, bytes, op, what).map_err(|e| {
            match dipu_memcheck::enabled() && !ptr.is_null() {
                true => dipu_memcheck::check_access(ptr as usize, e),
                false => e,
            }
        })
    }

    /// Checks a copy of `bytes` from `src` to `dst` in direction `kind`:
    /// device sides must lie inside one live allocation of this runtime,
    /// host sides must not be null. `None` when there is nothing to copy.
    fn check_copy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        op: &str,
    ) -> Result<Option<Checked>> {
        if bytes == 0 {
            return Ok(None);
        }
        let side = |ptr: *const c_void, is_device: bool, what: &str| -> Result<Option<i32>> {
            if is_device {
                return Ok(Some(self.check_range(ptr, bytes, op, what)?.device));
            }
            if ptr.is_null() {
                return Err(Error::invalid_argument(format!(
                    "{op}: {what} is a null host pointer ({bytes} bytes)"
                )));
            }
            Ok(None)
        };
        Ok(Some(Checked {
            dst: side(dst, kind.dst_is_device(), "the destination")?,
            src: side(src, kind.src_is_device(), "the source")?,
        }))
    }

    /// Copies `bytes` bytes from `src` to `dst` in direction `kind` and
    /// returns when done. A device-to-device copy between two devices goes
    /// through the vendor's peer copy.
    ///
    /// Device pointers are checked: each device side must lie inside one
    /// live allocation made through this runtime, else `InvalidArgument`.
    ///
    /// # Safety
    /// Host sides must be valid for `bytes` bytes (readable for `src`,
    /// writable for `dst`), and the ranges must not overlap.
    pub unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
    ) -> Result<()> {
        let Some(c) = self.check_copy(dst, src, bytes, kind, "memcpy")? else {
            return Ok(());
        };
        let _guard = OptionalDeviceGuard::new(self.ctx, c.dst.or(c.src))?;
        let api = &self.vendor.api;
        match (c.dst, c.src) {
            (Some(dd), Some(sd)) if dd != sd => {
                // SAFETY: both device ranges are inside live allocations of
                // their devices (checked above).
                unsafe { api.memcpy_peer(dst, dd, src, sd, bytes) }
            }
            // SAFETY: device ranges are checked above; host ranges are
            // valid by this function's contract.
            _ => unsafe { api.memcpy(dst, src, bytes, kind) },
        }
    }

    /// Copies `bytes` bytes from `src` to `dst` in direction `kind`, in
    /// order on `stream` (a stream of this runtime), without waiting.
    /// Checked like [`Runtime::memcpy`].
    ///
    /// # Safety
    /// As for [`Runtime::memcpy`]; moreover host memory must stay valid and
    /// must not be accessed (written, for `src`; at all, for `dst`) until
    /// the work queued on `stream` so far is done, and device memory must
    /// not be freed before then unless it was allocated on `stream` or
    /// recorded on it with `record_stream`.
    pub unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: Stream,
    ) -> Result<()> {
        self.check_stream(&stream, "memcpy_async")?;
        let Some(c) = self.check_copy(dst, src, bytes, kind, "memcpy_async")? else {
            return Ok(());
        };
        // The default stream's handle means "the current device's".
        let _guard = OptionalDeviceGuard::new(self.ctx, Some(stream.device()))?;
        let api = &self.vendor.api;
        match (c.dst, c.src) {
            (Some(dd), Some(sd)) if dd != sd => {
                // SAFETY: as in `memcpy`; the stream is this context's.
                unsafe { api.memcpy_peer_async(dst, dd, src, sd, bytes, stream.raw()) }
            }
            // SAFETY: as in `memcpy`; the stream is this context's, and the
            // caller keeps host memory valid until the stream gets there.
            _ => unsafe { api.memcpy_async(dst, src, bytes, kind, stream.raw()) },
        }
    }

    /// Sets `bytes` bytes of device memory at `dst` to `value` and returns
    /// when done. `dst..dst + bytes` must lie inside one live allocation of
    /// this runtime, else `InvalidArgument`.
    ///
    /// # Safety
    /// No other work may use the range meanwhile (the range itself is
    /// checked, so this is about ordering, not validity).
    pub unsafe fn memset(&self, dst: *mut c_void, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let a = self.check_range(dst, bytes, "memset", "the destination")?;
        let _guard = OptionalDeviceGuard::new(self.ctx, Some(a.device))?;
        // SAFETY: the range is inside a live allocation (checked above).
        unsafe { self.vendor.api.memset(dst, value, bytes) }
    }

    /// Sets `bytes` bytes of device memory at `dst` to `value`, in order on
    /// `stream`, without waiting. Checked like [`Runtime::memset`].
    ///
    /// # Safety
    /// The memory must not be freed before the work queued on `stream` so
    /// far is done, unless it was allocated on `stream` or recorded on it.
    pub unsafe fn memset_async(
        &self,
        dst: *mut c_void,
        value: u8,
        bytes: usize,
        stream: Stream,
    ) -> Result<()> {
        self.check_stream(&stream, "memset_async")?;
        if bytes == 0 {
            return Ok(());
        }
        self.live_range(dst, bytes, "memset_async", "the destination")?;
        let _guard = OptionalDeviceGuard::new(self.ctx, Some(stream.device()))?;
        // SAFETY: the range is inside a live allocation (checked above) and
        // the stream is this context's.
        unsafe {
            self.vendor
                .api
                .memset_async(dst, value, bytes, stream.raw())
        }
    }
}
