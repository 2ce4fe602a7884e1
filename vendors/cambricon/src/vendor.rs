//! [`CambriconVendor`]: opening the three libraries, and what the vendor
//! reports about them (version string, capabilities).

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::sync::OnceLock;

use dipu_deviceapi::{Capabilities, Error, ErrorKind, Result};
use parking_lot::Mutex;

use crate::cncl::{Cncl, REQUIRED as CNCL_REQUIRED};
use crate::cndrv::{Cndrv, CN_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED, VMM_REQUIRED};
use crate::cnrt::Cnrt;
use crate::search::{LibrarySearch, CNCL, CNDRV, CNRT, ENV_NEUWARE_HOME};

/// The Cambricon vendor: CNRT for devices, memory, queues and notifiers;
/// CNCL, when found, for collectives; CNDrv, when found and every device
/// supports it, for virtual memory. See the crate documentation.
pub struct CambriconVendor {
    pub(crate) rt: Cnrt,
    pub(crate) cncl: Option<Cncl>,
    /// Why CNCL is missing, for `Unsupported` messages.
    pub(crate) cncl_absent: String,
    /// CNDrv, when every device supports its virtual memory API.
    pub(crate) drv: Option<Cndrv>,
    /// Why virtual memory is missing, for `Unsupported` messages.
    pub(crate) vmm_absent: String,
    pub(crate) device_count: OnceLock<c_int>,
    /// The queue behind `StreamHandle::DEFAULT` on each device, created on
    /// first use and never destroyed (see `streams.rs`).
    pub(crate) default_queues: Mutex<HashMap<c_int, usize>>,
    /// The device each live notifier was created on.
    pub(crate) notifier_devices: Mutex<HashMap<usize, c_int>>,
    /// Live virtual memory mappings: address to bytes.
    pub(crate) mappings: Mutex<BTreeMap<u64, usize>>,
    version: String,
}

impl std::fmt::Debug for CambriconVendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CambriconVendor")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl CambriconVendor {
    /// Opens the Cambricon libraries found as [`LibrarySearch::from_env`] says.
    ///
    /// Fails with `VendorLibraryNotFound`, listing every place it looked,
    /// when CNRT is not found.
    pub fn new() -> Result<Self> {
        Self::with_search(LibrarySearch::from_env())
    }

    /// Opens the Cambricon libraries found by `search`.
    pub fn with_search(search: LibrarySearch) -> Result<Self> {
        let opened = search.open(&CNRT).map_err(|e| {
            Error::new(
                ErrorKind::VendorLibraryNotFound,
                format!(
                    "Cambricon's runtime library {e}. Install Cambricon Neuware (CNToolkit), or \
                     set {ENV_NEUWARE_HOME} to its installation"
                ),
            )
        })?;
        let rt = Cnrt::resolve(opened.library, opened.path);
        let missing = rt.missing();
        if !missing.is_empty() {
            tracing::warn!(file = %rt.path().display(), ?missing, "CNRT lacks functions; calling them fails");
        }
        let (cncl, cncl_absent) = match search.open(&CNCL) {
            Ok(opened) => {
                let cncl = Cncl::resolve(opened.library, opened.path);
                let missing: Vec<_> = cncl
                    .missing()
                    .into_iter()
                    .filter(|m| CNCL_REQUIRED.contains(m))
                    .collect();
                if missing.is_empty() {
                    (Some(cncl), String::new())
                } else {
                    let why = format!("{} lacks {}", cncl.path().display(), missing.join(", "));
                    (None, why)
                }
            }
            Err(e) => (None, e.to_string()),
        };
        let mut vendor = CambriconVendor {
            rt,
            cncl,
            cncl_absent,
            drv: None,
            vmm_absent: String::new(),
            device_count: OnceLock::new(),
            default_queues: Mutex::new(HashMap::new()),
            notifier_devices: Mutex::new(HashMap::new()),
            mappings: Mutex::new(BTreeMap::new()),
            version: String::new(),
        };
        let drv_note = match search.open(&CNDRV) {
            Ok(opened) => {
                let drv = Cndrv::resolve(opened.library, opened.path);
                let note = drv.path().display().to_string();
                match vendor.vmm_support(&drv) {
                    Ok(()) => vendor.drv = Some(drv),
                    Err(why) => vendor.vmm_absent = why,
                }
                note
            }
            Err(e) => {
                vendor.vmm_absent = e.to_string();
                "not found".to_owned()
            }
        };
        vendor.version = vendor.describe(&drv_note);
        Ok(vendor)
    }

    /// The optional capabilities found at creation.
    pub(crate) fn caps(&self) -> Capabilities {
        let mut caps = Capabilities::empty();
        caps.set(Capabilities::COLLECTIVES, self.cncl.is_some());
        caps.set(Capabilities::VIRTUAL_MEMORY, self.drv.is_some());
        caps
    }

    /// The version string: runtime version and every library's file.
    pub(crate) fn version_text(&self) -> &str {
        &self.version
    }

    fn describe(&self, drv_note: &str) -> String {
        let version =
            |f: Option<unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int) -> c_int>| {
                let f = f?;
                let (mut a, mut b, mut c) = (0, 0, 0);
                // SAFETY: valid out-pointers; needs no device.
                (unsafe { f(&mut a, &mut b, &mut c) } == 0).then(|| format!("{a}.{b}.{c}"))
            };
        let runtime = version(self.rt.cnrtGetLibVersion().ok()).unwrap_or_else(|| "unknown".into());
        let cncl = match &self.cncl {
            Some(cncl) => format!(
                "{} {}",
                cncl.path().display(),
                version(cncl.cnclGetLibVersion().ok())
                    .unwrap_or_else(|| "(version unknown)".into())
            ),
            None => "not found".to_owned(),
        };
        format!(
            "CNRT {runtime} (cnrt: {}; cncl: {cncl}; cndrv: {drv_note})",
            self.rt.path().display()
        )
    }

    /// `Ok` if every device supports CNDrv's virtual address management
    /// (device attribute 0x30B is 1), else why not.
    fn vmm_support(&self, drv: &Cndrv) -> std::result::Result<(), String> {
        let missing: Vec<_> = drv
            .missing()
            .into_iter()
            .filter(|m| VMM_REQUIRED.contains(m))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} lacks {}",
                drv.path().display(),
                missing.join(", ")
            ));
        }
        let count = self.count().map_err(|e| e.to_string())?;
        for ordinal in 0..count {
            let dev = crate::vmm::cn_device(drv, ordinal).map_err(|e| e.to_string())?;
            let mut supported = 0;
            // SAFETY: resolved above; valid out-pointer and device handle.
            let code = unsafe {
                (drv.cnDeviceGetAttribute().map_err(|e| e.to_string())?)(
                    &mut supported,
                    CN_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
                    dev,
                )
            };
            drv.check(code, || {
                "cnDeviceGetAttribute(VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)".into()
            })
            .map_err(|e| e.to_string())?;
            if supported != 1 {
                return Err(format!(
                    "device {ordinal} does not support CNDrv's virtual address management"
                ));
            }
        }
        Ok(())
    }
}
