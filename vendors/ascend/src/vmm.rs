//! Virtual memory on ACL: reserve address ranges, create physical chunks
//! (huge pages), map them whole (offset 0), unmap and release. ACL's
//! `aclrtUnmapMem` takes no size and unmaps one mapping, while the trait
//! unmaps a range, so the vendor keeps the mappings and unmaps each one the
//! range covers. ACL has no set-access step.

use std::collections::BTreeMap;
use std::ffi::c_void;

use dipu_deviceapi::{Error, PhysicalMemHandle, Result};
use parking_lot::Mutex;

use crate::acl::*;
use crate::AscendVendor;

/// The granularity without `aclrtMemGetAllocationGranularity`: 2 MB, the
/// huge page size.
pub(crate) const DEFAULT_GRANULARITY: usize = 2 << 20;

/// Live mappings: start address to size.
pub(crate) type Mappings = Mutex<BTreeMap<usize, usize>>;

impl AscendVendor {
    /// `Unsupported` without the virtual memory functions; else the
    /// current device, bound.
    fn vmm_ready(&self) -> Result<i32> {
        if !self.vmm_absent.is_empty() {
            return Err(Error::unsupported(
                "ascend",
                &format!("virtual memory: {}", self.vmm_absent),
            ));
        }
        self.bind()
    }

    /// `aclrtMemGetAllocationGranularity(RECOMMENDED)` where present,
    /// else 2 MB.
    pub(crate) fn granularity(&self) -> Result<usize> {
        let device = self.vmm_ready()?;
        let Ok(get) = self.acl.aclrtMemGetAllocationGranularity() else {
            return Ok(DEFAULT_GRANULARITY);
        };
        let mut prop = AclPhysicalMemProp::huge_on(device as u32);
        let mut granularity = 0;
        // SAFETY: a valid property and out-pointer.
        let code = unsafe {
            get(
                &mut prop,
                ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                &mut granularity,
            )
        };
        self.acl.check(code, || {
            format!("aclrtMemGetAllocationGranularity(device {device})")
        })?;
        Ok(if granularity == 0 {
            DEFAULT_GRANULARITY
        } else {
            granularity
        })
    }

    /// `aclrtReserveMemAddress` (alignment 0: ACL's own; no expected address).
    pub(crate) fn reserve(&self, bytes: usize) -> Result<*mut c_void> {
        self.vmm_ready()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; no expected address, no flags.
        let code = unsafe {
            (self.acl.aclrtReserveMemAddress()?)(&mut ptr, bytes, 0, std::ptr::null_mut(), 0)
        };
        self.acl
            .check(code, || format!("aclrtReserveMemAddress({bytes} bytes)"))?;
        Ok(ptr)
    }

    /// `aclrtReleaseMemAddress`.
    ///
    /// # Safety
    /// A live reservation with nothing mapped in it.
    pub(crate) unsafe fn free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        self.vmm_ready()?;
        let start = ptr as usize;
        if self
            .mappings
            .lock()
            .range(start..start.saturating_add(bytes))
            .next()
            .is_some()
        {
            return Err(Error::invalid_argument(format!(
                "the reservation {ptr:p} still has mappings: unmap them first"
            )));
        }
        // SAFETY: by the caller's contract.
        let code = unsafe { (self.acl.aclrtReleaseMemAddress()?)(ptr) };
        self.acl.check(code, || {
            format!("aclrtReleaseMemAddress({ptr:p}, {bytes} bytes)")
        })
    }

    /// `aclrtMallocPhysical` of huge-page device memory on the current device.
    pub(crate) fn create_chunk(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        let device = self.vmm_ready()?;
        let prop = AclPhysicalMemProp::huge_on(device as u32);
        let mut handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and property; no flags.
        let code = unsafe { (self.acl.aclrtMallocPhysical()?)(&mut handle, bytes, &prop, 0) };
        self.acl.check(code, || {
            format!("aclrtMallocPhysical({bytes} bytes on device {device})")
        })?;
        Ok(PhysicalMemHandle::from_raw(handle as usize as u64))
    }

    /// `aclrtFreePhysical`.
    ///
    /// # Safety
    /// A live chunk, released once.
    pub(crate) unsafe fn release_chunk(&self, handle: PhysicalMemHandle) -> Result<()> {
        self.vmm_ready()?;
        // SAFETY: by the caller's contract.
        let code = unsafe {
            (self.acl.aclrtFreePhysical()?)(handle.as_raw() as usize as aclrtDrvMemHandle)
        };
        self.acl
            .check(code, || format!("aclrtFreePhysical({handle:?})"))
    }

    /// `aclrtMapMem` of the whole chunk (size equal to it, offset 0).
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
        self.vmm_ready()?;
        let chunk = handle.as_raw() as usize as aclrtDrvMemHandle;
        // SAFETY: by the caller's contract; offset and flags are 0.
        let code = unsafe { (self.acl.aclrtMapMem()?)(ptr, bytes, 0, chunk, 0) };
        self.acl.check(code, || {
            format!("aclrtMapMem({ptr:p}, {bytes} bytes, {handle:?})")
        })?;
        self.mappings.lock().insert(ptr as usize, bytes);
        Ok(())
    }

    /// Unmaps every mapping in `ptr..ptr + bytes` (`aclrtUnmapMem` each);
    /// a mapping that sticks out of the range is refused, before any unmap.
    ///
    /// # Safety
    /// The range is mapped and no queued work uses it.
    pub(crate) unsafe fn unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        self.vmm_ready()?;
        let start = ptr as usize;
        let end = start.saturating_add(bytes);
        let mut mappings = self.mappings.lock();
        let inside: Vec<(usize, usize)> = mappings
            .range(start..end)
            .map(|(&at, &size)| (at, size))
            .collect();
        let straddles = mappings
            .range(..start)
            .next_back()
            .is_some_and(|(&at, &size)| at + size > start);
        if straddles || inside.iter().any(|&(at, size)| at + size > end) {
            return Err(Error::invalid_argument(format!(
                "unmap({ptr:p}, {bytes} bytes) cuts a mapping: ACL unmaps whole mappings only"
            )));
        }
        if inside.is_empty() {
            return Err(Error::invalid_argument(format!(
                "unmap({ptr:p}, {bytes} bytes): nothing is mapped there"
            )));
        }
        for (at, size) in inside {
            // SAFETY: a live mapping inside the caller's range.
            let code = unsafe { (self.acl.aclrtUnmapMem()?)(at as *mut c_void) };
            self.acl
                .check(code, || format!("aclrtUnmapMem({at:#x}) ({size} bytes)"))?;
            mappings.remove(&at);
        }
        Ok(())
    }
}
