//! [`CudaVendor`]: opening the three libraries, and what the vendor reports
//! about them (version string, capabilities).

use std::ffi::c_int;
use std::sync::OnceLock;

use dipu_deviceapi::{Capabilities, Error, ErrorKind, Result};

use crate::cudart::Cudart;
use crate::driver::{Driver, VMM_REQUIRED};
use crate::nccl::{Nccl, REQUIRED as NCCL_REQUIRED};
use crate::search::{LibrarySearch, CUDART, NCCL};

/// The CUDA vendor: cudart for devices, memory, streams and events; NCCL,
/// when found, for collectives; the driver, when found, for device names
/// and virtual memory. See the crate documentation.
pub struct CudaVendor {
    pub(crate) rt: Cudart,
    pub(crate) nccl: Option<Nccl>,
    /// Why NCCL is missing, for `Unsupported` messages.
    pub(crate) nccl_absent: String,
    /// The driver, opened but not initialised (`cuInit` runs on first
    /// device use).
    pub(crate) driver: Option<Driver>,
    /// Why the runtime may not work with this driver (a runtime newer than
    /// the driver, when no older one was found), for `NoDevice` messages.
    pub(crate) runtime_note: Option<String>,
    /// Why virtual memory is missing without asking a device, if it is.
    pub(crate) vmm_absent: Option<String>,
    /// What the first device use found (see [`crate::init`]).
    pub(crate) init: OnceLock<crate::init::Init>,
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

    /// Opens the CUDA libraries found by `search`. Nothing is initialised
    /// (no `cuInit`, no device is asked) until the first device use, so a
    /// process may fork after creating the vendor.
    pub fn with_search(search: LibrarySearch) -> Result<Self> {
        let (driver, driver_version, driver_note) = open_driver(&search);
        let (usable, too_new) = runtimes_for(driver_version);
        let mut runtime_note = None;
        let mut opened = search.open(&usable, "cudaGetErrorString");
        if opened.is_err() && !too_new.is_empty() {
            // Only a runtime newer than the driver: open it anyway (the
            // vendor starts and says why no device works).
            opened = search.open(&CUDART, "cudaGetErrorString");
            if let Ok(o) = &opened {
                runtime_note = Some(format!(
                    "{} needs a newer NVIDIA driver than this machine's (CUDA {}), and no {} was \
                     found: install the -cu12 wheels (`pip install nvidia-cuda-runtime-cu12 \
                     nvidia-nccl-cu12`) or a CUDA 12 toolkit, or update the driver",
                    o.path.display(),
                    driver_version.map_or_else(|| "?".into(), version_text),
                    usable.join(" or ")
                ));
            }
        }
        let opened = opened.map_err(|e| {
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
        if let Some(note) = &runtime_note {
            tracing::warn!("{note}");
        } else if !too_new.is_empty() {
            tracing::debug!(skipped = ?too_new, "runtimes newer than the driver are not used");
        }
        let vmm_absent = vmm_symbols(driver.as_ref()).err();
        let mut vendor = CudaVendor {
            rt,
            nccl,
            nccl_absent,
            driver,
            runtime_note,
            vmm_absent,
            init: OnceLock::new(),
            version: String::new(),
        };
        vendor.version = vendor.describe(&driver_note);
        Ok(vendor)
    }

    /// The optional capabilities found at creation.
    pub(crate) fn caps(&self) -> Capabilities {
        let mut caps = Capabilities::empty();
        caps.set(Capabilities::COLLECTIVES, self.nccl.is_some());
        caps.set(Capabilities::VIRTUAL_MEMORY, self.vmm_absent.is_none());
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

/// The runtimes a driver of `version` can run (newest first), and those
/// it cannot: cudart 13 needs a CUDA 13 driver (r580 or newer). Without a
/// driver version every runtime is tried.
fn runtimes_for(version: Option<c_int>) -> (Vec<&'static str>, Vec<&'static str>) {
    let Some(version) = version else {
        return (CUDART.to_vec(), Vec::new());
    };
    CUDART.iter().partition(|name| {
        let major: c_int = name
            .rsplit('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        major * 1000 <= version
    })
}

/// `12.8` for 12080.
fn version_text(v: c_int) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// Whether the driver exports what virtual memory needs (no device asked).
fn vmm_symbols(driver: Option<&Driver>) -> std::result::Result<(), String> {
    let driver = driver.ok_or("the CUDA driver (libcuda.so.1) was not found")?;
    let missing: Vec<_> = driver
        .missing()
        .into_iter()
        .filter(|m| VMM_REQUIRED.contains(m))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} lacks {}",
            driver.path().display(),
            missing.join(", ")
        ))
    }
}

/// Opens the driver (not initialised): the driver, its CUDA version
/// (`cuDriverGetVersion` needs no `cuInit`), and a note for the version string.
fn open_driver(search: &LibrarySearch) -> (Option<Driver>, Option<c_int>, String) {
    let opened = match search.open_driver() {
        Ok(opened) => opened,
        Err(_) if !search.uses_system_path() => return (None, None, "not searched".into()),
        Err(_) => return (None, None, "not found".into()),
    };
    let driver = Driver::resolve(opened.library, opened.path);
    let path = driver.path().display().to_string();
    let version = driver.cuDriverGetVersion().ok().and_then(|f| {
        let mut v = 0;
        // SAFETY: a valid out-pointer; needs no cuInit.
        (unsafe { f(&mut v) } == 0).then_some(v)
    });
    let note = match version {
        Some(v) => format!("{path}, CUDA {}", version_text(v)),
        None => path,
    };
    (Some(driver), version, note)
}
