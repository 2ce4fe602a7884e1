//! [`OpenClVendor`]: opening the ICD loader, and what the vendor reports
//! about it (version string, capabilities).

use std::sync::{Arc, OnceLock};

use dipu_deviceapi::{Capabilities, Error, ErrorKind, Result};
use dipu_vendorkit::search::{Load, Search};

use crate::cl::Cl;
use crate::config::{Config, Svm};

/// The ICD loader's file name (Debian's `ocl-icd-libopencl1`, and every
/// other loader's soname).
pub const LOADER: &str = "libOpenCL.so.1";

/// The OpenCL vendor: one platform's usable devices in one context, device
/// memory from shared virtual memory, in-order queues as streams. See the
/// crate documentation.
pub struct OpenClVendor {
    pub(crate) cl: Arc<Cl>,
    pub(crate) config: Config,
    /// What the first device use found (see [`crate::init`]).
    pub(crate) init: OnceLock<crate::init::Init>,
    version: OnceLock<String>,
}

impl std::fmt::Debug for OpenClVendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenClVendor")
            .field("loader", &self.cl.path())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenClVendor {
    /// Opens the ICD loader (`DIPU_VENDOR_PATH`, then the system's library
    /// path) with the settings of the environment ([`Config::from_env`]).
    ///
    /// Fails with `VendorLibraryNotFound`, naming every place it looked,
    /// without a loader, and with `InvalidConfig` for a bad setting. A
    /// machine without a platform or device still opens: its
    /// `device_count` is the `NoDevice` error.
    pub fn new() -> Result<Self> {
        let mut search = Search::default();
        search.push_vendor_path();
        search.set_system_path(true);
        Self::with(search, Config::from_env()?)
    }

    /// Opens the ICD loader found by `search`, with `config`. Nothing is
    /// initialised (no platform is asked) until the first device use.
    pub fn with(search: Search, config: Config) -> Result<Self> {
        let load = Load {
            probe: Some("clGetPlatformIDs"),
            global: false,
        };
        let opened = search.open(&[LOADER], load).map_err(|e| {
            Error::new(
                ErrorKind::VendorLibraryNotFound,
                format!(
                    "the OpenCL ICD loader {e}. Install it with an OpenCL driver (Debian: `apt-get \
                     install ocl-icd-libopencl1 pocl-opencl-icd`), or set {} to the directory \
                     that holds {LOADER}",
                    dipu_vendorkit::search::ENV_VENDOR_PATH
                ),
            )
        })?;
        let cl = Cl::resolve(opened.library, opened.path);
        let missing = cl.missing();
        if !missing.is_empty() {
            tracing::warn!(file = %cl.path().display(), ?missing, "the OpenCL ICD loader lacks functions; calling them fails");
        }
        Ok(OpenClVendor {
            cl: Arc::new(cl),
            config,
            init: OnceLock::new(),
            version: OnceLock::new(),
        })
    }

    /// HOST_ACCESSIBLE_MEMORY when device memory is fine-grained SVM (asks
    /// the platform, so it initialises the vendor).
    pub(crate) fn caps(&self) -> Capabilities {
        if self.config.svm == Svm::Coarse {
            return Capabilities::empty();
        }
        match self.platform() {
            Ok(p) if p.fine_grain => Capabilities::HOST_ACCESSIBLE_MEMORY,
            _ => Capabilities::empty(),
        }
    }

    /// The version string: the platform, its devices and the loader's file.
    pub(crate) fn version_text(&self) -> &str {
        self.version.get_or_init(|| self.describe())
    }

    fn describe(&self) -> String {
        let loader = self.cl.path().display();
        let p = match self.platform() {
            Ok(p) => p,
            Err(e) => return format!("OpenCL (loader: {loader}; {})", e.message()),
        };
        // Identical devices (PoCL's `POCL_DEVICES="pthread pthread"`) once,
        // with their number.
        let mut devices: Vec<(String, usize)> = Vec::new();
        for d in &p.devices {
            let text = format!("{} ({}, driver {})", d.name, d.version_text, d.driver);
            match devices.iter_mut().find(|(t, _)| *t == text) {
                Some((_, n)) => *n += 1,
                None => devices.push((text, 1)),
            }
        }
        let devices: Vec<String> = devices
            .into_iter()
            .map(|(text, n)| {
                if n == 1 {
                    text
                } else {
                    format!("{n} × {text}")
                }
            })
            .collect();
        let svm = if p.fine_grain { "fine" } else { "coarse" };
        format!(
            "{} ({}; devices: {}; {svm}-grained SVM; loader: {loader})",
            p.version,
            p.name,
            devices.join(", ")
        )
    }
}
