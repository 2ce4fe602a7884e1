//! Devices: count, the per-thread current device, properties and memory.

use std::ffi::{c_char, c_int};

use dipu_deviceapi::{DeviceProperties, Error, MemoryInfo, Result};

use crate::cudart::*;
use crate::driver::{CUdevice, Driver};
use crate::CudaVendor;

/// Bytes given to `cudaGetDeviceProperties`: far more than any version's
/// `cudaDeviceProp` (1008 bytes in 13.0, 1032 in 12.x), so the layout
/// never matters; only the leading `char name[256]` is read.
pub(crate) const PROP_BUFFER_WORDS: usize = 512;

impl CudaVendor {
    /// `InvalidDevice` unless `device` is in `0..count`.
    pub(crate) fn check_device(&self, device: c_int) -> Result<()> {
        let count = self.count()?;
        if (0..count).contains(&device) {
            Ok(())
        } else {
            Err(Error::invalid_device(device, count))
        }
    }

    /// The calling thread's current device (`cudaGetDevice`).
    pub(crate) fn current(&self) -> Result<c_int> {
        let mut device = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cudaGetDevice()?)(&mut device) };
        self.rt.check(code, || "cudaGetDevice".into())?;
        Ok(device)
    }

    /// Makes `device` current for the calling thread (`cudaSetDevice`).
    pub(crate) fn set_current(&self, device: c_int) -> Result<()> {
        self.check_device(device)?;
        // SAFETY: a checked device index.
        let code = unsafe { (self.rt.cudaSetDevice()?)(device) };
        self.rt.check(code, || format!("cudaSetDevice({device})"))
    }

    /// `cudaDeviceSynchronize` on the current device.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments.
        let code = unsafe { (self.rt.cudaDeviceSynchronize()?)() };
        self.rt.check(code, || "cudaDeviceSynchronize".into())
    }

    /// Name, memory, compute capability and SM count of `device`.
    pub(crate) fn properties(&self, device: c_int) -> Result<DeviceProperties> {
        self.check_device(device)?;
        Ok(DeviceProperties {
            name: self.device_name(device)?,
            total_memory: self.total_memory(device)?,
            major: self.attribute(
                device,
                cudaDevAttrComputeCapabilityMajor,
                "ComputeCapabilityMajor",
            )?,
            minor: self.attribute(
                device,
                cudaDevAttrComputeCapabilityMinor,
                "ComputeCapabilityMinor",
            )?,
            multiprocessor_count: self.attribute(
                device,
                cudaDevAttrMultiProcessorCount,
                "MultiProcessorCount",
            )?,
        })
    }

    /// Free and total memory of the current device. The total is the same
    /// figure [`CudaVendor::properties`] reports.
    pub(crate) fn mem_info(&self) -> Result<MemoryInfo> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let code = unsafe { (self.rt.cudaMemGetInfo()?)(&mut free, &mut total) };
        self.rt.check(code, || "cudaMemGetInfo".into())?;
        let total = match &self.driver {
            Some(driver) => self.driver_total(driver, self.current()?)?,
            None => total as u64,
        };
        Ok(MemoryInfo {
            free: (free as u64).min(total),
            total,
        })
    }

    /// `cudaDeviceGetAttribute(attr)` of `device`.
    fn attribute(&self, device: c_int, attr: cudaDeviceAttr, name: &str) -> Result<i32> {
        let mut value = 0;
        // SAFETY: a valid out-pointer and a checked device.
        let code = unsafe { (self.rt.cudaDeviceGetAttribute()?)(&mut value, attr, device) };
        self.rt.check(code, || {
            format!("cudaDeviceGetAttribute(cudaDevAttr{name}, {device})")
        })?;
        Ok(value)
    }

    /// The driver's device handle for an ordinal.
    pub(crate) fn cu_device(&self, driver: &Driver, ordinal: c_int) -> Result<CUdevice> {
        let mut dev = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (driver.cuDeviceGet()?)(&mut dev, ordinal) };
        driver.check(code, || format!("cuDeviceGet({ordinal})"))?;
        Ok(dev)
    }

    fn driver_total(&self, driver: &Driver, device: c_int) -> Result<u64> {
        let dev = self.cu_device(driver, device)?;
        let mut bytes = 0usize;
        // SAFETY: a valid out-pointer and device handle.
        let code = unsafe { (driver.cuDeviceTotalMem_v2()?)(&mut bytes, dev) };
        driver.check(code, || format!("cuDeviceTotalMem({device})"))?;
        Ok(bytes as u64)
    }

    /// Total memory: the driver's figure, or without a driver (where no
    /// device can work anyway) `cudaMemGetInfo` on that device.
    fn total_memory(&self, device: c_int) -> Result<u64> {
        if let Some(driver) = &self.driver {
            return self.driver_total(driver, device);
        }
        let previous = self.current()?;
        self.set_current(device)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let code = unsafe { (self.rt.cudaMemGetInfo()?)(&mut free, &mut total) };
        let result = self.rt.check(code, || "cudaMemGetInfo".into());
        self.set_current(previous)?;
        result.map(|()| total as u64)
    }

    /// The device's name: `cuDeviceGetName`, else the leading `name` of
    /// `cudaGetDeviceProperties` written into a zeroed 4 KiB buffer.
    fn device_name(&self, device: c_int) -> Result<String> {
        let mut name = [0 as c_char; 256];
        if let Some(driver) = &self.driver {
            let dev = self.cu_device(driver, device)?;
            // SAFETY: `name` has the 256 bytes we pass as its length.
            let code = unsafe { (driver.cuDeviceGetName()?)(name.as_mut_ptr(), 256, dev) };
            driver.check(code, || format!("cuDeviceGetName({device})"))?;
        } else {
            let mut prop = [0u64; PROP_BUFFER_WORDS];
            // SAFETY: 4 KiB of zeroed, 8-byte aligned memory, more than
            // any cudaDeviceProp; cudart writes at most its own struct.
            let code =
                unsafe { (self.rt.cudaGetDeviceProperties()?)(prop.as_mut_ptr().cast(), device) };
            self.rt
                .check(code, || format!("cudaGetDeviceProperties({device})"))?;
            for (out, byte) in name
                .iter_mut()
                .zip(prop.iter().flat_map(|w| w.to_ne_bytes()))
            {
                *out = byte as c_char;
            }
        }
        let bytes: Vec<u8> = name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).trim().to_owned())
    }
}
