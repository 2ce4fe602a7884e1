//! The fake CUDA driver (`libcuda.so.1`): initialisation, devices, primary
//! contexts and virtual memory. Each behaviour cites the sentence of
//! NVIDIA's CUDA Driver API documentation it models.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::sync::atomic::Ordering;

use dipu_fakekit::vmem::VmError;
use dipu_fakekit::{thread, trace};

use crate::errors::*;
use crate::exports::exports;
use crate::state::*;
use crate::types::*;

/// The allocation granularity (minimum and recommended): 2 MiB.
const GRANULARITY: usize = 2 << 20;

/// Runs the driver call `name`: traced; in a forked child it fails; before
/// `cuInit` it is `CUDA_ERROR_NOT_INITIALIZED`; `DIPU_FAKE_FAULTS` applies.
fn call(
    name: &str,
    args: impl FnOnce() -> String,
    body: impl FnOnce(&'static Fake) -> Result<(), CUresult>,
) -> CUresult {
    trace::call(name, args);
    if thread::forked() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    let f = fake();
    if let Some(code) = f.cfg.faults.fail(name) {
        return code;
    }
    if name != "cuInit" && !f.driver_initialised.load(Ordering::Acquire) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    body(f).err().unwrap_or(CUDA_SUCCESS)
}

/// The driver API acts on the calling thread's current context; the
/// virtual-memory calls refuse a thread without one with
/// `CUDA_ERROR_INVALID_CONTEXT` (the fake's choice of strictness: the
/// documentation lists that code among their returns).
fn need_context() -> Result<(), CUresult> {
    if current_context() == 0 {
        Err(CUDA_ERROR_INVALID_CONTEXT)
    } else {
        Ok(())
    }
}

fn vm_code(e: VmError) -> CUresult {
    match e {
        VmError::Invalid(_) => CUDA_ERROR_INVALID_VALUE,
        VmError::Handle(_) => CUDA_ERROR_INVALID_HANDLE,
        VmError::OutOfMemory(_) => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

fn device(f: &Fake, dev: CUdevice) -> Result<usize, CUresult> {
    if f.valid(dev) {
        Ok(dev as usize)
    } else {
        Err(CUDA_ERROR_INVALID_DEVICE)
    }
}

/// # Safety
/// `prop` is null or a valid `CUmemAllocationProp`.
unsafe fn prop_device(f: &Fake, prop: *const CUmemAllocationProp) -> Result<i32, CUresult> {
    if prop.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and valid by the caller's contract.
    let p = unsafe { *prop };
    if p.type_ != 1 || p.location.type_ != 1 || !f.valid(p.location.id) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(p.location.id)
}

exports! {
    /// "Initializes the driver API and must be called before any other
    /// function from the driver API"; `Flags` must be 0.
    fn cuInit(Flags: c_uint) -> CUresult {
        call("cuInit", || Flags.to_string(), |f| {
            if Flags != 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            f.driver_initialised.store(true, Ordering::Release);
            thread::mark_initialised();
            Ok(())
        })
    }

    /// `DIPU_FAKE_CUDA_DRIVER_VERSION` (default 13050); needs no `cuInit`.
    fn cuDriverGetVersion(driverVersion: *mut c_int) -> CUresult {
        trace::call("cuDriverGetVersion", String::new);
        // SAFETY: an out-pointer from the caller.
        unsafe { put(driverVersion, fake().driver_version) }.err().unwrap_or(0)
    }

    /// The name of a code, or `CUDA_ERROR_INVALID_VALUE` and null.
    fn cuGetErrorName(error: CUresult, pStr: *mut *const c_char) -> CUresult {
        let text = driver_text(error, true);
        // SAFETY: an out-pointer from the caller.
        unsafe { put(pStr, text.unwrap_or(std::ptr::null())) }.err().unwrap_or(if text.is_some() { 0 } else { CUDA_ERROR_INVALID_VALUE })
    }

    /// The message of a code, or `CUDA_ERROR_INVALID_VALUE` and null.
    fn cuGetErrorString(error: CUresult, pStr: *mut *const c_char) -> CUresult {
        let text = driver_text(error, false);
        // SAFETY: an out-pointer from the caller.
        unsafe { put(pStr, text.unwrap_or(std::ptr::null())) }.err().unwrap_or(if text.is_some() { 0 } else { CUDA_ERROR_INVALID_VALUE })
    }

    /// The handle of an ordinal (the ordinal itself).
    fn cuDeviceGet(device_: *mut CUdevice, ordinal: c_int) -> CUresult {
        call("cuDeviceGet", || ordinal.to_string(), |f| {
            device(f, ordinal)?;
            // SAFETY: an out-pointer from the caller.
            unsafe { put(device_, ordinal) }
        })
    }

    /// The device's name.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
        call("cuDeviceGetName", || dev.to_string(), |f| {
            device(f, dev)?;
            if name.is_null() || len <= 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let text = format!("dipu fake CUDA device {dev}");
            let n = text.len().min(len as usize - 1);
            // SAFETY: the caller's buffer holds `len` bytes; we write n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
                name.add(n).write(0);
            }
            Ok(())
        })
    }

    /// Virtual memory management supported (102); compute capability 9.0.
    fn cuDeviceGetAttribute(pi: *mut c_int, attrib: CUdevice_attribute, dev: CUdevice) -> CUresult {
        call("cuDeviceGetAttribute", || format!("{attrib} {dev}"), |f| {
            device(f, dev)?;
            let v = match attrib {
                102 => 1,
                75 => 9,
                16 => 132,
                _ => 0,
            };
            // SAFETY: an out-pointer from the caller.
            unsafe { put(pi, v) }
        })
    }

    /// `DIPU_FAKE_MEMORY`.
    fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
        call("cuDeviceTotalMem_v2", || dev.to_string(), |f| {
            device(f, dev)?;
            // SAFETY: an out-pointer from the caller.
            unsafe { put(bytes, f.cfg.memory as usize) }
        })
    }

    /// "Retains the primary context on the device".
    fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
        call("cuDevicePrimaryCtxRetain", || dev.to_string(), |f| {
            let d = device(f, dev)?;
            // SAFETY: an out-pointer from the caller.
            unsafe { put(pctx, primary(dev) as CUcontext)? };
            f.devices[d].retained.fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
    }

    /// "Releases the primary context interop on the device"; releasing
    /// more than was retained is `CUDA_ERROR_INVALID_CONTEXT`.
    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
        call("cuDevicePrimaryCtxRelease_v2", || dev.to_string(), |f| {
            let d = device(f, dev)?;
            f.devices[d]
                .retained
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n > 0).then(|| n - 1))
                .map(|_| ())
                .map_err(|_| CUDA_ERROR_INVALID_CONTEXT)
        })
    }

    /// The calling thread's current context (null if none).
    fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
        call("cuCtxGetCurrent", String::new, |_| {
            // SAFETY: an out-pointer from the caller.
            unsafe { put(pctx, current_context() as CUcontext) }
        })
    }

    /// "Binds the specified CUDA context to the calling CPU thread"; null
    /// unbinds.
    fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
        call("cuCtxSetCurrent", || format!("{ctx:p}"), |_| {
            let raw = ctx as usize;
            if raw != 0 && context_device(raw).is_none() {
                return Err(CUDA_ERROR_INVALID_CONTEXT);
            }
            set_context(raw);
            Ok(())
        })
    }

    /// 2 MiB for both minimum and recommended.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const CUmemAllocationProp,
        option: CUmemAllocationGranularity_flags,
    ) -> CUresult {
        call("cuMemGetAllocationGranularity", || option.to_string(), |f| {
            // SAFETY: the caller's property.
            unsafe { prop_device(f, prop)? };
            // SAFETY: an out-pointer from the caller.
            unsafe { put(granularity, GRANULARITY) }
        })
    }

    /// An inaccessible address range; the size a multiple of the granularity.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemAddressReserve(
        ptr: *mut CUdeviceptr,
        size: usize,
        alignment: usize,
        addr: CUdeviceptr,
        flags: c_ulonglong,
    ) -> CUresult {
        call("cuMemAddressReserve", || format!("{size} {alignment} {addr:#x} {flags}"), |f| {
            need_context()?;
            if size == 0 || size % GRANULARITY != 0 || flags != 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let align = alignment.max(GRANULARITY);
            let at = f.vm.reserve(size, align).map_err(vm_code)?;
            // SAFETY: an out-pointer from the caller.
            unsafe { put(ptr, at as CUdeviceptr) }
        })
    }

    /// Frees a whole reservation with nothing mapped in it.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
        call("cuMemAddressFree", || format!("{ptr:#x} {size}"), |f| {
            need_context()?;
            f.vm.free_reservation(ptr as usize, size).map_err(vm_code)
        })
    }

    /// Physical memory on `prop`'s device (a memory file); counts against
    /// `DIPU_FAKE_MEMORY` until released and unmapped.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemCreate(
        handle: *mut CUmemGenericAllocationHandle,
        size: usize,
        prop: *const CUmemAllocationProp,
        flags: c_ulonglong,
    ) -> CUresult {
        call("cuMemCreate", || format!("{size} {flags}"), |f| {
            need_context()?;
            // SAFETY: the caller's property.
            let d = unsafe { prop_device(f, prop)? };
            if size == 0 || size % GRANULARITY != 0 || flags != 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if f.cfg.faults.oom() || f.used(d).saturating_add(size as u64) > f.cfg.memory {
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
            let h = f.vm.create(size, d).map_err(vm_code)?;
            // SAFETY: an out-pointer from the caller.
            unsafe { put(handle, h) }
        })
    }

    /// "Frees the memory that was allocated on a device through
    /// cuMemCreate"; the memory goes once it is also unmapped.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
        call("cuMemRelease", || handle.to_string(), |f| {
            need_context()?;
            f.vm.release(handle).map_err(vm_code)
        })
    }

    /// Maps a chunk into a reservation; no device may touch it until
    /// `cuMemSetAccess`.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemMap(
        ptr: CUdeviceptr,
        size: usize,
        offset: usize,
        handle: CUmemGenericAllocationHandle,
        flags: c_ulonglong,
    ) -> CUresult {
        call("cuMemMap", || format!("{ptr:#x} {size} {offset} {handle} {flags}"), |f| {
            need_context()?;
            if flags != 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            f.vm.map(ptr as usize, size, offset, handle).map_err(vm_code)
        })
    }

    /// "Set the access flags for each location specified in desc for the
    /// given virtual address range"; only those devices may touch it.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) -> CUresult {
        call("cuMemSetAccess", || format!("{ptr:#x} {size} count={count}"), |f| {
            need_context()?;
            if desc.is_null() || count == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            // SAFETY: the caller's array of `count` descriptors.
            let descs = unsafe { std::slice::from_raw_parts(desc, count) };
            let mut devices = Vec::new();
            for d in descs {
                if d.location.type_ != 1 || !f.valid(d.location.id) || !(0..=3).contains(&d.flags) || d.flags == 2 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                if d.flags != 0 {
                    devices.push((d.location.id, d.flags == 3));
                }
                trace::call("  access", || format!("device={} flags={}", d.location.id, d.flags));
            }
            f.vm.set_access(ptr as usize, size, &devices).map_err(vm_code)
        })
    }

    /// Unmaps; the range stays reserved.
    #[cfg(not(feature = "old-libraries"))]
    fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
        call("cuMemUnmap", || format!("{ptr:#x} {size}"), |f| {
            need_context()?;
            f.vm.unmap(ptr as usize, size).map_err(vm_code)
        })
    }
}
