//! Memory: device and pinned host allocations, fills and copies.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, Result, StreamHandle};

use crate::acl::*;
use crate::streams::acl_stream;
use crate::AscendVendor;

/// Our `CopyKind` as `aclrtMemcpyKind` (translated, never cast).
pub(crate) fn memcpy_kind(kind: CopyKind) -> aclrtMemcpyKind {
    match kind {
        CopyKind::HostToDevice => ACL_MEMCPY_HOST_TO_DEVICE,
        CopyKind::DeviceToHost => ACL_MEMCPY_DEVICE_TO_HOST,
        CopyKind::DeviceToDevice => ACL_MEMCPY_DEVICE_TO_DEVICE,
        CopyKind::HostToHost => ACL_MEMCPY_HOST_TO_HOST,
    }
}

impl AscendVendor {
    /// `aclrtMallocAlign32` (no 32-byte padding) where present, else
    /// `aclrtMalloc`; zero bytes is null without a call (ACL rejects it).
    pub(crate) fn alloc(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let device = self.bind()?;
        let (malloc, name) = match self.acl.aclrtMallocAlign32() {
            Ok(f) => (f, "aclrtMallocAlign32"),
            Err(_) => (self.acl.aclrtMalloc()?, "aclrtMalloc"),
        };
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and a non-zero size.
        let code = unsafe { malloc(&mut ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST) };
        self.acl
            .check(code, || format!("{name}({bytes} bytes) on device {device}"))?;
        Ok(ptr)
    }

    /// Frees device memory after the device's queued work (ACL's
    /// `aclrtFree` does not wait): `aclrtFreeWithDevSync` where present,
    /// else `aclrtSynchronizeDevice` then `aclrtFree`. Null is a no-op
    /// (ACL rejects it).
    ///
    /// # Safety
    /// `ptr` came from [`AscendVendor::alloc`].
    pub(crate) unsafe fn dealloc(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        self.bind()?;
        if let Ok(free) = self.acl.aclrtFreeWithDevSync() {
            // SAFETY: by the caller's contract; ACL validates the pointer.
            let code = unsafe { free(ptr) };
            return self
                .acl
                .check(code, || format!("aclrtFreeWithDevSync({ptr:p})"));
        }
        self.synchronize()?;
        // SAFETY: by the caller's contract; ACL validates the pointer.
        let code = unsafe { (self.acl.aclrtFree()?)(ptr) };
        self.acl.check(code, || format!("aclrtFree({ptr:p})"))
    }

