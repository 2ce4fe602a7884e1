//! Memory: device memory from shared virtual memory, pinned host memory,
//! fills and copies (`clEnqueueSVMMemFill`, `clEnqueueSVMMemcpy`, for
//! every direction: either side may be plain host memory).

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, Error, ErrorKind, Result, StreamHandle};
use dipu_vendorkit::size::format_size;

use crate::allocations::{Entry, Kind};
use crate::cl::*;
use crate::config::ENV_MEMORY;
use crate::device::current_device;
use crate::errors::{check, error};
use crate::handles::{Ev, Mem, OwnedEv, Queue};
use crate::init::Platform;
use crate::OpenClVendor;

pub(crate) use crate::allocations::Allocations;

/// The alignment of every allocation: what `cudaMalloc` gives, and what the
/// caching allocator expects. `clSVMAlloc` refuses (NULL) an alignment
/// above the device's largest data type (128 bytes on PoCL), so the vendor
/// asks for `ALIGN - 1` bytes more at the default alignment and hands out
/// the aligned address inside.
const ALIGN: usize = 256;

impl OpenClVendor {
    /// Device memory on the current device: `clSVMAlloc`, counted against
    /// the device's budget. Zero bytes is null without a call.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let p = self.platform()?;
        let device = current_device();
        p.check_device(device)?;
        let d = &p.devices[device as usize];
        let call = || format!("malloc({bytes} bytes) on device {device}");
        if bytes.saturating_add(ALIGN - 1) as u64 > d.max_alloc {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "{}: more than the largest single allocation the device allows \
                     (CL_DEVICE_MAX_MEM_ALLOC_SIZE: {})",
                    call(),
                    format_size(d.max_alloc)
                ),
            ));
        }
        p.memory.reserve(device, bytes, d.total).map_err(|used| {
            Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "{}: {} of the device's {} are in use (the budget: {ENV_MEMORY}, else the \
                     device's global memory)",
                    call(),
                    format_size(used),
                    format_size(d.total)
                ),
            )
        })?;
        let flags = CL_MEM_READ_WRITE
            | if p.fine_grain {
                CL_MEM_SVM_FINE_GRAIN_BUFFER
            } else {
                0
            };
        match p.svm_alloc(flags, bytes) {
            Ok((ptr, base)) => {
                let kind = Kind::Device(device);
                p.memory.insert(ptr, Entry { bytes, base, kind });
                Ok(ptr)
            }
            Err(e) => {
                p.memory.unreserve(device, bytes);
                Err(e.context(call()))
            }
        }
    }

    /// Frees device memory once every queue of the context has passed the
    /// work queued so far (`clSVMFree` does not wait). Null is a no-op; a
    /// pointer that is not a live allocation's start is `InvalidArgument`.
    ///
    /// # Safety
    /// `ptr` is null or came from [`OpenClVendor::alloc`].
    pub(crate) unsafe fn dealloc(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let p = self.platform()?;
        let entry = p.memory.take(ptr, true, "free")?;
        p.finish_before_free(ptr);
        // SAFETY: a live SVM allocation of this context, taken out of the
        // record, with every queue past the work queued before this call.
        unsafe { p.svm_free(entry.base) }?;
        if let Kind::Device(device) = entry.kind {
            p.memory.unreserve(device, entry.bytes);
        }
        Ok(())
    }

    /// Pinned host memory, zeroed: a fine-grained SVM buffer where device
    /// memory is one, else a mapped `CL_MEM_ALLOC_HOST_PTR` buffer.
    pub(crate) fn alloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        if bytes == 0 {
            return Ok(std::ptr::null_mut());
        }
        let p = self.platform()?;
        let call = || format!("malloc_host({bytes} bytes)");
        let largest = p.devices.iter().map(|d| d.max_alloc).min().unwrap_or(0);
        if bytes.saturating_add(ALIGN - 1) as u64 > largest {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "{}: more than the largest single allocation the devices allow \
                     (CL_DEVICE_MAX_MEM_ALLOC_SIZE: {})",
                    call(),
                    format_size(largest)
                ),
            ));
        }
        let (ptr, base, kind) = if p.fine_grain {
            let flags = CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER;
            let (ptr, base) = p.svm_alloc(flags, bytes).map_err(|e| e.context(call()))?;
            (ptr, base, Kind::HostSvm)
        } else {
            let (ptr, mem) = p.mapped_buffer(bytes).map_err(|e| e.context(call()))?;
            (ptr, ptr as usize, Kind::HostBuffer(mem))
        };
        // SAFETY: `bytes` of host-accessible memory just allocated (a
        // fine-grained SVM buffer, or a buffer mapped for writing).
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        p.memory.insert(ptr, Entry { bytes, base, kind });
        Ok(ptr)
    }

    /// Frees pinned host memory once every queue has passed the work queued
    /// so far. Null is a no-op.
    ///
    /// # Safety
    /// `ptr` is null or came from [`OpenClVendor::alloc_host`].
    pub(crate) unsafe fn dealloc_host(&self, ptr: *mut c_void) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let p = self.platform()?;
        let entry = p.memory.take(ptr, false, "free_host")?;
        p.finish_before_free(ptr);
        match entry.kind {
            // SAFETY: a live SVM allocation, out of the record, queues past it.
            Kind::HostSvm => unsafe { p.svm_free(entry.base) },
            // SAFETY: a live mapped buffer, out of the record, queues past it.
            Kind::HostBuffer(mem) => unsafe { p.unmap_buffer(mem, ptr) },
            Kind::Device(_) => unreachable!("take(.., false) returns host memory"),
        }
    }

    /// `clEnqueueSVMMemFill` of a one-byte pattern: on `stream`, or on the
    /// current device's default queue and waited for (`None`).
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is device memory of this vendor (checked).
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
        let p = self.platform()?;
        let call = || format!("clEnqueueSVMMemFill({ptr:p}, {value:#04x}, {bytes} bytes)");
        p.memory
            .check_device_range(ptr, bytes, None, "the destination")
            .map_err(|e| e.context(call()))?;
        let (q, _) = p.queue(stream.unwrap_or(StreamHandle::DEFAULT))?;
        let fill = self.cl.clEnqueueSVMMemFill()?;
        p.enqueue(stream.is_none(), &call, |ev| {
            // SAFETY: a checked device range, a live queue, a one-byte
            // pattern read during the call, and an out-event or null.
            unsafe {
                fill(
                    q.0,
                    ptr,
                    (&value as *const u8).cast(),
                    1,
                    bytes,
                    0,
                    std::ptr::null(),
                    ev,
                )
            }
        })
    }

    /// `clEnqueueSVMMemcpy` in direction `kind`: on `stream`, or on the
    /// current device's default queue and waited for (`None`). Device sides
    /// are checked against the vendor's allocations.
    ///
    /// # Safety
    /// Both ranges are live for `bytes` bytes (until the stream passes the
    /// copy, for asynchronous copies); host sides are valid host memory.
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
        let p = self.platform()?;
        let call = || format!("clEnqueueSVMMemcpy({dst:p}, {src:p}, {bytes} bytes, {kind:?})");
        if kind.src_is_device() {
            p.memory
                .check_device_range(src, bytes, None, "the source")
                .map_err(|e| e.context(call()))?;
        }
        if kind.dst_is_device() {
            p.memory
                .check_device_range(dst, bytes, None, "the destination")
                .map_err(|e| e.context(call()))?;
        }
        let (q, _) = p.queue(stream.unwrap_or(StreamHandle::DEFAULT))?;
        // SAFETY: by the caller's contract and the checks above.
        unsafe { p.svm_copy(q, dst, src, bytes, stream.is_none(), &call) }
    }

    /// A copy between device memory of two devices: one context, so the
    /// same `clEnqueueSVMMemcpy` on `stream` (or, waited for, on the current
    /// device's default queue).
    ///
    /// # Safety
    /// Both ranges are device memory of the named devices (checked).
    pub(crate) unsafe fn copy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
        stream: Option<StreamHandle>,
    ) -> Result<()> {
        let p = self.platform()?;
        p.check_device(dst_device)?;
        p.check_device(src_device)?;
        if bytes == 0 {
            return Ok(());
        }
        let call = || {
            format!(
                "memcpy_peer(device {dst_device} {dst:p} <- device {src_device} {src:p}, {bytes} bytes)"
            )
        };
        p.memory
            .check_device_range(src, bytes, Some(src_device), "the source")
            .map_err(|e| e.context(call()))?;
        p.memory
            .check_device_range(dst, bytes, Some(dst_device), "the destination")
            .map_err(|e| e.context(call()))?;
        let (q, _) = p.queue(stream.unwrap_or(StreamHandle::DEFAULT))?;
        // SAFETY: checked device ranges of this context.
        unsafe { p.svm_copy(q, dst, src, bytes, stream.is_none(), &call) }
    }
}

