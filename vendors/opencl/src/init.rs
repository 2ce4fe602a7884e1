//! Initialisation on first device use, as PyTorch does: creating the
//! vendor only opens the ICD loader, so a process may fork before any
//! device is touched. The first device use chooses the platform, keeps
//! its usable devices, and makes the one context, each device's default
//! queue and the host-function thread. A child forked after that is told
//! so (whether PoCL survives a fork is not known: treated as CUDA).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::cl::*;
use crate::config::{Svm, ENV_PLATFORM, ENV_SVM};
use crate::errors::{check, describe, error};
use crate::handles::{Context, DeviceId, PlatformId};
use crate::hostfn::HostFuncs;
use crate::info::parse_version;
use crate::memory::Allocations;
use crate::queues::Queues;
use crate::status::{CL_DEVICE_NOT_FOUND, CL_PLATFORM_NOT_FOUND_KHR, CL_SUCCESS};
use crate::OpenClVendor;

/// What the first device use found.
#[derive(Debug)]
pub(crate) struct Init {
    /// The process that initialised OpenCL.
    pid: u32,
    /// The platform, or why there is none.
    state: Result<Platform>,
}

/// One device of the context.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) id: DeviceId,
    pub(crate) name: String,
    /// `CL_DEVICE_VERSION`, e.g. `OpenCL 3.0 PoCL ...`.
    pub(crate) version_text: String,
    /// Its `(major, minor)`.
    pub(crate) version: (i32, i32),
    /// `CL_DRIVER_VERSION`.
    pub(crate) driver: String,
    /// The memory budget: the global memory, or less (`DIPU_OPENCL_MEMORY`).
    pub(crate) total: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
    pub(crate) max_alloc: u64,
    pub(crate) compute_units: u32,
    /// `cl_khr_priority_hints`.
    pub(crate) priority_hints: bool,
    /// `CL_DEVICE_SVM_CAPABILITIES`.
    svm: cl_device_svm_capabilities,
}

impl Device {
    /// Whether the device has fine-grained SVM buffers.
    fn fine_grain(&self) -> bool {
        self.svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER != 0
    }
}

/// The chosen platform and everything made on it.
pub(crate) struct Platform {
    pub(crate) cl: Arc<Cl>,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) context: Context,
    pub(crate) devices: Vec<Device>,
    /// Device memory is fine-grained SVM (host-accessible).
    pub(crate) fine_grain: bool,
    pub(crate) queues: Queues,
    pub(crate) memory: Allocations,
    pub(crate) events: crate::events::Events,
    pub(crate) host: HostFuncs,
}

impl std::fmt::Debug for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Platform")
            .field("name", &self.name)
            .field("devices", &self.devices)
            .field("fine_grain", &self.fine_grain)
            .finish_non_exhaustive()
    }
}

impl Init {
    /// Whether this process is the one that initialised OpenCL.
    pub(crate) fn is_own_process(&self) -> bool {
        self.pid == std::process::id()
    }
}

