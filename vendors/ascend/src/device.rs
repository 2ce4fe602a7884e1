//! Devices: synchronisation, properties and memory figures.

use dipu_deviceapi::{DeviceProperties, MemoryInfo, Result};

use crate::acl::*;
use crate::errors::text;
use crate::AscendVendor;

impl AscendVendor {
    /// `aclrtSynchronizeDevice` on the current device.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: no arguments.
        let code = unsafe { (self.acl.aclrtSynchronizeDevice()?)() };
        self.acl.check(code, || "aclrtSynchronizeDevice".into())
    }

    /// Name (the SoC's), total memory, the runtime version as major and
    /// minor (Ascend has no compute capability) and the AI core count.
    pub(crate) fn properties(&self, device: i32) -> Result<DeviceProperties> {
        self.check_device(device)?;
        let (major, minor) = self.runtime_version()?;
        let (name, total_memory, cores) = self.on_device(device, || {
            // SAFETY: no arguments; a static string (or null) we copy.
            let name = unsafe { text((self.acl.aclrtGetSocName()?)()) }
                .unwrap_or_else(|| "Ascend NPU".into());
            Ok((name, self.total(device)?, self.ai_cores(device)?))
        })?;
        Ok(DeviceProperties {
            name,
            total_memory,
            major,
            minor,
            multiprocessor_count: cores,
        })
    }

    /// Free and total device memory (`aclrtGetMemInfo(ACL_HBM_MEM)`).
    pub(crate) fn mem_info(&self) -> Result<MemoryInfo> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        let code = unsafe { (self.acl.aclrtGetMemInfo()?)(ACL_HBM_MEM, &mut free, &mut total) };
        self.acl
            .check(code, || "aclrtGetMemInfo(ACL_HBM_MEM)".into())?;
        Ok(MemoryInfo {
            free: (free as u64).min(total as u64),
            total: total as u64,
        })
    }

    fn runtime_version(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: valid out-pointers.
        let code = unsafe { (self.acl.aclrtGetVersion()?)(&mut major, &mut minor, &mut patch) };
        self.acl.check(code, || "aclrtGetVersion".into())?;
        Ok((major, minor))
    }

    /// Total memory: `aclrtGetDeviceInfo` where it exists, else
    /// `aclrtGetMemInfo` with the device current.
    fn total(&self, device: i32) -> Result<u64> {
        if let Ok(info) = self.acl.aclrtGetDeviceInfo() {
            let mut value = 0i64;
            // SAFETY: a valid out-pointer and a checked device.
            let code = unsafe {
                info(
                    device as u32,
                    ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE,
                    &mut value,
                )
            };
            self.acl.check(code, || {
                format!("aclrtGetDeviceInfo({device}, ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE)")
            })?;
            return Ok(value.max(0) as u64);
        }
        Ok(self.mem_info()?.total)
    }

    /// AI cores: `aclrtGetDeviceInfo` where it exists, else
    /// `aclGetDeviceCapability`.
    fn ai_cores(&self, device: i32) -> Result<i32> {
        let mut value = 0i64;
        if let Ok(info) = self.acl.aclrtGetDeviceInfo() {
            // SAFETY: a valid out-pointer and a checked device.
            let code = unsafe { info(device as u32, ACL_DEV_ATTR_AICORE_CORE_NUM, &mut value) };
            self.acl.check(code, || {
                format!("aclrtGetDeviceInfo({device}, ACL_DEV_ATTR_AICORE_CORE_NUM)")
            })?;
        } else {
            // SAFETY: a valid out-pointer and a checked device.
            let code = unsafe {
                (self.acl.aclGetDeviceCapability()?)(
                    device as u32,
                    ACL_DEVICE_INFO_AI_CORE_NUM,
                    &mut value,
                )
            };
            self.acl.check(code, || {
                format!("aclGetDeviceCapability({device}, ACL_DEVICE_INFO_AI_CORE_NUM)")
            })?;
        }
        Ok(i32::try_from(value).unwrap_or(i32::MAX))
    }
}
