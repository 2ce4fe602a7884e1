//! [`AscendVendor`]: opening the two libraries, `aclInit`, the per-thread
//! current device, and what the vendor reports (version, capabilities).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use dipu_deviceapi::{Capabilities, Error, ErrorKind, Result};
use parking_lot::Mutex;

use crate::acl::*;
use crate::callbacks::Reporter;
use crate::hccl::{Hccl, REQUIRED as HCCL_REQUIRED};
use crate::search::{LibrarySearch, ACL, HCCL};

/// Per thread and vendor instance: the device the trait calls current
/// (default 0), and the one this thread last passed to `aclrtSetDevice`
/// (-1: none). Keyed by the vendor's id, so two vendors on two ACL
/// libraries in one process (tests) do not share it.
#[derive(Debug, Clone, Copy)]
struct ThreadDevice {
    current: i32,
    bound: i32,
}

thread_local! {
    static DEVICES: RefCell<HashMap<u64, ThreadDevice>> = RefCell::new(HashMap::new());
}

/// The Ascend vendor: the ACL runtime for devices, memory, streams, events
/// and virtual memory; HCCL, when found, for collectives. See the crate
/// documentation.
pub struct AscendVendor {
    pub(crate) acl: Acl,
    pub(crate) hccl: Option<Hccl>,
    /// Why HCCL is missing, for `Unsupported` messages.
    pub(crate) hccl_absent: String,
    /// Why virtual memory is missing (empty: present).
    pub(crate) vmm_absent: String,
    pub(crate) device_count: OnceLock<i32>,
    /// Device pairs with peer access enabled both ways (smaller first).
    pub(crate) peers: Mutex<HashSet<(i32, i32)>>,
    /// The callback thread, for ACL without `aclrtLaunchHostFunc`.
    pub(crate) reporter: OnceLock<Reporter>,
    /// Devices whose default stream is subscribed to the callback thread.
    pub(crate) subscribed_defaults: Mutex<HashSet<i32>>,
    /// The streams this vendor created.
    pub(crate) streams: crate::streams::Streams,
    /// The live events.
    pub(crate) events: crate::events::Events,
    /// The live mappings (virtual memory).
    pub(crate) mappings: crate::vmm::Mappings,
    /// Communicators aborted.
    pub(crate) aborted: crate::collectives::Aborted,
    /// Each communicator's rank.
    pub(crate) ranks: crate::collectives::Ranks,
    version: String,
    /// This instance's key in the per-thread device table.
    id: u64,
}