impl OpenClVendor {
    /// The initialised platform: initialises OpenCL on first use; in a
    /// process forked after that, `NoDevice` naming the fork.
    pub(crate) fn platform(&self) -> Result<&Platform> {
        let init = self.init.get_or_init(|| {
            crate::fork::watch();
            Init {
                pid: std::process::id(),
                state: self.initialise(),
            }
        });
        if crate::fork::maybe_forked() && init.pid != std::process::id() {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "OpenCL was initialised in process {} and this process ({}) was forked from \
                     it afterwards: the OpenCL vendor cannot be used in a child forked after \
                     initialisation (start workers with the `spawn` method, or use no device \
                     before forking)",
                    init.pid,
                    std::process::id()
                ),
            ));
        }
        init.state.as_ref().map_err(Clone::clone)
    }

    fn initialise(&self) -> Result<Platform> {
        let cl = &self.cl;
        let missing: Vec<_> = cl
            .missing()
            .into_iter()
            .filter(|m| REQUIRED_SVM.contains(m))
            .collect();
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "the OpenCL ICD loader {} lacks {}: it is older than OpenCL 2.0, and device \
                     memory needs 2.0's shared virtual memory",
                    cl.path().display(),
                    missing.join(", ")
                ),
            ));
        }
        let (platform, name, version, devices) = self.choose()?;
        let fine_grain = devices.iter().all(Device::fine_grain) && self.config.svm != Svm::Coarse;
        if self.config.svm == Svm::Fine && !fine_grain {
            let lacking: Vec<&str> = devices
                .iter()
                .filter(|d| !d.fine_grain())
                .map(|d| d.name.as_str())
                .collect();
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "{ENV_SVM}=fine, but {} of platform {name:?} lack fine-grained SVM buffers \
                     (unset {ENV_SVM} to use coarse-grained ones)",
                    lacking.join(", ")
                ),
            ));
        }
        let host = HostFuncs::start(Arc::clone(cl))?;
        let context = create_context(cl, platform, &devices)?;
        let ids: Vec<DeviceId> = devices.iter().map(|d| d.id).collect();
        let queues = match Queues::new(cl, context, &ids) {
            Ok(q) => q,
            Err(e) => {
                release_context(cl, context);
                return Err(e);
            }
        };
        let memory = Allocations::new(devices.len());
        tracing::debug!(platform = %name, devices = devices.len(), fine_grain, "OpenCL initialised");
        Ok(Platform {
            cl: Arc::clone(cl),
            name,
            version,
            context,
            devices,
            fine_grain,
            queues,
            memory,
            events: Default::default(),
            host,
        })
    }

    /// The platform to use and its usable devices: the one named by
    /// `DIPU_OPENCL_PLATFORM`, else the first with a usable device.
    fn choose(&self) -> Result<(PlatformId, String, String, Vec<Device>)> {
        let cl = &self.cl;
        let platforms = platform_ids(cl)?;
        let mut named = Vec::new();
        let mut refused = Vec::new();
        for id in platforms {
            let name = cl.platform_string(id, CL_PLATFORM_NAME)?;
            let version = cl.platform_string(id, CL_PLATFORM_VERSION)?;
            named.push(name.clone());
            if let Some(want) = &self.config.platform {
                if !name.to_lowercase().contains(&want.to_lowercase()) {
                    continue;
                }
            }
            let mut usable = Vec::new();
            for device in device_ids(cl, id)? {
                match self.device(device) {
                    Ok(d) => usable.push(d),
                    Err(why) => refused.push(format!("{why} (platform {name:?})")),
                }
            }
            if !usable.is_empty() {
                return Ok((id, name, version, usable));
            }
            if self.config.platform.is_some() {
                break;
            }
        }
        if let Some(want) = &self.config.platform {
            if !named
                .iter()
                .any(|n| n.to_lowercase().contains(&want.to_lowercase()))
            {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "{ENV_PLATFORM}={want:?} names none of the OpenCL platforms: {}",
                        named.join(", ")
                    ),
                ));
            }
        }
        Err(Error::new(
            ErrorKind::NoDevice,
            format!(
                "no usable OpenCL device (OpenCL 2.0 or later, 64-bit addresses, coarse-grained \
                 SVM buffers) on the platforms {}: {}",
                named.join(", "),
                if refused.is_empty() {
                    "they have no devices".to_owned()
                } else {
                    refused.join("; ")
                }
            ),
        ))
    }

    /// A device's facts, or why it cannot be used.
    fn device(&self, id: DeviceId) -> std::result::Result<Device, String> {
        let cl = &self.cl;
        let facts = || -> Result<Device> {
            let name = cl.device_string(id, CL_DEVICE_NAME)?;
            let version_text = cl.device_string(id, CL_DEVICE_VERSION)?;
            let global: cl_ulong = cl.device_value(id, CL_DEVICE_GLOBAL_MEM_SIZE)?;
            let extensions = cl.device_string(id, CL_DEVICE_EXTENSIONS)?;
            // Devices before OpenCL 2.0 do not know the query: no SVM.
            let svm: cl_ulong = cl.device_value(id, CL_DEVICE_SVM_CAPABILITIES).unwrap_or(0);
            Ok(Device {
                id,
                version: parse_version(&version_text).unwrap_or((0, 0)),
                driver: cl.device_string(id, CL_DRIVER_VERSION)?,
                total: self.config.memory.map_or(global, |m| m.min(global)),
                max_alloc: cl.device_value(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE)?,
                compute_units: cl.device_value(id, CL_DEVICE_MAX_COMPUTE_UNITS)?,
                priority_hints: extensions
                    .split_whitespace()
                    .any(|e| e == "cl_khr_priority_hints"),
                svm,
                name,
                version_text,
            })
        };
        let d = facts().map_err(|e| format!("a device could not be asked: {e}"))?;
        let available: cl_uint = cl.device_value(id, CL_DEVICE_AVAILABLE).unwrap_or(0);
        let bits: cl_uint = cl.device_value(id, CL_DEVICE_ADDRESS_BITS).unwrap_or(0);
        if available == 0 {
            return Err(format!("{} is not available", d.name));
        }
        if d.version < (2, 0) {
            return Err(format!(
                "{} is {} (2.0 or later needed)",
                d.name, d.version_text
            ));
        }
        if bits != 64 {
            return Err(format!("{} has {bits}-bit addresses (64 needed)", d.name));
        }
        if d.svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER == 0 {
            return Err(format!("{} has no coarse-grained SVM buffers", d.name));
        }
        Ok(d)
    }
}

