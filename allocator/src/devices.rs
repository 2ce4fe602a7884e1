//! One allocator per device, each created on first use.

use std::sync::{Arc, OnceLock};

use dipu_deviceapi::{Error, Result};
use dipu_stream::DeviceContext;

use crate::{
    new_device_allocator_in, Algorithm, AllocatorConfig, DeviceAllocator, LiveBlock, SegmentMap,
};

/// Wraps each device allocator as it is created (the memory checker's
/// guards): given the device and the allocator, the allocator to use.
pub type AllocatorWrapper =
    Arc<dyn Fn(i32, Box<dyn DeviceAllocator>) -> Box<dyn DeviceAllocator> + Send + Sync>;

/// The device allocators of a context: one per device (as many as the
/// vendor has), created lazily with one algorithm and configuration.
pub struct DeviceAllocators {
    ctx: &'static DeviceContext,
    algorithm: Algorithm,
    config: AllocatorConfig,
    devices: Box<[OnceLock<Box<dyn DeviceAllocator>>]>,
    /// Every range the allocators reserved, with its device.
    segments: Arc<SegmentMap>,
    /// Applied to each allocator when it is created.
    wrapper: Option<AllocatorWrapper>,
}

impl std::fmt::Debug for DeviceAllocators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAllocators")
            .field("algorithm", &self.algorithm)
            .field("devices", &self.devices.len())
            .finish()
    }
}

impl DeviceAllocators {
    /// Allocators of `algorithm` with `config` for every device of `ctx`.
    /// An unusable combination (e.g. expandable segments without virtual
    /// memory) shows up when a device's allocator is first needed.
    pub fn new(ctx: &'static DeviceContext, algorithm: Algorithm, config: AllocatorConfig) -> Self {
        let devices = (0..ctx.device_count()).map(|_| OnceLock::new()).collect();
        DeviceAllocators {
            ctx,
            algorithm,
            config,
            devices,
            segments: Arc::default(),
            wrapper: None,
        }
    }

    /// These allocators with `wrapper` applied to each one when it is
    /// created (the allocation path of an unwrapped set is unchanged).
    pub fn with_wrapper(mut self, wrapper: AllocatorWrapper) -> Self {
        self.wrapper = Some(wrapper);
        self
    }

    /// Allocators chosen by `DIPU_DEVICE_MEMCACHING_ALGORITHM` and `DIPU_ALLOC_CONF`.
    pub fn from_env(ctx: &'static DeviceContext) -> Result<Self> {
        Ok(Self::new(
            ctx,
            Algorithm::from_env()?,
            AllocatorConfig::from_env()?,
        ))
    }

    /// The map of every range these allocators reserved (shared with them).
    pub fn segment_map(&self) -> Arc<SegmentMap> {
        Arc::clone(&self.segments)
    }

    /// The algorithm in use.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// `device`'s allocator, created on first use.
    #[inline]
    pub fn get(&self, device: i32) -> Result<&dyn DeviceAllocator> {
        match self
            .devices
            .get(device as u32 as usize)
            .and_then(OnceLock::get)
        {
            Some(alloc) => Ok(alloc.as_ref()),
            None => self.get_slow(device),
        }
    }

    /// `get` for a bad device or an allocator not made yet.
    #[cold]
    fn get_slow(&self, device: i32) -> Result<&dyn DeviceAllocator> {
        let cell = usize::try_from(device)
            .ok()
            .and_then(|d| self.devices.get(d))
            .ok_or_else(|| Error::invalid_device(device, self.devices.len() as i32))?;
        if let Some(alloc) = cell.get() {
            return Ok(alloc.as_ref());
        }
        let made = new_device_allocator_in(
            self.ctx,
            device,
            self.algorithm,
            &self.config,
            Arc::clone(&self.segments),
        )?;
        let made = match &self.wrapper {
            Some(wrap) => wrap(device, made),
            None => made,
        };
        // A racing thread may have made one first; keep whichever won.
        Ok(cell.get_or_init(|| made).as_ref())
    }

    /// The device whose allocator reserved the memory holding the byte at
    /// `addr` (live or cached), without a lock; `None` for memory none of
    /// these allocators holds.
    #[inline]
    pub fn device_of(&self, addr: usize) -> Option<i32> {
        self.segments.find(addr).map(|r| r.device)
    }

    /// The live allocation holding the byte at `addr` (its start or inside
    /// it) and its device. No process-wide lock: the segment map (read
    /// without a lock) names the device, whose allocator answers under its
    /// own lock from its block map.
    pub fn find(&self, addr: usize) -> Option<(i32, LiveBlock)> {
        let device = self.device_of(addr)?;
        let block = self.devices[device as usize].get()?.find(addr)?;
        Some((device, block))
    }

    /// The allocators created so far, by device.
    pub fn created(&self) -> impl Iterator<Item = &dyn DeviceAllocator> {
        self.devices
            .iter()
            .filter_map(|c| c.get().map(|a| a.as_ref()))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn allocators_are_per_device_and_lazy() {
        let config = dipu_vendor_host::HostConfig {
            devices: 5,
            ..Default::default()
        };
        let vendor = Arc::new(dipu_vendor_host::HostVendor::new(config).unwrap());
        let ctx = DeviceContext::new(vendor).unwrap();
        let all = DeviceAllocators::new(ctx, Algorithm::Torch, AllocatorConfig::default());
        assert_eq!(all.created().count(), 0);
        assert_eq!(
            all.get(4).unwrap().device(),
            4,
            "no fixed device limit below the vendor's count"
        );
        assert_eq!(all.get(4).unwrap().algorithm(), Algorithm::Torch);
        assert_eq!(all.created().count(), 1);
        assert_eq!(
            all.get(5).err().map(|e| e.kind()),
            Some(dipu_deviceapi::ErrorKind::InvalidDevice)
        );
        let a: *const dyn DeviceAllocator = all.get(2).unwrap();
        let b: *const dyn DeviceAllocator = all.get(2).unwrap();
        assert!(std::ptr::addr_eq(a, b), "the same allocator every time");
    }
}
