//! Reading platform, device and event facts (`clGet*Info`).

use std::ffi::c_void;

use dipu_deviceapi::Result;

use crate::cl::*;
use crate::errors::check;
use crate::handles::{DeviceId, Ev, PlatformId};

/// Plain values an info query may write: any bit pattern is valid.
pub(crate) trait Value: Copy + Default {}
impl Value for cl_int {}
impl Value for cl_uint {}
impl Value for cl_ulong {}

/// A string from a `clGet*Info` call, trimmed of its terminating NUL.
fn text(bytes: Vec<u8>) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).trim().to_owned()
}

/// The signature every `clGet*Info` function shares.
type InfoFn<H> = unsafe extern "C" fn(H, cl_uint, usize, *mut c_void, *mut usize) -> cl_int;

/// Reads a string-valued `param` of `handle` with `get` (size, then value).
fn string<H: Copy>(get: InfoFn<H>, handle: H, param: cl_uint, call: &str) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: asks only for the size, through a valid out-pointer; `handle`
    // is live (the caller's).
    let code = unsafe { get(handle, param, 0, std::ptr::null_mut(), &mut size) };
    check(code, || format!("{call}({param:#x}) size"))?;
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` has `size` writable bytes, the size just reported.
    let code = unsafe {
        get(
            handle,
            param,
            size,
            bytes.as_mut_ptr().cast(),
            std::ptr::null_mut(),
        )
    };
    check(code, || format!("{call}({param:#x})"))?;
    Ok(text(bytes))
}

/// Reads a `T`-valued `param` of `handle` with `get`.
fn value<H: Copy, T: Value>(get: InfoFn<H>, handle: H, param: cl_uint, call: &str) -> Result<T> {
    let mut out = T::default();
    // SAFETY: `out` has size_of::<T>() writable bytes, which is the size
    // passed (OpenCL refuses a smaller buffer than the value with
    // CL_INVALID_VALUE and never writes more), and any bit pattern is a
    // valid T (`Value`).
    let code = unsafe {
        get(
            handle,
            param,
            std::mem::size_of::<T>(),
            (&mut out as *mut T).cast(),
            std::ptr::null_mut(),
        )
    };
    check(code, || format!("{call}({param:#x})"))?;
    Ok(out)
}

impl Cl {
    /// A string fact about a platform.
    pub(crate) fn platform_string(&self, p: PlatformId, param: cl_platform_info) -> Result<String> {
        string(self.clGetPlatformInfo()?, p.0, param, "clGetPlatformInfo")
    }

    /// A string fact about a device.
    pub(crate) fn device_string(&self, d: DeviceId, param: cl_device_info) -> Result<String> {
        string(self.clGetDeviceInfo()?, d.0, param, "clGetDeviceInfo")
    }

    /// A scalar fact about a device.
    pub(crate) fn device_value<T: Value>(&self, d: DeviceId, param: cl_device_info) -> Result<T> {
        value(self.clGetDeviceInfo()?, d.0, param, "clGetDeviceInfo")
    }

    /// An event's execution status: `CL_COMPLETE` (0), a positive stage
    /// (queued, submitted, running), or the negative error of a failed
    /// command.
    pub(crate) fn event_status(&self, ev: Ev) -> Result<cl_int> {
        value(
            self.clGetEventInfo()?,
            ev.0,
            CL_EVENT_COMMAND_EXECUTION_STATUS,
            "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)",
        )
    }
}

/// `(major, minor)` of a version string `OpenCL <major>.<minor> ...`.
pub(crate) fn parse_version(version: &str) -> Option<(i32, i32)> {
    let number = version.strip_prefix("OpenCL ")?.split_whitespace().next()?;
    let (major, minor) = number.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_strings() {
        assert_eq!(
            parse_version("OpenCL 3.0 PoCL HSTR: pthread-x86_64"),
            Some((3, 0))
        );
        assert_eq!(parse_version("OpenCL 1.2 CUDA 12.4.131"), Some((1, 2)));
        assert_eq!(parse_version("OpenCL C 1.2"), None);
        assert_eq!(parse_version("3.0"), None);
        assert_eq!(text(b"PoCL\0".to_vec()), "PoCL");
        assert_eq!(text(b"name \0junk".to_vec()), "name");
    }
}