/// Every platform the ICD loader found; none is `NoDevice`.
fn platform_ids(cl: &Cl) -> Result<Vec<PlatformId>> {
    let get = cl.clGetPlatformIDs()?;
    let mut count: cl_uint = 0;
    // SAFETY: asks only for the count, through a valid out-pointer.
    let code = unsafe { get(0, std::ptr::null_mut(), &mut count) };
    if code == CL_PLATFORM_NOT_FOUND_KHR || (code == CL_SUCCESS && count == 0) {
        return Err(Error::vendor(
            ErrorKind::NoDevice,
            i64::from(code),
            format!(
                "the OpenCL ICD loader ({}) found no platform ({}): install an OpenCL driver \
                 (Debian: `apt-get install pocl-opencl-icd`) and check OCL_ICD_VENDORS",
                cl.path().display(),
                describe(code)
            ),
        ));
    }
    check(code, || "clGetPlatformIDs (count)".into())?;
    let mut ids = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `ids` has room for `count` platforms.
    let code = unsafe { get(count, ids.as_mut_ptr(), std::ptr::null_mut()) };
    check(code, || "clGetPlatformIDs".into())?;
    Ok(ids.into_iter().map(PlatformId).collect())
}

/// Every device of `platform` (none: empty).
fn device_ids(cl: &Cl, platform: PlatformId) -> Result<Vec<DeviceId>> {
    let get = cl.clGetDeviceIDs()?;
    let mut count: cl_uint = 0;
    // SAFETY: asks only for the count, through a valid out-pointer.
    let code = unsafe {
        get(
            platform.0,
            CL_DEVICE_TYPE_ALL,
            0,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    if code == CL_DEVICE_NOT_FOUND {
        return Ok(Vec::new());
    }
    check(code, || "clGetDeviceIDs(CL_DEVICE_TYPE_ALL) (count)".into())?;
    let mut ids = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `ids` has room for `count` devices.
    let code = unsafe {
        get(
            platform.0,
            CL_DEVICE_TYPE_ALL,
            count,
            ids.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check(code, || "clGetDeviceIDs(CL_DEVICE_TYPE_ALL)".into())?;
    Ok(ids.into_iter().map(DeviceId).collect())
}

/// Logs what the driver reports about the context (on a driver thread:
/// it only logs).
unsafe extern "C" fn context_notify(
    info: *const c_char,
    _private: *const c_void,
    _size: usize,
    _user: *mut c_void,
) {
    if !info.is_null() {
        // SAFETY: the driver passes a NUL-terminated message valid for the call.
        let text = unsafe { CStr::from_ptr(info) }.to_string_lossy();
        tracing::warn!("the OpenCL driver reports: {text}");
    }
}

/// The one context of every usable device of `platform`.
fn create_context(cl: &Cl, platform: PlatformId, devices: &[Device]) -> Result<Context> {
    let props = [CL_CONTEXT_PLATFORM, platform.0 as cl_context_properties, 0];
    let ids: Vec<cl_device_id> = devices.iter().map(|d| d.id.0).collect();
    let mut code = 0;
    // SAFETY: a 0-terminated property list, `ids.len()` devices of the
    // platform, a callback that only logs, and a valid out-pointer.
    let context = unsafe {
        (cl.clCreateContext()?)(
            props.as_ptr(),
            ids.len() as cl_uint,
            ids.as_ptr(),
            Some(context_notify),
            std::ptr::null_mut(),
            &mut code,
        )
    };
    check(code, || format!("clCreateContext({} devices)", ids.len()))?;
    if context.is_null() {
        return Err(error(code, "clCreateContext returned NULL"));
    }
    Ok(Context(context))
}

/// `clReleaseContext`, logging a failure.
pub(crate) fn release_context(cl: &Cl, context: Context) {
    if let Ok(release) = cl.clReleaseContext() {
        // SAFETY: the context's last reference, which nothing uses any more.
        let code = unsafe { release(context.0) };
        if code != CL_SUCCESS {
            tracing::warn!("{}", error(code, "clReleaseContext"));
        }
    }
}

impl Drop for Platform {
    /// Waits for every queue (so every host function has run), stops the
    /// host-function thread, then frees what is still allocated and releases
    /// the events, queues and context.
    fn drop(&mut self) {
        if let Err(e) = self.finish(None) {
            tracing::warn!("the OpenCL vendor's queues at its end: {e}");
        }
        self.host.stop();
        self.free_all();
        self.events.release_all(&self.cl);
        self.queues.release_all(&self.cl);
        release_context(&self.cl, self.context);
    }
}
