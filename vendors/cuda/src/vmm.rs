//! Virtual memory on the driver API: reserve address ranges, create
//! physical chunks, map them with read-write access, unmap and release.
//!
//! The driver API needs a current context on the calling thread, while
//! cudart keeps its own notion of the current device: before every call the
//! current device's primary context (retained once per device, kept for the
//! process's life) is made current if it is not already.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use dipu_deviceapi::{Error, PhysicalMemHandle, Result};

use crate::driver::*;
use crate::CudaVendor;

/// A retained primary context (an opaque driver handle, valid on any thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Context(CUcontext);
// SAFETY: a CUcontext may be made current on any thread; the driver
// synchronises its use.
unsafe impl Send for Context {}
// SAFETY: as above; the handle itself is never written through.
unsafe impl Sync for Context {}

/// Per-device primary contexts, retained on first use.
#[derive(Debug)]
pub(crate) struct Vmm {
    primary: Vec<OnceLock<Context>>,
}

impl Vmm {
    /// State for `devices` devices, all supporting the virtual memory API.
    pub(crate) fn new(devices: c_int) -> Self {
        Vmm {
            primary: (0..devices).map(|_| OnceLock::new()).collect(),
        }
    }
}

fn device_ptr(ptr: *mut c_void) -> CUdeviceptr {
    ptr as usize as CUdeviceptr
}

impl CudaVendor {
    /// The driver with the current device's primary context current on
    /// this thread, and that device; `Unsupported` without virtual memory.
    fn vmm_ready(&self) -> Result<(&Driver, c_int)> {
        let unsupported = |why: &str| Error::unsupported("cuda", &format!("virtual memory: {why}"));
        if let Some(why) = &self.vmm_absent {
            return Err(unsupported(why));
        }
        let vmm = self
            .initialised()?
            .vmm
            .as_ref()
            .map_err(|why| unsupported(why))?;
        let driver = self
            .driver
            .as_ref()
            .ok_or_else(|| unsupported("no driver"))?;
        let device = self.current()?;
        let cell = vmm
            .primary
            .get(device as usize)
            .ok_or_else(|| Error::invalid_device(device, vmm.primary.len() as c_int))?;
        let wanted = match cell.get() {
            Some(ctx) => *ctx,
            None => {
                let dev = self.cu_device(driver, device)?;
                let mut ctx = std::ptr::null_mut();
                // SAFETY: a valid out-pointer and device handle. A race
                // retains twice, which only keeps the context alive longer.
                let code = unsafe { (driver.cuDevicePrimaryCtxRetain()?)(&mut ctx, dev) };
                driver.check(code, || format!("cuDevicePrimaryCtxRetain({device})"))?;
                *cell.get_or_init(|| Context(ctx))
            }
        };
        let mut current = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { (driver.cuCtxGetCurrent()?)(&mut current) };
        driver.check(code, || "cuCtxGetCurrent".into())?;
        if current != wanted.0 {
            // SAFETY: a retained primary context.
            let code = unsafe { (driver.cuCtxSetCurrent()?)(wanted.0) };
            driver.check(code, || {
                format!("cuCtxSetCurrent(primary context of device {device})")
            })?;
        }
        Ok((driver, device))
    }