impl Platform {
    /// `clSVMAlloc(flags, bytes + ALIGN - 1)` at the default alignment: the
    /// `ALIGN`-aligned address inside, and the one OpenCL returned. NULL
    /// (OpenCL gives no reason) is `OutOfMemory`.
    fn svm_alloc(&self, flags: cl_svm_mem_flags, bytes: usize) -> Result<(*mut c_void, usize)> {
        let size = bytes.checked_add(ALIGN - 1).ok_or_else(|| {
            Error::new(
                ErrorKind::OutOfMemory,
                format!("{bytes} bytes cannot be aligned"),
            )
        })?;
        // SAFETY: a live context; SVM flags this context's devices support.
        let base = unsafe { (self.cl.clSVMAlloc()?)(self.context.0, flags, size, 0) };
        if base.is_null() {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "clSVMAlloc({size} bytes, flags {flags:#x}) returned NULL (OpenCL gives no \
                     reason: the driver is out of memory)"
                ),
            ));
        }
        let offset = (ALIGN - base as usize % ALIGN) % ALIGN;
        // SAFETY: `offset < ALIGN`, so the address stays inside the `size`
        // bytes allocated, with `bytes` after it.
        Ok((
            unsafe { base.cast::<u8>().add(offset) }.cast(),
            base as usize,
        ))
    }

    /// Frees every allocation still live (the vendor's end, after every
    /// queue was waited for).
    pub(crate) fn free_all(&self) {
        for (at, entry) in self.memory.drain() {
            let ptr = at as *mut c_void;
            let freed = match entry.kind {
                // SAFETY: a live allocation of this context; no work is queued.
                Kind::Device(_) | Kind::HostSvm => unsafe { self.svm_free(entry.base) },
                // SAFETY: a live mapped buffer; no work is queued.
                Kind::HostBuffer(mem) => unsafe { self.unmap_buffer(mem, ptr) },
            };
            if let Err(e) = freed {
                tracing::warn!("freeing {ptr:p} at the vendor's end: {e}");
            }
        }
    }

    /// `clSVMFree` of the address `clSVMAlloc` returned.
    ///
    /// # Safety
    /// `base` is a live SVM allocation of this context that no queued work
    /// uses any more.
    unsafe fn svm_free(&self, base: usize) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { (self.cl.clSVMFree()?)(self.context.0, base as *mut c_void) };
        Ok(())
    }

    /// Waits for every queue before memory is freed (the work queued so far
    /// may still use it). A failed command does not keep the memory: its
    /// work is over either way, so it is logged and the free goes on.
    fn finish_before_free(&self, ptr: *mut c_void) {
        if let Err(e) = self.finish(None) {
            tracing::warn!("freeing {ptr:p}: {e}");
        }
    }

    /// A `CL_MEM_ALLOC_HOST_PTR` buffer of `bytes`, mapped for reading and
    /// writing on device 0's default queue.
    fn mapped_buffer(&self, bytes: usize) -> Result<(*mut c_void, Mem)> {
        let mut code = 0;
        // SAFETY: a live context, no host pointer, a valid out-pointer.
        let mem = unsafe {
            (self.cl.clCreateBuffer()?)(
                self.context.0,
                CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                bytes,
                std::ptr::null_mut(),
                &mut code,
            )
        };
        check(code, || {
            format!("clCreateBuffer(CL_MEM_ALLOC_HOST_PTR, {bytes} bytes)")
        })?;
        let mem = Mem(mem);
        let q = self.default_queue(0);
        // SAFETY: a live buffer of `bytes` and a live queue; a blocking map
        // of the whole buffer.
        let ptr = unsafe {
            (self.cl.clEnqueueMapBuffer()?)(
                q.0,
                mem.0,
                CL_TRUE,
                CL_MAP_READ | CL_MAP_WRITE,
                0,
                bytes,
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
                &mut code,
            )
        };
        if code != 0 || ptr.is_null() {
            self.release_mem(mem);
            return Err(error(code, &format!("clEnqueueMapBuffer({bytes} bytes)")));
        }
        Ok((ptr, mem))
    }

    /// Unmaps and releases a pinned buffer from [`Platform::mapped_buffer`].
    ///
    /// # Safety
    /// `mem` is mapped at `ptr` and no queued work uses it any more.
    unsafe fn unmap_buffer(&self, mem: Mem, ptr: *mut c_void) -> Result<()> {
        let q = self.default_queue(0);
        let mut ev = std::ptr::null_mut();
        // SAFETY: the caller's contract; a valid out-event.
        let code = unsafe {
            (self.cl.clEnqueueUnmapMemObject()?)(q.0, mem.0, ptr, 0, std::ptr::null(), &mut ev)
        };
        let unmapped = check(code, || format!("clEnqueueUnmapMemObject({ptr:p})")).and_then(|()| {
            let ev = OwnedEv::new(&self.cl, Ev(ev));
            self.wait(&[ev.get()], &|| format!("unmapping {ptr:p}"))
        });
        self.release_mem(mem);
        unmapped
    }

    /// `clReleaseMemObject`, logging a failure.
    fn release_mem(&self, mem: Mem) {
        if let Ok(release) = self.cl.clReleaseMemObject() {
            // SAFETY: the buffer's last reference, which nothing uses any more.
            let code = unsafe { release(mem.0) };
            if code != 0 {
                tracing::warn!("{}", error(code, "clReleaseMemObject"));
            }
        }
    }

    /// `clEnqueueSVMMemcpy` on `q`, waited for when `sync`.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` until the copy has run.
    unsafe fn svm_copy(
        &self,
        q: Queue,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        sync: bool,
        call: &dyn Fn() -> String,
    ) -> Result<()> {
        let copy = self.cl.clEnqueueSVMMemcpy()?;
        self.enqueue(sync, call, |ev| {
            // SAFETY: the caller's contract; a live queue; an out-event or null.
            unsafe { copy(q.0, CL_FALSE, dst, src, bytes, 0, std::ptr::null(), ev) }
        })
    }

    /// Runs `enqueue` (given an out-event when `sync`, else null); when
    /// `sync`, waits for the command and reports its failure.
    fn enqueue(
        &self,
        sync: bool,
        call: &dyn Fn() -> String,
        enqueue: impl FnOnce(*mut cl_event) -> cl_int,
    ) -> Result<()> {
        let mut ev = std::ptr::null_mut();
        let out = if sync {
            &mut ev as *mut cl_event
        } else {
            std::ptr::null_mut()
        };
        check(enqueue(out), call)?;
        if sync {
            let ev = OwnedEv::new(&self.cl, Ev(ev));
            self.wait(&[ev.get()], call)?;
        }
        Ok(())
    }
}
