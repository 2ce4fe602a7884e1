//! Initialisation on first device use, as PyTorch does: creating the
//! vendor only opens the libraries, so a process may fork (DataLoader
//! workers) before any device is touched. The first device use runs
//! `cuInit`, counts the devices, asks which devices can reach each other
//! and whether every device supports virtual memory. A child forked after
//! that is told so, since CUDA cannot be used across a fork.

use std::collections::HashSet;
use std::ffi::c_int;

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use crate::cudart::*;
use crate::driver::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
use crate::vmm::Vmm;
use crate::CudaVendor;

/// What the first device use found.
#[derive(Debug)]
pub(crate) struct Init {
    /// The process that initialised CUDA.
    pid: u32,
    /// The device count, or why there is no device.
    count: Result<c_int>,
    /// Virtual memory, or why not.
    pub(crate) vmm: std::result::Result<Vmm, String>,
    /// `can_access[d][p]`: device `d` can access device `p`'s memory.
    pub(crate) can_access: Vec<Vec<bool>>,
    /// (device, peer) pairs with peer access enabled.
    pub(crate) enabled: Mutex<HashSet<(c_int, c_int)>>,
}

impl CudaVendor {
    /// The initialised state: initialises CUDA on first use; in a process
    /// forked after that, `NoDevice` naming the fork.
    pub(crate) fn initialised(&self) -> Result<&Init> {
        let init = self.init.get_or_init(|| self.initialise());
        if init.pid != std::process::id() {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "CUDA was initialised in process {} and this process ({}) was forked from \
                     it afterwards: CUDA cannot be used in a child forked after initialisation \
                     (start workers with the `spawn` method, or use no device before forking)",
                    init.pid,
                    std::process::id()
                ),
            ));
        }
        Ok(init)
    }

    fn initialise(&self) -> Init {
        let driver_init = self.driver.as_ref().map(|driver| {
            driver.cuInit().and_then(|init| {
                // SAFETY: cuInit(0) is the documented first call of the driver API.
                driver.check(unsafe { init(0) }, || "cuInit(0)".into())
            })
        });
        let count = self.count_devices(driver_init.as_ref());
        let can_access = match &count {
            Ok(n) => (0..*n)
                .map(|d| (0..*n).map(|p| d != p && self.can_access(d, p)).collect())
                .collect(),
            Err(_) => Vec::new(),
        };
        let vmm = match (&count, &self.vmm_absent, &driver_init) {
            (_, Some(why), _) => Err(why.clone()),
            (_, _, Some(Err(e))) => Err(e.to_string()),
            (Err(e), _, _) => Err(e.to_string()),
            (Ok(n), None, _) => self.vmm_devices(*n).map(|()| Vmm::new(*n)),
        };
        Init {
            pid: std::process::id(),
            count,
            vmm,
            can_access,
            enabled: Mutex::new(HashSet::new()),
        }
    }

    /// The number of devices (a clone of the first answer).
    pub(crate) fn count(&self) -> Result<c_int> {
        self.initialised()?.count.clone()
    }

    /// `cudaGetDeviceCount`, with the reason when there is no device.
    fn count_devices(&self, driver_init: Option<&Result<()>>) -> Result<c_int> {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rt.cudaGetDeviceCount()?)(&mut count) };
        let checked = self.rt.check(code, || "cudaGetDeviceCount".into());
        let e = match checked {
            Ok(()) if count > 0 => return Ok(count),
            Ok(()) => Error::vendor(
                ErrorKind::NoDevice,
                i64::from(cudaErrorNoDevice),
                "cudaGetDeviceCount found no CUDA device",
            ),
            Err(e) => e,
        };
        if e.kind() != ErrorKind::NoDevice {
            return Err(e);
        }
        if let Some(note) = &self.runtime_note {
            return Err(e.context(note));
        }
        Err(match (driver_init, &self.driver) {
            (Some(Err(init)), Some(driver)) => e.context(format!(
                "the NVIDIA driver ({}) was found but {init}",
                driver.path().display()
            )),
            (_, None) => e.context(
                "the NVIDIA driver (libcuda.so.1) was not found, so this machine has no usable \
                 CUDA device",
            ),
            _ => e,
        })
    }

    /// `cudaDeviceCanAccessPeer(device, peer)`; false if it fails.
    fn can_access(&self, device: c_int, peer: c_int) -> bool {
        let Ok(f) = self.rt.cudaDeviceCanAccessPeer() else {
            return false;
        };
        let mut can = 0;
        // SAFETY: a valid out-pointer and device ordinals below the count.
        let code = unsafe { f(&mut can, device, peer) };
        self.rt
            .check(code, || {
                format!("cudaDeviceCanAccessPeer({device}, {peer})")
            })
            .is_ok()
            && can == 1
    }

    /// Whether every device supports the virtual memory API.
    fn vmm_devices(&self, count: c_int) -> std::result::Result<(), String> {
        let driver = self.driver.as_ref().ok_or("no driver")?;
        for ordinal in 0..count {
            let dev = self.cu_device(driver, ordinal).map_err(|e| e.to_string())?;
            let mut supported = 0;
            let get = driver.cuDeviceGetAttribute().map_err(|e| e.to_string())?;
            // SAFETY: a valid out-pointer and device handle.
            let code = unsafe {
                get(
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
        Ok(())
    }

    /// Enables peer access from `device` to `peer` once, where CUDA allows
    /// it (`cudaDeviceCanAccessPeer`), so peer copies go directly rather
    /// than through the host.
    pub(crate) fn enable_peer(&self, device: c_int, peer: c_int) -> Result<()> {
        let init = self.initialised()?;
        let allowed = init
            .can_access
            .get(device as usize)
            .and_then(|row| row.get(peer as usize))
            .copied()
            .unwrap_or(false);
        if !allowed || !init.enabled.lock().insert((device, peer)) {
            return Ok(());
        }
        let previous = self.current()?;
        self.set_current(device)?;
        let enable = self.rt.cudaDeviceEnablePeerAccess()?;
        // SAFETY: a valid peer ordinal and no flags.
        let code = unsafe { enable(peer, 0) };
        let result = if code == cudaErrorPeerAccessAlreadyEnabled {
            let _ = self.rt.error(code, "");
            Ok(())
        } else {
            self.rt.check(code, || {
                format!("cudaDeviceEnablePeerAccess({peer}) on device {device}")
            })
        };
        self.set_current(previous)?;
        result
    }
}
