//! Virtual memory on CNDrv: reserve, create, map, set access on the mapped
//! range (read-write is flag 0, not CUDA's 3), unmap whole mappings,
//! release, free. Addresses, handles and devices are 64-bit.

use std::ffi::{c_int, c_void};

use dipu_deviceapi::{Error, PhysicalMemHandle, Result};

use crate::cndrv::*;
use crate::CambriconVendor;

/// CNDrv's device handle for an ordinal.
pub(crate) fn cn_device(drv: &Cndrv, ordinal: c_int) -> Result<CNdev> {
    let mut dev: CNdev = 0;
    // SAFETY: a valid out-pointer.
    let code = unsafe { (drv.cnDeviceGet()?)(&mut dev, ordinal) };
    drv.check(code, || format!("cnDeviceGet({ordinal})"))?;
    Ok(dev)
}

fn address(ptr: *mut c_void) -> CNaddr {
    ptr as usize as CNaddr
}

impl CambriconVendor {
    /// CNDrv and the current device; `Unsupported` without virtual memory.
    fn vmm_ready(&self) -> Result<(&Cndrv, c_int)> {
        let Some(drv) = &self.drv else {
            return Err(Error::unsupported(
                "cambricon",
                &format!("virtual memory: {}", self.vmm_absent),
            ));
        };
        Ok((drv, self.current()?))
    }

    /// `cnMemGetAllocationGranularity(RECOMMENDED)` on the current device.
    pub(crate) fn granularity(&self) -> Result<usize> {
        let (drv, device) = self.vmm_ready()?;
        let prop = CnMemAllocationProp::on_device(device);
        let mut granularity = 0usize;
        // SAFETY: a valid out-pointer and a fully initialised property.
        let code = unsafe {
            (drv.cnMemGetAllocationGranularity()?)(
                &mut granularity,
                &prop,
                CN_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        };
        drv.check(code, || {
            format!("cnMemGetAllocationGranularity(device {device})")
        })?;
        Ok(granularity)
    }

    /// `cnMemAddressReserve`, aligned to the granularity.
    pub(crate) fn reserve(&self, bytes: usize) -> Result<*mut c_void> {
        let alignment = self.granularity()?;
        let (drv, _) = self.vmm_ready()?;
        let mut ptr: CNaddr = 0;
        // SAFETY: a valid out-pointer; no fixed address, no flags.
        let code = unsafe { (drv.cnMemAddressReserve()?)(&mut ptr, bytes, alignment, 0, 0) };
        drv.check(code, || format!("cnMemAddressReserve({bytes} bytes)"))?;
        Ok(ptr as usize as *mut c_void)
    }

    /// `cnMemAddressFree`.
    ///
    /// # Safety
    /// A live reservation with nothing mapped in it.
    pub(crate) unsafe fn free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let (drv, _) = self.vmm_ready()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (drv.cnMemAddressFree()?)(address(ptr), bytes) };
        drv.check(code, || format!("cnMemAddressFree({ptr:p}, {bytes} bytes)"))
    }

    /// `cnMemCreate` on the current device.
    pub(crate) fn create_chunk(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        let (drv, device) = self.vmm_ready()?;
        let prop = CnMemAllocationProp::on_device(device);
        let mut handle: CNmemGenericAllocationHandle = 0;
        // SAFETY: a valid out-pointer and a fully initialised property.
        let code = unsafe { (drv.cnMemCreate()?)(&mut handle, bytes, &prop, 0) };
        drv.check(code, || {
            format!("cnMemCreate({bytes} bytes on device {device})")
        })?;
        Ok(PhysicalMemHandle::from_raw(handle))
    }

    /// `cnMemRelease`.
    ///
    /// # Safety
    /// A live chunk, released once.
    pub(crate) unsafe fn release_chunk(&self, handle: PhysicalMemHandle) -> Result<()> {
        let (drv, _) = self.vmm_ready()?;
        // SAFETY: by the caller's contract.
        let code = unsafe { (drv.cnMemRelease()?)(handle.as_raw()) };
        drv.check(code, || format!("cnMemRelease({handle:?})"))
    }

    /// `cnMemMap`, then `cnMemSetAccess` read-write on the mapped range
    /// (unmapping again if that fails).
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
        let (drv, device) = self.vmm_ready()?;
        let at = address(ptr);
        // SAFETY: by the caller's contract; offset and flags are 0.
        let code = unsafe { (drv.cnMemMap()?)(at, bytes, 0, handle.as_raw(), 0) };
        drv.check(code, || {
            format!("cnMemMap({ptr:p}, {bytes} bytes, {handle:?})")
        })?;
        let access = CnMemAccessDesc {
            location: CnMemLocation {
                type_: CN_MEM_LOCATION_TYPE_DEVICE,
                id: device as u32,
            },
            access_flags: CN_MEM_ACCESS_FLAGS_PROT_READWRITE,
            ..CnMemAccessDesc::default()
        };
        // SAFETY: the range was just mapped; one valid descriptor.
        let code = unsafe { (drv.cnMemSetAccess()?)(at, bytes, &access, 1) };
        let result = drv.check(code, || {
            format!("cnMemSetAccess({ptr:p}, {bytes} bytes, read-write)")
        });
        match result {
            Ok(()) => {
                self.mappings.lock().insert(at, bytes);
                Ok(())
            }
            Err(e) => {
                // SAFETY: the range was mapped above and nothing used it.
                let _ = unsafe { (drv.cnMemUnmap()?)(at, bytes) };
                Err(e)
            }
        }
    }

    /// Unmaps `bytes` at `ptr`: CNDrv unmaps only whole mapped ranges, so
    /// each mapping inside the range is unmapped on its own; a range that
    /// cuts a mapping is refused before anything is unmapped.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is mapped and no queued work uses it.
    pub(crate) unsafe fn unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        let (drv, _) = self.vmm_ready()?;
        let start = address(ptr);
        let end = start
            .checked_add(bytes as u64)
            .ok_or_else(|| Error::invalid_argument("unmap range overflows"))?;
        let mut mappings = self.mappings.lock();
        let inside: Vec<(u64, usize)> = mappings.range(start..end).map(|(&a, &n)| (a, n)).collect();
        let covered: u64 = inside.iter().map(|&(_, n)| n as u64).sum();
        let cut = inside.iter().any(|&(a, n)| a + n as u64 > end);
        if inside.is_empty() || cut || covered != bytes as u64 {
            return Err(Error::invalid_argument(format!(
                "vmm_unmap({ptr:p}, {bytes} bytes) does not cover whole mappings exactly \
                 (CNDrv unmaps only whole mapped ranges)"
            )));
        }
        for (a, n) in inside {
            // SAFETY: a whole live mapping, by the caller's contract.
            let code = unsafe { (drv.cnMemUnmap()?)(a, n) };
            drv.check(code, || format!("cnMemUnmap({a:#x}, {n} bytes)"))?;
            mappings.remove(&a);
        }
        Ok(())
    }
}
