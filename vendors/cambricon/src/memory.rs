//! Memory: device and pinned host allocations, fills and copies.

use std::ffi::{c_int, c_void};

use dipu_deviceapi::{CopyKind, Result, StreamHandle};

use crate::cnrt::*;
use crate::CambriconVendor;

/// Our `CopyKind` as `cnrtMemTransDir_t` (translated, never cast: CNRT's
/// order is HostToDev 0, DevToDev 1, DevToHost 2, HostToHost 3).
pub(crate) fn trans_dir(kind: CopyKind) -> cnrtMemTransDir_t {
    match kind {
        CopyKind::HostToDevice => cnrtMemcpyHostToDev,
        CopyKind::DeviceToHost => cnrtMemcpyDevToHost,
        CopyKind::DeviceToDevice => cnrtMemcpyDevToDev,
        CopyKind::HostToHost => cnrtMemcpyHostToHost,
    }
}

impl CambriconVendor {
    /// `cnrtMalloc`; zero bytes is null without a call.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cnrtMalloc()?)(&mut ptr, bytes) };
        self.rt.check(code, || {
            let device = self
                .current()
                .map_or_else(|_| "?".into(), |d| d.to_string());
            format!("cnrtMalloc({bytes} bytes) on device {device}")
        })?;
        Ok(ptr)
    }

    /// `cnrtFree`; null is a no-op.
    ///
    /// # Safety
    /// `ptr` came from [`CambriconVendor::alloc`].
    pub(crate) unsafe fn dealloc(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: by the caller's contract; CNRT validates the pointer.
        let code = unsafe { (self.rt.cnrtFree()?)(ptr) };
        self.rt.check(code, || format!("cnrtFree({ptr:p})"))
    }

    /// `cnrtHostMalloc`; zero bytes is null without a call.
    pub(crate) fn alloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cnrtHostMalloc()?)(&mut ptr, bytes) };
        self.rt
            .check(code, || format!("cnrtHostMalloc({bytes} bytes)"))?;
        Ok(ptr)
    }

    /// `cnrtFreeHost`; null is a no-op.
    ///
    /// # Safety
    /// `ptr` came from [`CambriconVendor::alloc_host`].
    pub(crate) unsafe fn dealloc_host(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: by the caller's contract; CNRT validates the pointer.
        let code = unsafe { (self.rt.cnrtFreeHost()?)(ptr) };
        self.rt.check(code, || format!("cnrtFreeHost({ptr:p})"))
    }

    /// `cnrtMemset` / `cnrtMemsetAsync` (with a stream).
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is live device memory.
    pub(crate) unsafe fn fill(
        &self,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        stream: Option<StreamHandle>,
    ) -> Result<()> {
        let value = c_int::from(value);
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe { (self.rt.cnrtMemset()?)(ptr, value, bytes) },
            Some(s) => {
                let queue = self.queue(s)?;
                // SAFETY: by the caller's contract; the queue is live.
                unsafe { (self.rt.cnrtMemsetAsync()?)(ptr, value, bytes, queue) }
            }
        };
        self.rt.check(code, || {
            format!("cnrtMemset({ptr:p}, {value}, {bytes} bytes)")
        })
    }

    /// `cnrtMemcpy` / `cnrtMemcpyAsync_V2` (with a stream). The async
    /// copy takes the queue *before* the direction.
    ///
    /// # Safety
    /// Both ranges are live for `bytes` bytes (until the stream passes the
    /// copy, for asynchronous copies) and of the kind `kind` says.
    pub(crate) unsafe fn copy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: Option<StreamHandle>,
    ) -> Result<()> {
        let dir = trans_dir(kind);
        // CNRT declares `src` non-const; it only reads it.
        let src_mut = src.cast_mut();
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe { (self.rt.cnrtMemcpy()?)(dst, src_mut, bytes, dir) },
            Some(s) => {
                let queue = self.queue(s)?;
                let copy = self.rt.cnrtMemcpyAsync_V2()?;
                // SAFETY: by the caller's contract; the queue is live.
                unsafe { copy(dst, src_mut, bytes, queue, dir) }
            }
        };
        self.rt.check(code, || {
            let call = if stream.is_some() {
                "cnrtMemcpyAsync"
            } else {
                "cnrtMemcpy"
            };
            format!("{call}({dst:p}, {src:p}, {bytes} bytes, {kind:?})")
        })
    }

    /// `cnrtMemcpyPeer` / `cnrtMemcpyPeerAsync` (with a stream).
    ///
    /// # Safety
    /// Both ranges are live device memory of the named devices.
    pub(crate) unsafe fn copy_peer(
        &self,
        dst: *mut c_void,
        dst_device: c_int,
        src: *const c_void,
        src_device: c_int,
        bytes: usize,
        stream: Option<StreamHandle>,
    ) -> Result<()> {
        self.check_device(dst_device)?;
        self.check_device(src_device)?;
        let src_mut = src.cast_mut();
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe {
                (self.rt.cnrtMemcpyPeer()?)(dst, dst_device, src_mut, src_device, bytes)
            },
            Some(s) => {
                let queue = self.queue(s)?;
                let copy = self.rt.cnrtMemcpyPeerAsync()?;
                // SAFETY: by the caller's contract; the queue is live.
                unsafe { copy(dst, dst_device, src_mut, src_device, bytes, queue) }
            }
        };
        self.rt.check(code, || {
            format!("cnrtMemcpyPeer(device {dst_device} {dst:p} <- device {src_device} {src:p}, {bytes} bytes)")
        })
    }
}