    /// `cuMemGetAllocationGranularity(RECOMMENDED)` for pinned memory on
    /// the current device.
    pub(crate) fn granularity(&self) -> Result<usize> {
        let (driver, device) = self.vmm_ready()?;
        let prop = CuMemAllocationProp::pinned_on(device);
        let mut granularity = 0;
        // SAFETY: a valid out-pointer and a fully initialised property.
        let code = unsafe {
            (driver.cuMemGetAllocationGranularity()?)(
                &mut granularity,
                &prop,
                CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        };
        driver.check(code, || {
            format!("cuMemGetAllocationGranularity(device {device})")
        })?;
        Ok(granularity)
    }

    /// `cuMemAddressReserve`, aligned to the granularity.
    pub(crate) fn reserve(&self, bytes: usize) -> Result<*mut c_void> {
        let alignment = self.granularity()?;
        let (driver, _) = self.vmm_ready()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out-pointer; no fixed address, no flags.
        let code = unsafe { (driver.cuMemAddressReserve()?)(&mut ptr, bytes, alignment, 0, 0) };
        driver.check(code, || format!("cuMemAddressReserve({bytes} bytes)"))?;
        Ok(ptr as usize as *mut c_void)
    }

    /// `cuMemAddressFree`.
    ///
    /// # Safety
    /// A live reservation with nothing mapped in it.
    pub(crate) unsafe fn free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let (driver, _) = self.vmm_ready()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (driver.cuMemAddressFree()?)(device_ptr(ptr), bytes) };
        driver.check(code, || format!("cuMemAddressFree({ptr:p}, {bytes} bytes)"))
    }

    /// `cuMemCreate` of pinned memory on the current device.
    pub(crate) fn create_chunk(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        let (driver, device) = self.vmm_ready()?;
        let prop = CuMemAllocationProp::pinned_on(device);
        let mut handle = 0;
        // SAFETY: a valid out-pointer and a fully initialised property.
        let code = unsafe { (driver.cuMemCreate()?)(&mut handle, bytes, &prop, 0) };
        driver.check(code, || {
            format!("cuMemCreate({bytes} bytes on device {device})")
        })?;
        Ok(PhysicalMemHandle::from_raw(handle))
    }

    /// `cuMemRelease`.
    ///
    /// # Safety
    /// A live chunk, released once.
    pub(crate) unsafe fn release_chunk(&self, handle: PhysicalMemHandle) -> Result<()> {
        let (driver, _) = self.vmm_ready()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (driver.cuMemRelease()?)(handle.as_raw()) };
        driver.check(code, || format!("cuMemRelease({handle:?})"))
    }

    /// `cuMemMap`, then `cuMemSetAccess` read-write for the current device
    /// and every device that can access its memory as a peer (unmapping
    /// again if that fails).
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is unmapped, inside a reservation and aligned;
    /// `handle` is a live chunk of `bytes` bytes.
    pub(crate) unsafe fn map(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        let (driver, device) = self.vmm_ready()?;
        let at = device_ptr(ptr);
        // SAFETY: by the caller's contract; offset and flags are 0.
        let code = unsafe { (driver.cuMemMap()?)(at, bytes, 0, handle.as_raw(), 0) };
        driver.check(code, || {
            format!("cuMemMap({ptr:p}, {bytes} bytes, {handle:?})")
        })?;
        let init = self.initialised()?;
        let peers = (0..init.can_access.len() as c_int).filter(|&p| {
            init.can_access[p as usize]
                .get(device as usize)
                .copied()
                .unwrap_or(false)
        });
        let access: Vec<CuMemAccessDesc> = std::iter::once(device)
            .chain(peers)
            .map(|id| CuMemAccessDesc {
                location: CuMemLocation {
                    type_: CU_MEM_LOCATION_TYPE_DEVICE,
                    id,
                },
                flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            })
            .collect();
        // SAFETY: the range was just mapped; `access.len()` valid descriptors.
        let code = unsafe { (driver.cuMemSetAccess()?)(at, bytes, access.as_ptr(), access.len()) };
        let access = driver.check(code, || {
            format!("cuMemSetAccess({ptr:p}, {bytes} bytes, read-write)")
        });
        if access.is_err() {
            // SAFETY: the range was mapped above and nothing used it.
            let _ = unsafe { (driver.cuMemUnmap()?)(at, bytes) };
        }
        access
    }

    /// `cuMemUnmap`.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is mapped and no queued work uses it.
    pub(crate) unsafe fn unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let (driver, _) = self.vmm_ready()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (driver.cuMemUnmap()?)(device_ptr(ptr), bytes) };
        driver.check(code, || format!("cuMemUnmap({ptr:p}, {bytes} bytes)"))
    }
}
