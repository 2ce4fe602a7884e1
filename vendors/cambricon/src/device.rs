//! Devices: count, the per-thread current device, properties and memory.

use std::ffi::{c_int, c_uint};

use dipu_deviceapi::{DeviceProperties, Error, ErrorKind, MemoryInfo, Result};

use crate::cnrt::*;
use crate::CambriconVendor;

/// Bytes given to `cnrtGetDeviceProperties[_V3]`: far more than the 6.14
/// struct, so its layout never matters; only the leading `char name[256]`
/// is read.
const PROP_BUFFER_WORDS: usize = 1024;

impl CambriconVendor {
    /// The number of devices, cached once known; `NoDevice` (keeping CNRT's
    /// code and message, and its sticky error cleared) when there is none.
    pub(crate) fn count(&self) -> Result<c_int> {
        if let Some(&count) = self.device_count.get() {
            return Ok(count);
        }
        let mut count: c_uint = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cnrtGetDeviceCount()?)(&mut count) };
        if code != cnrtSuccess {
            let e = self.rt.error(code, "cnrtGetDeviceCount");
            return Err(Error::vendor(
                ErrorKind::NoDevice,
                i64::from(code),
                format!("no usable MLU: {}", e.message()),
            ));
        }
        if count == 0 {
            return Err(Error::new(
                ErrorKind::NoDevice,
                "cnrtGetDeviceCount found no MLU device",
            ));
        }
        let count = c_int::try_from(count).unwrap_or(c_int::MAX);
        let _ = self.device_count.set(count);
        Ok(count)
    }

    /// `InvalidDevice` unless `device` is in `0..count`.
    pub(crate) fn check_device(&self, device: c_int) -> Result<()> {
        let count = self.count()?;
        if (0..count).contains(&device) {
            Ok(())
        } else {
            Err(Error::invalid_device(device, count))
        }
    }

    /// The calling thread's current device (`cnrtGetDevice`).
    pub(crate) fn current(&self) -> Result<c_int> {
        let mut device = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cnrtGetDevice()?)(&mut device) };
        self.rt.check(code, || "cnrtGetDevice".into())?;
        Ok(device)
    }

    /// Makes `device` current for the calling thread (`cnrtSetDevice`).
    pub(crate) fn set_current(&self, device: c_int) -> Result<()> {
        self.check_device(device)?;
        // SAFETY: a checked device index.
        let code = unsafe { (self.rt.cnrtSetDevice()?)(device) };
        self.rt.check(code, || format!("cnrtSetDevice({device})"))
    }

    /// `cnrtSyncDevice`: every queue of the current device.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments.
        let code = unsafe { (self.rt.cnrtSyncDevice()?)() };
        self.rt.check(code, || "cnrtSyncDevice".into())
    }

    /// Name, memory, compute capability and core count of `device`.
    pub(crate) fn properties(&self, device: c_int) -> Result<DeviceProperties> {
        self.check_device(device)?;
        let clusters = self.attribute(device, cnrtAttrClusterCount, "ClusterCount")?;
        let cores = self.attribute(device, cnrtAttrMcorePerCluster, "McorePerCluster")?;
        let mib = self.attribute(device, cnrtAttrTotalMemSize, "TotalMemSize")?;
        Ok(DeviceProperties {
            name: self.device_name(device)?,
            // cnrtAttrTotalMemSize is in MiB.
            total_memory: u64::try_from(mib).unwrap_or(0) << 20,
            major: self.attribute(
                device,
                cnrtAttrComputeCapabilityMajor,
                "ComputeCapabilityMajor",
            )?,
            minor: self.attribute(
                device,
                cnrtAttrComputeCapabilityMinor,
                "ComputeCapabilityMinor",
            )?,
            multiprocessor_count: clusters.saturating_mul(cores),
        })
    }

    /// Free and total memory of the current device (`cnrtMemGetInfo`).
    pub(crate) fn mem_info(&self) -> Result<MemoryInfo> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let code = unsafe { (self.rt.cnrtMemGetInfo()?)(&mut free, &mut total) };
        self.rt.check(code, || "cnrtMemGetInfo".into())?;
        Ok(MemoryInfo {
            free: (free as u64).min(total as u64),
            total: total as u64,
        })
    }

    fn attribute(&self, device: c_int, attr: cnrtDeviceAttr_t, name: &str) -> Result<i32> {
        let mut value = 0;
        // SAFETY: a valid out-pointer and a checked device.
        let code = unsafe { (self.rt.cnrtDeviceGetAttribute()?)(&mut value, attr, device) };
        self.rt.check(code, || {
            format!("cnrtDeviceGetAttribute(cnrtAttr{name}, {device})")
        })?;
        Ok(value)
    }

    /// The leading `name` of `cnrtGetDeviceProperties_V3` (or the 6.0
    /// `cnrtGetDeviceProperties`) written into a zeroed 8 KiB buffer.
    fn device_name(&self, device: c_int) -> Result<String> {
        let mut prop = vec![0u64; PROP_BUFFER_WORDS];
        // SAFETY: 8 KiB of zeroed, 8-byte aligned memory, more than any
        // cnrtDeviceProp_t; CNRT writes at most its own struct.
        let code =
            unsafe { (self.rt.cnrtGetDeviceProperties_V3()?)(prop.as_mut_ptr().cast(), device) };
        self.rt
            .check(code, || format!("cnrtGetDeviceProperties({device})"))?;
        let bytes: Vec<u8> = prop
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .take(256)
            .take_while(|&b| b != 0)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).trim().to_owned())
    }
}
