//! [`CudaVendor`]: opening the three libraries, and what the vendor reports
//! about them (version string, capabilities).

use std::ffi::c_int;
use std::sync::OnceLock;

use dipu_deviceapi::{Capabilities, Error, ErrorKind, Result};

use crate::cudart::Cudart;
use crate::driver::{
    Driver, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, VMM_REQUIRED,
};
use crate::nccl::{Nccl, REQUIRED as NCCL_REQUIRED};
use crate::search::{LibrarySearch, CUDART, NCCL};
use crate::vmm::Vmm;

/// The CUDA vendor: cudart for devices, memory, streams and events; NCCL,
/// when found, for collectives; the driver, when found, for device names
/// and virtual memory. See the crate documentation.
pub struct CudaVendor {
    pub(crate) rt: Cudart,
    pub(crate) nccl: Option<Nccl>,
    /// Why NCCL is missing, for `Unsupported` messages.
    pub(crate) nccl_absent: String,
    /// The driver, once `cuInit` succeeded.
    pub(crate) driver: Option<Driver>,
    /// Set when every device supports the virtual memory API.
    pub(crate) vmm: Option<Vmm>,
    /// Why virtual memory is missing, for `Unsupported` messages.
    pub(crate) vmm_absent: String,
    pub(crate) device_count: OnceLock<c_int>,
    version: String,
}

impl std::fmt::Debug for CudaVendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaVendor")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl CudaVendor {
    /// Opens the CUDA libraries found as [`LibrarySearch::from_env`] says.
    ///
    /// Fails with `VendorLibraryNotFound`, listing every place it looked,
    /// when no CUDA runtime is found. A machine without a GPU or driver
    /// still opens: its `device_count` is the `NoDevice` error.
    pub fn new() -> Result<Self> {
        Self::with_search(LibrarySearch::from_env())
    }

    /// Opens the CUDA libraries found by `search`.
    pub fn with_search(search: LibrarySearch) -> Result<Self> {
        let opened = search.open(&CUDART, "cudaGetErrorString").map_err(|e| {
            Error::new(
                ErrorKind::VendorLibraryNotFound,
                format!(
                    "the CUDA runtime library {e}. Install the CUDA toolkit, or \
                     `pip install nvidia-cuda-runtime nvidia-nccl-cu13` in the active Python \
                     environment, or set {} to a CUDA installation or Python environment",
                    crate::search::ENV_CUDA_HOME
                ),
            )
        })?;
        let rt = Cudart::resolve(opened.library, opened.path);
        let missing = rt.missing();
        if !missing.is_empty() {
            tracing::warn!(file = %rt.path().display(), ?missing, "the CUDA runtime lacks functions; calling them fails");
        }
        let (nccl, nccl_absent) = match search.open(&NCCL, "ncclGetVersion") {
            Ok(opened) => {
                let nccl = Nccl::resolve(opened.library, opened.path);
                let missing: Vec<_> = nccl
                    .missing()
                    .into_iter()
                    .filter(|m| NCCL_REQUIRED.contains(m))
                    .collect();
                if missing.is_empty() {
                    (Some(nccl), String::new())
                } else {
                    let why = format!("{} lacks {}", nccl.path().display(), missing.join(", "));
                    (None, why)
                }
            }
            Err(e) => (None, e.to_string()),
        };
        let (driver, driver_note) = open_driver(&search);
        let mut vendor = CudaVendor {
            rt,
            nccl,
            nccl_absent,
            driver,
            vmm: None,
            vmm_absent: String::new(),
            device_count: OnceLock::new(),
            version: String::new(),
        };
        match vendor.vmm_support() {
            Ok(devices) => vendor.vmm = Some(Vmm::new(devices)),
            Err(why) => vendor.vmm_absent = why,
        }
        vendor.version = vendor.describe(&driver_note);
        Ok(vendor)
    }

    /// The optional capabilities found at creation.
    pub(crate) fn caps(&self) -> Capabilities {
        let mut caps = Capabilities::empty();
        caps.set(Capabilities::COLLECTIVES, self.nccl.is_some());
        caps.set(Capabilities::VIRTUAL_MEMORY, self.vmm.is_some());
        caps
    }

    /// The version string: runtime version and every library's file.
    pub(crate) fn version_text(&self) -> &str {
        &self.version
    }

    fn describe(&self, driver_note: &str) -> String {
        let runtime = self
            .rt
            .cudaRuntimeGetVersion()
            .ok()
            .and_then(|f| {
                let mut v = 0;
                // SAFETY: a valid out-pointer; needs no device or driver.
                (unsafe { f(&mut v) } == 0).then_some(v)
            })
            .map_or_else(
                || "unknown".to_owned(),
                |v| format!("{}.{}", v / 1000, v % 1000 / 10),
            );
        let nccl = match &self.nccl {
            Some(nccl) => format!("{} {}", nccl.path().display(), nccl_version(nccl)),
            None => "not found".to_owned(),
        };
        format!(
            "CUDA runtime {runtime} (cudart: {}; nccl: {nccl}; driver: {driver_note})",
            self.rt.path().display()
        )
    }

    /// The device count if every device supports the virtual memory API,
    /// else why not.
    fn vmm_support(&self) -> std::result::Result<c_int, String> {
        let driver = self
            .driver
            .as_ref()
            .ok_or("the CUDA driver (libcuda.so.1) is not usable")?;
        let missing: Vec<_> = driver
            .missing()
            .into_iter()
            .filter(|m| VMM_REQUIRED.contains(m))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} lacks {}",
                driver.path().display(),
                missing.join(", ")
            ));
        }
        let count = self.count().map_err(|e| e.to_string())?;
        for ordinal in 0..count {
            let dev = self.cu_device(driver, ordinal).map_err(|e| e.to_string())?;
            let mut supported = 0;
            // SAFETY: resolved above; valid out-pointer and device handle.
            let code = unsafe {
                (driver.cuDeviceGetAttribute().map_err(|e| e.to_string())?)(
                    &mut supported,
                    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                    dev,
                )
            };
            driver
                .check(code, || "cuDeviceGetAttribute(VMM supported)".into())
                .map_err(|e| e.to_string())?;
            if supported != 1 {
                return Err(format!(
                    "device {ordinal} does not support the virtual memory API"
                ));
            }
        }
        Ok(count)
    }
}

