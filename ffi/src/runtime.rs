//! The library and the process-global runtime: version, init, shutdown,
//! vendor.

use std::ffi::{c_char, CStr};

use dipu_runtime::{
    Algorithm, AllocatorConfig, Error, HostAlgorithm, Result, RuntimeOptions, VendorSpec,
};

use crate::status::{dipu_status, ffi_boundary, non_null, write_c_string, write_out};
use crate::types::{dipu_options, dipu_shutdown_report};

/// The version of this library (e.g. "0.1.0"; equal to DIPU_RUNTIME_VERSION
/// of the header it was built with),
/// a static string. Never NULL; thread-safe; needs no runtime.
#[no_mangle]
pub extern "C" fn dipu_version() -> *const c_char {
    ffi_boundary!("dipu_version", c"".as_ptr() => {
        const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
        VERSION.as_ptr().cast()
    })
}

/// The option string `ptr` names (`what` in messages), or `None` for NULL.
///
/// # Safety
/// `ptr` must be NULL or a NUL-terminated string.
unsafe fn option_str<'a>(ptr: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: not NULL, NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::invalid_argument(format!("options.{what} is not UTF-8")))
}

/// `RuntimeOptions` from the C struct.
///
/// # Safety
/// Every field must be NULL or a NUL-terminated string.
unsafe fn runtime_options(o: &dipu_options) -> Result<RuntimeOptions> {
    let mut options = RuntimeOptions::from_env();
    // SAFETY: every field is NULL or NUL-terminated (caller's contract).
    if let Some(v) = unsafe { option_str(o.vendor, "vendor") }? {
        options = options.with_vendor(VendorSpec::parse(v)?);
    }
    // SAFETY: as above.
    if let Some(a) = unsafe { option_str(o.device_algorithm, "device_algorithm") }? {
        options = options.with_algorithm(a.parse::<Algorithm>()?);
    }
    // SAFETY: as above.
    if let Some(c) = unsafe { option_str(o.alloc_conf, "alloc_conf") }? {
        options = options.with_alloc_conf(AllocatorConfig::parse(c)?);
    }
    // SAFETY: as above.
    if let Some(h) = unsafe { option_str(o.host_algorithm, "host_algorithm") }? {
        options = options.with_host_algorithm(h.parse::<HostAlgorithm>()?);
    }
    Ok(options)
}

/// Creates the process-global runtime: loads the vendor and sets up the
/// allocators as `opts` says (NULL, or NULL fields: from the environment).
///
/// Calling it is optional: every other call creates the runtime from the
/// environment on first use. Errors: DIPU_STATUS_INVALID_ARGUMENT if a
/// runtime already exists (call dipu_shutdown first), DIPU_STATUS_INVALID_CONFIG
/// for a bad option, the vendor loader's status when the vendor cannot load.
/// Thread-safe.
///
/// # Safety
/// `opts` must be NULL or point to a dipu_options whose fields are NULL or
/// NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dipu_init(opts: *const dipu_options) -> dipu_status {
    ffi_boundary!("dipu_init", {
        let options = if opts.is_null() {
            RuntimeOptions::from_env()
        } else {
            // SAFETY: not NULL; valid by the caller's contract.
            unsafe { runtime_options(&*opts) }?
        };
        dipu_runtime::init(options).map(drop)
    })
}

/// Shuts the process-global runtime down: synchronizes every device,
/// empties every cache and, when `out` is not NULL, reports what is still
/// allocated (leaks are also logged). Without a runtime it reports
/// was_initialized = 0. Afterwards the next call creates a new runtime;
/// streams and pointers of the old one are then rejected as unknown.
///
/// Errors: none besides DIPU_STATUS_INTERNAL (failed steps are counted in
/// out->errors). Thread-safe, but no other thread should be using the
/// runtime meanwhile.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_shutdown_report.
#[no_mangle]
pub unsafe extern "C" fn dipu_shutdown(out: *mut dipu_shutdown_report) -> dipu_status {
    ffi_boundary!("dipu_shutdown", {
        let report = dipu_runtime::shutdown()?;
        if !out.is_null() {
            // SAFETY: not NULL; valid for writing by the caller's contract.
            unsafe { out.write((&report).into()) };
        }
        Ok(())
    })
}

