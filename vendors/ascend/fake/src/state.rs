//! Process state: initialisation, devices, each thread's current device
//! (the fake kit's: none until `aclrtSetDevice`),
//! and the registry of memory regions (device allocations, pinned host
//! memory, mappings).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::entry::{code, fail, R};
use crate::streams::Stream;

/// Set by the first `aclInit`.
pub(crate) static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// One fake device.
#[derive(Default)]
pub(crate) struct Device {
    /// Bytes in use.
    pub(crate) used: AtomicU64,
    /// `aclrtSetDevice` calls (reference counted, never reset here).
    pub(crate) set_count: AtomicU64,
    /// The default stream, made on first use.
    pub(crate) default_stream: OnceLock<Arc<Stream>>,
    /// Live events with `ACL_EVENT_SYNC`.
    pub(crate) sync_events: AtomicUsize,
    /// Devices this one may access (`aclrtDeviceEnablePeerAccess`).
    pub(crate) peers: Mutex<HashSet<i32>>,
}

/// Every device.
pub(crate) fn devices() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        (0..crate::config::get().devices)
            .map(|_| Device::default())
            .collect()
    })
}

/// `device`, or `ACL_ERROR_RT_INVALID_DEVICEID`.
pub(crate) fn device(id: i32) -> R<&'static Device> {
    usize::try_from(id)
        .ok()
        .and_then(|i| devices().get(i))
        .map_or_else(
            || {
                fail(
                    code::RT_INVALID_DEVICEID,
                    format!("device {id} does not exist ({} devices)", devices().len()),
                )
            },
            Ok,
        )
}

/// `ACL_ERROR_UNINITIALIZE` before `aclInit`.
pub(crate) fn require_init() -> R {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        fail(code::UNINITIALIZE, "aclInit has not been called")
    }
}

/// The thread's device. "如果没有提前指定计算设备（例如调用aclrtSetDevice接口），
/// 则调用aclrtGetDevice接口时，返回错误" (aclrtGetDevice.md): calls that need a
/// device fail on a thread that never set one.
pub(crate) fn current() -> R<i32> {
    require_init()?;
    dipu_fakekit::thread::current_device().map_or_else(
        || {
            fail(
                code::RT_CONTEXT_NULL,
                "this thread has no current device: call aclrtSetDevice first",
            )
        },
        Ok,
    )
}

/// `aclrtSetDevice` for this thread.
pub(crate) fn set_current(id: i32) -> R {
    require_init()?;
    device(id)?.set_count.fetch_add(1, Ordering::Relaxed);
    dipu_fakekit::thread::set_current_device(id);
    Ok(())
}

/// What a memory region is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `aclrtMalloc*` memory of a device (`bytes` counted, padding included).
    Device { device: i32, counted: u64 },
    /// `aclrtMallocHost` memory.
    Host,
    /// A mapping of a physical chunk on a device.
    Mapped { device: i32 },
}

/// One registered region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    pub(crate) len: usize,
    pub(crate) kind: Kind,
}

/// Every live region, by start address.
pub(crate) fn regions() -> &'static Mutex<BTreeMap<usize, Region>> {
    static REGIONS: OnceLock<Mutex<BTreeMap<usize, Region>>> = OnceLock::new();
    REGIONS.get_or_init(Default::default)
}

/// The device whose memory holds `ptr..ptr + len`, `None` for host memory
/// (pinned or not), or an error for a range that sticks out of a region.
pub(crate) fn device_of(ptr: usize, len: usize) -> R<Option<i32>> {
    let regions = regions().lock();
    let Some((&start, region)) = regions.range(..=ptr).next_back() else {
        return Ok(None);
    };
    if ptr >= start + region.len.max(1) {
        return Ok(None);
    }
    // A range may run on into regions that follow without a gap (adjacent
    // mappings of a reservation), on the same device.
    let mut end = start + region.len;
    while ptr + len > end {
        match regions.get(&end) {
            Some(next) if next.kind.device() == region.kind.device() && next.kind.device().is_some() => {
                end += next.len
            }
            _ => {
                return fail(
                    code::RT_PARAM_INVALID,
                    format!("{len} bytes at {ptr:#x} run past the end of the region at {start:#x} ({} bytes)", region.len),
                )
            }
        }
    }
    Ok(region.kind.device())
}

impl Kind {
    /// The device of device memory; `None` for host memory.
    pub(crate) fn device(self) -> Option<i32> {
        match self {
            Kind::Device { device, .. } | Kind::Mapped { device } => Some(device),
            Kind::Host => None,
        }
    }
}
