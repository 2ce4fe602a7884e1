//! Where segments come from: the vendor's device memory of one device,
//! within the process's memory fraction.

use std::ffi::c_void;
use std::sync::Arc;

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, DeviceGuard};

use crate::segments::{SegmentMap, SegmentRange};

/// The vendor memory of one device.
#[derive(Debug)]
pub(crate) struct Source {
    pub(crate) ctx: &'static DeviceContext,
    pub(crate) device: i32,
    /// Total device memory.
    pub(crate) total: u64,
    /// Bytes this allocator may reserve (fraction × total).
    pub(crate) limit: u64,
    /// Where every range reserved here is recorded, with the other
    /// devices' of the same set.
    pub(crate) segments: Arc<SegmentMap>,
}

impl Source {
    /// The source for `device`, limited to `fraction` of its memory.
    /// Its reservations are recorded in `segments`.
    pub(crate) fn new(
        ctx: &'static DeviceContext,
        device: i32,
        fraction: f64,
        segments: Arc<SegmentMap>,
    ) -> Result<Source> {
        let total = ctx.api().device_properties(device)?.total_memory;
        let mut source = Source {
            ctx,
            device,
            total,
            limit: total,
            segments,
        };
        source.set_fraction(fraction)?;
        Ok(source)
    }

    /// Limits reservations to `fraction` (0, 1] of the device's memory.
    pub(crate) fn set_fraction(&mut self, fraction: f64) -> Result<()> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(Error::invalid_argument(format!(
                "memory fraction {fraction} is outside (0, 1]"
            )));
        }
        self.limit = (self.total as f64 * fraction) as u64;
        Ok(())
    }

    /// An out-of-memory error unless `reserved + bytes` stays within the limit.
    pub(crate) fn check_limit(&self, bytes: u64, reserved: u64) -> Result<()> {
        if reserved.saturating_add(bytes) > self.limit {
            return Err(Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "the per-process memory fraction allows {} bytes and {} are reserved",
                    self.limit, reserved
                ),
            ));
        }
        Ok(())
    }

    /// Allocates `bytes` from the vendor if `reserved + bytes` stays within the limit.
    pub(crate) fn malloc(&self, bytes: usize, reserved: u64) -> Result<*mut c_void> {
        self.check_limit(bytes as u64, reserved)?;
        let t0 = crate::trace::start();
        let ptr = {
            let _guard = DeviceGuard::new(self.ctx, self.device)?;
            self.ctx.api().malloc(bytes)?
        };
        self.register(ptr as usize, bytes);
        crate::trace::segment_created(t0, self.device, ptr as usize, bytes);
        Ok(ptr)
    }

    /// Records `base..base + size`, just reserved, as this device's.
    pub(crate) fn register(&self, base: usize, size: usize) {
        if base != 0 && size != 0 {
            self.segments.insert(SegmentRange {
                base,
                size,
                device: self.device,
            });
        }
    }

    /// Forgets the range at `base`, about to go back to the vendor.
    pub(crate) fn unregister(&self, base: usize) {
        self.segments.remove(base);
    }

    /// Gives a segment back to the vendor.
    pub(crate) fn free(&self, addr: usize) -> Result<()> {
        self.unregister(addr);
        let t0 = crate::trace::start();
        let _guard = DeviceGuard::new(self.ctx, self.device)?;
        // SAFETY: `addr` is the start of a segment this source allocated and
        // nothing in the allocator refers to it any more.
        let result = unsafe { self.ctx.api().free(addr as *mut c_void) };
        crate::trace::segment_returned(t0, self.device, addr);
        result
    }

    /// The vendor's free memory on the device, if it can say.
    pub(crate) fn vendor_free(&self) -> Option<u64> {
        let _guard = DeviceGuard::new(self.ctx, self.device).ok()?;
        self.ctx.api().memory_info().ok().map(|m| m.free)
    }
}

impl Source {
    /// The out-of-memory error every algorithm reports: what was asked, what
    /// the device and this allocator hold, and which option might help.
    pub(crate) fn oom_error(
        &self,
        requested: usize,
        segment: usize,
        reserved: u64,
        allocated: u64,
        cause: &Error,
    ) -> Error {
        let free = self.vendor_free().map_or("unknown".to_owned(), human);
        Error::new(
            ErrorKind::OutOfMemory,
            format!(
                "device {} out of memory: tried to allocate {} (a {} segment); device total {}, \
                 reserved by this allocator {}, allocated {}, free on the device {}, process limit {} \
                 ({}). If reserved is much larger than allocated, memory is fragmented: try \
                 DIPU_ALLOC_CONF=expandable_segments:True or max_split_size_mb; \
                 per_process_memory_fraction raises or lowers the limit",
                self.device,
                human(requested as u64),
                human(segment as u64),
                human(self.total),
                human(reserved),
                human(allocated),
                free,
                human(self.limit),
                cause.message()
            ),
        )
    }
}

/// Formats a byte count for people (`1.50 GiB`).
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_sizes() {
        assert_eq!(super::human(512), "512 bytes");
        assert_eq!(super::human(3 << 29), "1.50 GiB");
    }
}
