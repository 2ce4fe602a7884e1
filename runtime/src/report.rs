//! `ShutdownReport`: what was still live when the runtime shut down.

use dipu_deviceapi::Error;

use crate::live::LiveAllocation;
use crate::Runtime;

/// Device memory still allocated on one device at shutdown (after its
/// cache was emptied), from the allocator's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLeak {
    /// The device.
    pub device: i32,
    /// Bytes in blocks still allocated (rounded block sizes).
    pub allocated_bytes: u64,
    /// Bytes requested by the allocations still live.
    pub requested_bytes: u64,
    /// Blocks still allocated.
    pub allocated_blocks: u64,
    /// Bytes still reserved from the vendor (segments holding live blocks).
    pub reserved_bytes: u64,
}

/// What [`crate::shutdown`] found: the memory still live after every
/// device was synchronized and every cache emptied, and the steps that
/// failed. A clean shutdown has no leaks and no errors.
#[derive(Debug, Clone, Default)]
pub struct ShutdownReport {
    /// Whether there was a runtime to shut down.
    pub was_initialized: bool,
    /// Per device whose allocator was used and still has memory allocated.
    pub devices: Vec<DeviceLeak>,
    /// The live device allocations made through the runtime, by address.
    pub live: Vec<LiveAllocation>,
    /// Pinned host bytes still allocated (rounded block sizes).
    pub pinned_bytes: u64,
    /// Pinned host blocks still allocated.
    pub pinned_blocks: u64,
    /// Steps that failed (a device synchronize, an `empty_cache`); the
    /// shutdown went on past them.
    pub errors: Vec<Error>,
    /// The memory checker's report (when `DIPU_MEM_CHECK` is on), also
    /// written to stderr or `DIPU_MEM_CHECK_LOG_FILE`.
    pub memcheck: Option<dipu_memcheck::Report>,
}

impl ShutdownReport {
    /// Whether nothing was live and no step failed.
    pub fn is_clean(&self) -> bool {
        self.devices.is_empty()
            && self.live.is_empty()
            && self.pinned_blocks == 0
            && self.errors.is_empty()
    }

    /// Device bytes still allocated, over all devices.
    pub fn leaked_device_bytes(&self) -> u64 {
        self.devices.iter().map(|d| d.allocated_bytes).sum()
    }
}

impl Runtime {
    /// Synchronizes every device, empties every device allocator's cache
    /// and the pinned cache, and reports (and logs with `tracing::warn!`)
    /// what is still live. The runtime stays usable; [`crate::shutdown`]
    /// calls this after removing the process-global runtime.
    pub fn release_and_report(&self) -> ShutdownReport {
        let mut report = ShutdownReport {
            was_initialized: true,
            ..ShutdownReport::default()
        };
        for device in 0..self.device_count() {
            if let Err(e) = self.synchronize_device(device) {
                report
                    .errors
                    .push(e.context(format_args!("synchronizing device {device}")));
            }
        }
        // Guard violations go into the checker's report below.
        if let Err(e) = self.check_guards() {
            report
                .errors
                .push(e.context("checking the memory checker's guard bytes"));
        }
        for alloc in self.allocators.created() {
            let device = alloc.device();
            if let Err(e) = alloc.empty_cache() {
                report
                    .errors
                    .push(e.context(format_args!("emptying device {device}'s cache")));
            }
            let s = alloc.stats();
            if s.allocation.current > 0 || s.allocated_bytes.current > 0 {
                let leak = DeviceLeak {
                    device,
                    allocated_bytes: s.allocated_bytes.current,
                    requested_bytes: s.requested_bytes.current,
                    allocated_blocks: s.allocation.current,
                    reserved_bytes: s.reserved_bytes.current,
                };
                tracing::warn!(
                    device,
                    bytes = leak.allocated_bytes,
                    blocks = leak.allocated_blocks,
                    "dipu runtime shutdown: device memory is still allocated (a leak)"
                );
                report.devices.push(leak);
            }
        }
        report.live = self.live_allocations();
        for a in &report.live {
            tracing::warn!(
                ptr = ?a.as_ptr(),
                bytes = a.len,
                device = a.device,
                "dipu runtime shutdown: device allocation never freed"
            );
        }
        if let Err(e) = self.host.empty_cache() {
            report
                .errors
                .push(e.context("emptying the pinned host cache"));
        }
        let h = self.host.stats();
        report.pinned_bytes = h.allocated_bytes.current;
        report.pinned_blocks = h.allocation.current;
        if report.pinned_blocks > 0 {
            tracing::warn!(
                bytes = report.pinned_bytes,
                blocks = report.pinned_blocks,
                "dipu runtime shutdown: pinned host memory is still allocated (a leak)"
            );
        }
        for e in &report.errors {
            tracing::warn!("dipu runtime shutdown: {e}");
        }
        if dipu_memcheck::enabled() {
            let r = dipu_memcheck::report();
            r.write();
            report.memcheck = Some(r);
        }
        report
    }
}