/// Copies the vendor's name (e.g. "host") and a NUL into `buf` of `len`
/// bytes, and the size needed (NUL included) into `*needed` when `needed`
/// is not NULL. `buf` NULL with `len` 0 only asks for the size.
///
/// Errors: DIPU_STATUS_INVALID_ARGUMENT when `buf` is too small (nothing
/// is written to it), the runtime's status if it cannot be created.
/// Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_vendor_name(
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_vendor_name", {
        let rt = dipu_runtime::get()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_c_string(rt.vendor_name(), buf, len, needed) }
    })
}

/// `dipu_vendor_capabilities` bit: the vendor has collectives.
pub const DIPU_VENDOR_CAP_COLLECTIVES: u32 = 1 << 0;
/// `dipu_vendor_capabilities` bit: the vendor maps virtual memory
/// (expandable segments).
pub const DIPU_VENDOR_CAP_VIRTUAL_MEMORY: u32 = 1 << 1;
/// `dipu_vendor_capabilities` bit: device memory is host memory of this
/// process, which host code may read and write in place once the device
/// work that uses it is done (the `host` vendor).
pub const DIPU_VENDOR_CAP_HOST_ACCESSIBLE_MEMORY: u32 = 1 << 2;

/// Stores the vendor's optional capabilities in `*out`: a sum of
/// `DIPU_VENDOR_CAP_*` bits (bits not defined here may be set by newer
/// vendors; ignore them).
///
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`, the runtime's
/// status if it cannot be created. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a uint32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_vendor_capabilities(out: *mut u32) -> dipu_status {
    ffi_boundary!("dipu_vendor_capabilities", {
        let rt = dipu_runtime::get()?;
        let bits = rt.api().capabilities().bits();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", bits) }
    })
}

/// Stores 1 in `*out` if the process-global runtime exists now, else 0.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_is_initialized(out: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_is_initialized", {
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", dipu_runtime::is_initialized().into()) }
    })
}

/// Stores 1 in `*out` if this process is a child forked after its parent
/// created the process-global runtime, else 0. Such a child cannot use
/// dipu: every call that needs the runtime fails at once with
/// DIPU_STATUS_VENDOR_INIT_FAILED ("Cannot re-initialize dipu in forked
/// subprocess"). Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`.
/// Thread-safe; needs no runtime.
///
/// # Safety
/// `out` must be NULL or valid for writing an int32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_is_in_bad_fork(out: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_is_in_bad_fork", {
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", dipu_runtime::is_in_bad_fork().into()) }
    })
}

/// Stores the number of devices in `*out` without creating the runtime:
/// the runtime's count if it exists, else the count of the vendor the
/// environment names, loaded once just to ask (0 on a machine without
/// devices). A process that called only this can fork, and its children
/// can use dipu. Errors: DIPU_STATUS_INVALID_ARGUMENT for a NULL `out`; the
/// loader's status when the vendor cannot load. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_device_count_without_init(out: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_device_count_without_init", {
        non_null(out, "out")?;
        let n = dipu_runtime::device_count_without_init()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", n) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_the_crate_version() {
        // SAFETY: dipu_version returns a static NUL-terminated string.
        let version = unsafe { CStr::from_ptr(dipu_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn capability_bits_are_the_vendor_abi_bits() {
        use dipu_deviceapi::Capabilities as C;
        assert_eq!(DIPU_VENDOR_CAP_COLLECTIVES, C::COLLECTIVES.bits());
        assert_eq!(DIPU_VENDOR_CAP_VIRTUAL_MEMORY, C::VIRTUAL_MEMORY.bits());
        assert_eq!(
            DIPU_VENDOR_CAP_HOST_ACCESSIBLE_MEMORY,
            C::HOST_ACCESSIBLE_MEMORY.bits()
        );
    }
}
