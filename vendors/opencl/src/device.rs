//! Devices: count, the per-thread current device, properties, memory and
//! device-wide synchronisation.

use std::cell::Cell;

use dipu_deviceapi::{DeviceProperties, Error, MemoryInfo, Result};

use crate::init::Platform;
use crate::OpenClVendor;

thread_local! {
    /// The calling thread's current device (OpenCL has no such notion).
    static CURRENT: Cell<i32> = const { Cell::new(0) };
}

/// The calling thread's current device index.
pub(crate) fn current_device() -> i32 {
    CURRENT.with(Cell::get)
}

impl Platform {
    /// `InvalidDevice` unless `device` is in `0..count`.
    pub(crate) fn check_device(&self, device: i32) -> Result<()> {
        let count = self.devices.len() as i32;
        if (0..count).contains(&device) {
            Ok(())
        } else {
            Err(Error::invalid_device(device, count))
        }
    }
}

impl OpenClVendor {
    /// The number of usable devices of the chosen platform.
    pub(crate) fn count(&self) -> Result<i32> {
        Ok(self.platform()?.devices.len() as i32)
    }

    /// The calling thread's current device.
    pub(crate) fn current(&self) -> Result<i32> {
        self.platform()?;
        Ok(current_device())
    }

    /// Makes `device` current for the calling thread.
    pub(crate) fn set_current(&self, device: i32) -> Result<()> {
        self.platform()?.check_device(device)?;
        CURRENT.with(|c| c.set(device));
        Ok(())
    }

    /// Waits for every queue of the current device (markers; `clFinish`
    /// would not report a failed command).
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.platform()?.finish(Some(current_device()))
    }

    /// Name, memory budget, OpenCL version (for a compute capability) and
    /// compute units of `device`.
    pub(crate) fn properties(&self, device: i32) -> Result<DeviceProperties> {
        let p = self.platform()?;
        p.check_device(device)?;
        let d = &p.devices[device as usize];
        Ok(DeviceProperties {
            name: d.name.clone(),
            total_memory: d.total,
            major: d.version.0,
            minor: d.version.1,
            multiprocessor_count: d.compute_units as i32,
        })
    }

    /// The current device's budget and what is left of it (core OpenCL has
    /// no free-memory query: the vendor counts its own allocations).
    pub(crate) fn mem_info(&self) -> Result<MemoryInfo> {
        let p = self.platform()?;
        let device = current_device();
        p.check_device(device)?;
        let total = p.devices[device as usize].total;
        let used = p.memory.used(device);
        Ok(MemoryInfo {
            free: total.saturating_sub(used),
            total,
        })
    }
}
