//! Memory: device and pinned host allocations, fills and copies.

use std::ffi::{c_int, c_void};

use dipu_deviceapi::{CopyKind, Error, Result, StreamHandle};

use crate::cudart::*;
use crate::CudaVendor;

/// Our `CopyKind` as `cudaMemcpyKind` (translated, never cast: the codes differ).
pub(crate) fn memcpy_kind(kind: CopyKind) -> cudaMemcpyKind {
    match kind {
        CopyKind::HostToDevice => cudaMemcpyHostToDevice,
        CopyKind::DeviceToHost => cudaMemcpyDeviceToHost,
        CopyKind::DeviceToDevice => cudaMemcpyDeviceToDevice,
        CopyKind::HostToHost => cudaMemcpyHostToHost,
    }
}

/// A stream handle as `cudaStream_t` (the default stream is null).
pub(crate) fn cuda_stream(stream: StreamHandle) -> cudaStream_t {
    stream.as_raw() as usize as cudaStream_t
}

impl CudaVendor {
    /// `cudaMalloc`; zero bytes is null without a call.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cudaMalloc()?)(&mut ptr, bytes) };
        self.rt.check(code, || {
            let device = self
                .current()
                .map_or_else(|_| "?".into(), |d| d.to_string());
            format!("cudaMalloc({bytes} bytes) on device {device}")
        })?;
        Ok(ptr)
    }

    /// `cudaFree`; null is a no-op.
    ///
    /// # Safety
    /// `ptr` came from [`CudaVendor::alloc`] (CUDA rejects other pointers).
    pub(crate) unsafe fn dealloc(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: by the caller's contract; CUDA validates the pointer.
        let code = unsafe { (self.rt.cudaFree()?)(ptr) };
        self.rt.check(code, || format!("cudaFree({ptr:p})"))
    }

    /// `cudaMallocHost`; zero bytes is null without a call.
    pub(crate) fn alloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cudaMallocHost()?)(&mut ptr, bytes) };
        self.rt
            .check(code, || format!("cudaMallocHost({bytes} bytes)"))?;
        Ok(ptr)
    }

    /// `cudaFreeHost`; null is a no-op.
    ///
    /// # Safety
    /// `ptr` came from [`CudaVendor::alloc_host`] (CUDA rejects others).
    pub(crate) unsafe fn dealloc_host(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: by the caller's contract; CUDA validates the pointer.
        let code = unsafe { (self.rt.cudaFreeHost()?)(ptr) };
        self.rt.check(code, || format!("cudaFreeHost({ptr:p})"))
    }

    /// `cudaMemset` / `cudaMemsetAsync` (with a stream).
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
            None => unsafe { (self.rt.cudaMemset()?)(ptr, value, bytes) },
            // SAFETY: by the caller's contract; the stream is live.
            Some(s) => unsafe { (self.rt.cudaMemsetAsync()?)(ptr, value, bytes, cuda_stream(s)) },
        };
        self.rt.check(code, || {
            format!("cudaMemset({ptr:p}, {value}, {bytes} bytes)")
        })?;
        if stream.is_none() {
            self.finish_legacy("cudaMemset")?;
        }
        Ok(())
    }

    /// Waits for the legacy default stream, where `cudaMemset`,
    /// `cudaMemcpy` and `cudaMemcpyPeer` put their work: they may return
    /// before it is done ("this function is asynchronous with respect to the
    /// host unless devPtr refers to pinned host memory"; device-to-device
    /// `cudaMemcpy`: "no host-side synchronization is performed"; pageable
    /// host-to-device `cudaMemcpy` returns once the data is staged), and
    /// our created streams are non-blocking, so they would not wait for it.
    /// The trait's synchronous calls are complete when they return.
    fn finish_legacy(&self, after: &str) -> Result<()> {
        // SAFETY: the legacy default stream (null) always exists.
        let code = unsafe { (self.rt.cudaStreamSynchronize()?)(std::ptr::null_mut()) };
        self.rt.check(code, || {
            format!("cudaStreamSynchronize(NULL) after {after}")
        })
    }

    /// `cudaMemcpy` / `cudaMemcpyAsync` (with a stream). An asynchronous
    /// host-to-host copy runs as a host function on the stream, so it is
    /// ordered after the stream's earlier work, as the trait promises.
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
        if bytes > 0 {
            self.check_direction(dst, src, kind)?;
        }
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe { (self.rt.cudaMemcpy()?)(dst, src, bytes, memcpy_kind(kind)) },
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
                let copy = self.rt.cudaMemcpyAsync()?;
                // SAFETY: by the caller's contract; the stream is live.
                unsafe { copy(dst, src, bytes, memcpy_kind(kind), cuda_stream(s)) }
            }
        };
        self.rt.check(code, || {
            let call = if stream.is_some() {
                "cudaMemcpyAsync"
            } else {
                "cudaMemcpy"
            };
            format!("{call}({dst:p}, {src:p}, {bytes} bytes, {kind:?})")
        })?;
        if stream.is_none() {
            self.finish_legacy("cudaMemcpy")?;
        }
        Ok(())
    }

    /// What CUDA says `ptr` is (`cudaMemoryType`), if it can say.
    fn memory_type(&self, ptr: *const c_void) -> Option<c_int> {
        let get = self.rt.cudaPointerGetAttributes().ok()?;
        let mut attributes = CudaPointerAttributes::zeroed();
        // SAFETY: a valid out-pointer to a whole struct; the pointer is only
        // looked up, never dereferenced.
        let code = unsafe { get(&mut attributes, ptr) };
        if code != cudaSuccess {
            let _ = self.rt.error(code, "");
            return None;
        }
        Some(attributes.type_)
    }

    /// `InvalidArgument` when a pointer is not on the side `kind` says
    /// (CUDA may copy the wrong way silently, or fail with a vague error).
    #[expect(non_upper_case_globals, reason = "matches on CUDA's constant names")]
    fn check_direction(&self, dst: *mut c_void, src: *const c_void, kind: CopyKind) -> Result<()> {
        let (src_device, dst_device) = match kind {
            CopyKind::HostToDevice => (false, true),
            CopyKind::DeviceToHost => (true, false),
            CopyKind::DeviceToDevice => (true, true),
            CopyKind::HostToHost => (false, false),
        };
        for (ptr, device, role) in [
            (src, src_device, "source"),
            (dst.cast_const(), dst_device, "destination"),
        ] {
            let Some(t) = self.memory_type(ptr) else {
                continue;
            };
            let is_device = t == cudaMemoryTypeDevice || t == cudaMemoryTypeManaged;
            if is_device != device && !(device && t == cudaMemoryTypeManaged) {
                let what = match t {
                    cudaMemoryTypeUnregistered => "pageable host memory",
                    cudaMemoryTypeHost => "pinned host memory",
                    cudaMemoryTypeDevice => "device memory",
                    _ => "managed memory",
                };
                return Err(Error::invalid_argument(format!(
                    "memcpy {kind:?}: the {role} {ptr:p} is {what} (cudaPointerGetAttributes), \
                     not {}",
                    if device {
                        "device memory"
                    } else {
                        "host memory"
                    }
                )));
            }
        }
        Ok(())
    }

    /// `cudaMemcpyPeer` / `cudaMemcpyPeerAsync` (with a stream).
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
        if dst_device != src_device {
            self.enable_peer(dst_device, src_device)?;
        }
        let code = match stream {
            // SAFETY: by the caller's contract.
            None => unsafe { (self.rt.cudaMemcpyPeer()?)(dst, dst_device, src, src_device, bytes) },
            Some(s) => {
                let copy = self.rt.cudaMemcpyPeerAsync()?;
                // SAFETY: by the caller's contract; the stream is live.
                unsafe { copy(dst, dst_device, src, src_device, bytes, cuda_stream(s)) }
            }
        };
        self.rt.check(code, || {
            format!("cudaMemcpyPeer(device {dst_device} {dst:p} <- device {src_device} {src:p}, {bytes} bytes)")
        })?;
        if stream.is_none() {
            self.finish_legacy("cudaMemcpyPeer")?;
        }
        Ok(())
    }
}