impl std::fmt::Debug for AscendVendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendVendor")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl AscendVendor {
    /// Opens the CANN libraries found as [`LibrarySearch::from_env`] says,
    /// and initialises ACL.
    ///
    /// Fails with `VendorLibraryNotFound`, listing every place it looked,
    /// when `libascendcl.so` is not found.
    pub fn new() -> Result<Self> {
        Self::with_search(LibrarySearch::from_env())
    }

    /// Opens the CANN libraries found by `search`.
    pub fn with_search(search: LibrarySearch) -> Result<Self> {
        let opened = search.open(ACL, "aclInit").map_err(|e| {
            Error::new(
                ErrorKind::VendorLibraryNotFound,
                format!(
                    "the ACL runtime library {e}. Install the CANN toolkit and source its \
                     set_env.sh (which sets ASCEND_HOME_PATH), or set ASCEND_HOME_PATH to a \
                     CANN installation"
                ),
            )
        })?;
        let acl = Acl::resolve(opened.library, opened.path);
        let missing: Vec<_> = acl
            .missing()
            .into_iter()
            .filter(|m| REQUIRED.contains(m))
            .collect();
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::VendorInitFailed,
                format!(
                    "{} lacks {}: it is not a usable ACL runtime",
                    acl.path().display(),
                    missing.join(", ")
                ),
            ));
        }
        // SAFETY: a null configuration path is documented as allowed.
        let code = unsafe { (acl.aclInit()?)(std::ptr::null()) };
        if code != ACL_ERROR_REPEAT_INITIALIZE {
            acl.check(code, || "aclInit(NULL)".into())?;
        }
        let (hccl, hccl_absent) = match search.open(HCCL, "HcclGetRootInfo") {
            Ok(opened) => {
                let hccl = Hccl::resolve(opened.library, opened.path);
                let missing: Vec<_> = hccl
                    .missing()
                    .into_iter()
                    .filter(|m| HCCL_REQUIRED.contains(m))
                    .collect();
                if missing.is_empty() {
                    (Some(hccl), String::new())
                } else {
                    let why = format!("{} lacks {}", hccl.path().display(), missing.join(", "));
                    (None, why)
                }
            }
            Err(e) => (None, e.to_string()),
        };
        let vmm_missing: Vec<_> = acl
            .missing()
            .into_iter()
            .filter(|m| VMM_REQUIRED.contains(m))
            .collect();
        let vmm_absent = if vmm_missing.is_empty() {
            String::new()
        } else {
            format!("{} lacks {}", acl.path().display(), vmm_missing.join(", "))
        };
        let mut vendor = AscendVendor {
            acl,
            hccl,
            hccl_absent,
            vmm_absent,
            device_count: OnceLock::new(),
            peers: Mutex::new(HashSet::new()),
            reporter: OnceLock::new(),
            subscribed_defaults: Mutex::new(HashSet::new()),
            streams: Default::default(),
            events: Default::default(),
            mappings: Default::default(),
            aborted: Default::default(),
            ranks: Default::default(),
            version: String::new(),
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
        };
        vendor.version = vendor.describe();
        Ok(vendor)
    }

    /// The optional capabilities found at creation.
    pub(crate) fn caps(&self) -> Capabilities {
        let mut caps = Capabilities::empty();
        caps.set(Capabilities::COLLECTIVES, self.hccl.is_some());
        caps.set(Capabilities::VIRTUAL_MEMORY, self.vmm_absent.is_empty());
        caps
    }

    /// The version string: runtime version, files, and the optional
    /// functions the runtime lacks.
    pub(crate) fn version_text(&self) -> &str {
        &self.version
    }

    fn describe(&self) -> String {
        let runtime = self
            .acl
            .aclrtGetVersion()
            .ok()
            .and_then(|f| {
                let (mut major, mut minor, mut patch) = (0, 0, 0);
                // SAFETY: valid out-pointers.
                (unsafe { f(&mut major, &mut minor, &mut patch) } == ACL_SUCCESS)
                    .then(|| format!("{major}.{minor}.{patch}"))
            })
            .unwrap_or_else(|| "unknown".into());
        let hccl = match &self.hccl {
            Some(h) => h.path().display().to_string(),
            None => format!("not usable ({})", self.hccl_absent),
        };
        let mut lacking: Vec<&str> = self
            .acl
            .missing()
            .into_iter()
            .filter(|m| OPTIONAL.contains(m))
            .collect();
        if let Some(h) = &self.hccl {
            lacking.extend(h.missing());
        }
        let lacking = if lacking.is_empty() {
            String::new()
        } else {
            format!("; without {}", lacking.join(", "))
        };
        format!(
            "ACL runtime {runtime} (ascendcl: {}; hccl: {hccl}; host callbacks: {}{lacking})",
            self.acl.path().display(),
            if self.acl.aclrtLaunchHostFunc().is_ok() {
                "aclrtLaunchHostFunc"
            } else {
                "aclrtLaunchCallback + a report thread"
            }
        )
    }

    /// The number of devices, cached once known; `NoDevice` when none.
    pub(crate) fn count(&self) -> Result<i32> {
        if let Some(&count) = self.device_count.get() {
            return Ok(count);
        }
        let mut count = 0u32;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.acl.aclrtGetDeviceCount()?)(&mut count) };
        self.acl.check(code, || "aclrtGetDeviceCount".into())?;
        if count == 0 {
            return Err(Error::vendor(
                ErrorKind::NoDevice,
                i64::from(ACL_ERROR_RT_NO_DEVICE),
                "aclrtGetDeviceCount found no Ascend device",
            ));
        }
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        Ok(*self.device_count.get_or_init(|| count))
    }

    /// `InvalidDevice` unless `device` is in `0..count`.
    pub(crate) fn check_device(&self, device: i32) -> Result<()> {
        let count = self.count()?;
        if (0..count).contains(&device) {
            Ok(())
        } else {
            Err(Error::invalid_device(device, count))
        }
    }

    /// The calling thread's current device (0 until it sets one). Unlike
    /// `aclrtGetDevice`, this works on a thread that never set a device.
    pub(crate) fn current(&self) -> Result<i32> {
        Ok(self.thread_device().current)
    }

    fn thread_device(&self) -> ThreadDevice {
        DEVICES.with(|d| {
            *d.borrow_mut().entry(self.id).or_insert(ThreadDevice {
                current: 0,
                bound: -1,
            })
        })
    }

    fn update(&self, f: impl FnOnce(&mut ThreadDevice)) {
        DEVICES.with(|d| {
            let mut d = d.borrow_mut();
            let entry = d.entry(self.id).or_insert(ThreadDevice {
                current: 0,
                bound: -1,
            });
            f(entry);
        });
    }

    /// Makes `device` current for the calling thread.
    pub(crate) fn set_current(&self, device: i32) -> Result<()> {
        self.check_device(device)?;
        self.update(|d| d.current = device);
        self.bind().map(|_| ())
    }

    /// Makes the trait's current device ACL's current device on this thread
    /// (`aclrtSetDevice`, once per thread and device: it is reference
    /// counted, and the device stays set for the thread's life), and
    /// returns it.
    pub(crate) fn bind(&self) -> Result<i32> {
        let ThreadDevice {
            current: device,
            bound,
        } = self.thread_device();
        if bound != device {
            self.check_device(device)?;
            // SAFETY: a checked device index.
            let code = unsafe { (self.acl.aclrtSetDevice()?)(device) };
            self.acl
                .check(code, || format!("aclrtSetDevice({device})"))?;
            self.update(|d| d.bound = device);
        }
        Ok(device)
    }

    /// Runs `f` with `device` current in ACL, then restores the trait's
    /// current device.
    pub(crate) fn on_device<T>(&self, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let previous = self.thread_device().current;
        if previous == device {
            self.bind()?;
            return f();
        }
        self.set_current(device)?;
        let result = f();
        self.update(|d| d.current = previous);
        let restored = self.bind();
        let value = result?;
        restored?;
        Ok(value)
    }
}