/// `2.32.3` from `ncclGetVersion`, or `(version unknown)`.
fn nccl_version(nccl: &Nccl) -> String {
    let Ok(get) = nccl.ncclGetVersion() else {
        return "(version unknown)".into();
    };
    let mut code = 0;
    // SAFETY: a valid out-pointer; needs no device.
    if unsafe { get(&mut code) } != 0 {
        return "(version unknown)".into();
    }
    // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
    let (major, minor, patch) = if code >= 10000 {
        (code / 10000, code % 10000 / 100, code % 100)
    } else {
        (code / 1000, code % 1000 / 100, code % 100)
    };
    format!("{major}.{minor}.{patch}")
}

/// Opens and initialises the driver: the driver if `cuInit` succeeded, and
/// a note for the version string either way.
fn open_driver(search: &LibrarySearch) -> (Option<Driver>, String) {
    let opened = match search.open_driver() {
        Ok(opened) => opened,
        Err(_) if !search.uses_system_path() => return (None, "not searched".into()),
        Err(_) => return (None, "not found".into()),
    };
    let driver = Driver::resolve(opened.library, opened.path);
    let path = driver.path().display().to_string();
    let init = driver.cuInit().and_then(|init| {
        // SAFETY: cuInit(0) is the documented first call of the driver API.
        driver.check(unsafe { init(0) }, || "cuInit(0)".into())
    });
    if let Err(e) = init {
        return (None, format!("{path} ({})", e.message()));
    }
    let version = driver.cuDriverGetVersion().ok().and_then(|f| {
        let mut v = 0;
        // SAFETY: a valid out-pointer.
        (unsafe { f(&mut v) } == 0).then_some(v)
    });
    let note = match version {
        Some(v) => format!("{path}, CUDA {}.{}", v / 1000, v % 1000 / 10),
        None => path,
    };
    (Some(driver), note)
}