    /// `aclrtMallocHost`; zero bytes is null without a call.
    pub(crate) fn alloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.acl.aclrtMallocHost()?)(&mut ptr, bytes) };
        self.acl
            .check(code, || format!("aclrtMallocHost({bytes} bytes)"))?;
        Ok(ptr)
    }

    /// `aclrtFreeHost` after the device's queued work; null is a no-op.
    ///
    /// # Safety
    /// `ptr` came from [`AscendVendor::alloc_host`].
    pub(crate) unsafe fn dealloc_host(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        self.synchronize()?;
        // SAFETY: by the caller's contract; ACL validates the pointer.
        let code = unsafe { (self.acl.aclrtFreeHost()?)(ptr) };
        self.acl.check(code, || format!("aclrtFreeHost({ptr:p})"))
    }

    /// `aclrtMemset` / `aclrtMemsetAsync`, with the byte count as `maxCount`.
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
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        if stream.is_none() {
            self.after_default_stream()?;
        }
        let value = i32::from(value);
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe { (self.acl.aclrtMemset()?)(ptr, bytes, value, bytes) },
            // SAFETY: by the caller's contract; the stream is live.
            Some(s) => unsafe {
                (self.acl.aclrtMemsetAsync()?)(ptr, bytes, value, bytes, acl_stream(s))
            },
        };
        self.acl.check(code, || {
            format!("aclrtMemset({ptr:p}, {value}, {bytes} bytes)")
        })
    }

    /// `aclrtMemcpy` / `aclrtMemcpyAsync`, with the byte count as
    /// `destMax`. An asynchronous host-to-host copy (which ACL refuses)
    /// runs as a host callback on the stream, so it stays in order.
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
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        if stream.is_none() {
            self.after_default_stream()?;
        }
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe { (self.acl.aclrtMemcpy()?)(dst, bytes, src, bytes, memcpy_kind(kind)) },
            Some(s) if kind == CopyKind::HostToHost => {
                let (dst, src) = (dst as usize, src as usize);
                let copy = move || {
                    // SAFETY: the caller keeps both host ranges alive until
                    // the stream passes this copy, which is when it runs.
                    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) }
                };
                // SAFETY: a live stream, by the caller's contract.
                return unsafe { self.host_func(s, Box::new(copy)) }
                    .map_err(|e| e.context("memcpy_async(HostToHost)"));
            }
            Some(s) => {
                let copy = self.acl.aclrtMemcpyAsync()?;
                // SAFETY: by the caller's contract; the stream is live.
                unsafe { copy(dst, bytes, src, bytes, memcpy_kind(kind), acl_stream(s)) }
            }
        };
        self.acl.check(code, || {
            let call = if stream.is_some() {
                "aclrtMemcpyAsync"
            } else {
                "aclrtMemcpy"
            };
            format!("{call}({dst:p}, {src:p}, {bytes} bytes, {kind:?})")
        })
    }

    /// Waits for the current device's default stream. The trait's
    /// synchronous copies and fills follow CUDA's, which are ordered after
    /// the default stream's work; ACL's `aclrtMemcpy` and `aclrtMemset` run
    /// at once, without any stream synchronisation.
    fn after_default_stream(&self) -> Result<()> {
        // SAFETY: the default (null) stream of the bound device.
        let code = unsafe { (self.acl.aclrtSynchronizeStream()?)(std::ptr::null_mut()) };
        self.acl
            .check(code, || "aclrtSynchronizeStream(default stream)".into())
    }

    /// A copy between two devices' memory: device to device once peer
    /// access is enabled both ways, else through host memory.
    ///
    /// # Safety
    /// Both ranges are live device memory of the named devices.
    pub(crate) unsafe fn copy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
        stream: Option<StreamHandle>,
    ) -> Result<()> {
        self.check_device(dst_device)?;
        self.check_device(src_device)?;
        if dst_device == src_device || self.enable_peers(dst_device, src_device)? {
            // SAFETY: by the caller's contract.
            return unsafe { self.copy(dst, src, bytes, CopyKind::DeviceToDevice, stream) };
        }
        // No peer access: bounce through host memory, in order after the
        // stream's earlier work.
        if let Some(s) = stream {
            // SAFETY: a live stream, by the caller's contract.
            unsafe { self.sync_stream(s)? };
        }
        let mut bounce = vec![0u8; bytes];
        self.on_device(src_device, || {
            // SAFETY: `src` is live memory of `src_device`; `bounce` has
            // `bytes` bytes.
            unsafe {
                self.copy(
                    bounce.as_mut_ptr().cast(),
                    src,
                    bytes,
                    CopyKind::DeviceToHost,
                    None,
                )
            }
        })?;
        self.on_device(dst_device, || {
            // SAFETY: as above, the other way.
            unsafe {
                self.copy(
                    dst,
                    bounce.as_ptr().cast(),
                    bytes,
                    CopyKind::HostToDevice,
                    None,
                )
            }
        })
    }

    /// Enables peer access between `a` and `b` both ways, once; `false`
    /// when ACL says either way is impossible, or fails to say or to
    /// enable it (the copy then goes through the host, which always works).
    fn enable_peers(&self, a: i32, b: i32) -> Result<bool> {
        let pair = (a.min(b), a.max(b));
        let mut peers = self.peers.lock();
        if peers.contains(&pair) {
            return Ok(true);
        }
        match self.try_enable_peers(a, b) {
            Ok(true) => {
                peers.insert(pair);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                tracing::debug!(target: "dipu::ascend", "no peer access between devices {a} and {b}: {e}");
                Ok(false)
            }
        }
    }

    fn try_enable_peers(&self, a: i32, b: i32) -> Result<bool> {
        for (from, to) in [(a, b), (b, a)] {
            let mut can = 0;
            // SAFETY: a valid out-pointer and checked devices.
            let code = unsafe { (self.acl.aclrtDeviceCanAccessPeer()?)(&mut can, from, to) };
            self.acl
                .check(code, || format!("aclrtDeviceCanAccessPeer({from}, {to})"))?;
            if can == 0 {
                return Ok(false);
            }
        }
        for (from, to) in [(a, b), (b, a)] {
            self.on_device(from, || {
                // SAFETY: a checked peer device; flags must be 0.
                let code = unsafe { (self.acl.aclrtDeviceEnablePeerAccess()?)(to, 0) };
                self.acl.check(code, || {
                    format!("aclrtDeviceEnablePeerAccess({to}) on device {from}")
                })
            })?;
        }
        Ok(true)
    }
}
