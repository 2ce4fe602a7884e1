//! The OpenCL functions the library calls, resolved at run time from the
//! ICD loader (`libOpenCL.so.1`, already loaded by the OpenCL vendor) with
//! the vendor's binding machinery, never linked. Signatures as in the
//! Khronos `CL/cl.h`.

#![expect(non_camel_case_types, reason = "C names from the Khronos headers")]

use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

use dipu_vendorkit::search::{Load, Search};

/// `cl_int`.
pub(crate) type cl_int = i32;
/// `cl_uint`.
pub(crate) type cl_uint = u32;
/// An OpenCL object handle (`cl_context`, `cl_command_queue`, ...).
pub(crate) type Obj = *mut c_void;

/// `CL_QUEUE_CONTEXT`.
pub(crate) const CL_QUEUE_CONTEXT: cl_uint = 0x1090;
/// `CL_QUEUE_DEVICE`.
pub(crate) const CL_QUEUE_DEVICE: cl_uint = 0x1091;
/// `CL_DEVICE_EXTENSIONS`.
pub(crate) const CL_DEVICE_EXTENSIONS: cl_uint = 0x1030;
/// `CL_PROGRAM_BUILD_LOG`.
pub(crate) const CL_PROGRAM_BUILD_LOG: cl_uint = 0x1183;
/// `CL_EVENT_COMMAND_EXECUTION_STATUS`.
pub(crate) const CL_EVENT_COMMAND_EXECUTION_STATUS: cl_uint = 0x11D3;

dipu_vendorkit::library! {
    upgrade: "an OpenCL 2.0 ICD loader: install ocl-icd-libopencl1",
    /// The ICD loader's functions this library calls.
    struct Cl("OpenCL ICD loader") {
        fn clGetCommandQueueInfo(q: Obj, param: cl_uint, size: usize, value: *mut c_void, size_ret: *mut usize) -> cl_int;
        fn clGetDeviceInfo(d: Obj, param: cl_uint, size: usize, value: *mut c_void, size_ret: *mut usize) -> cl_int;
        fn clCreateProgramWithSource(ctx: Obj, count: cl_uint, strings: *const *const c_char, lengths: *const usize, err: *mut cl_int) -> Obj;
        fn clBuildProgram(p: Obj, n: cl_uint, devices: *const Obj, options: *const c_char, notify: *const c_void, user: *mut c_void) -> cl_int;
        fn clGetProgramBuildInfo(p: Obj, d: Obj, param: cl_uint, size: usize, value: *mut c_void, size_ret: *mut usize) -> cl_int;
        fn clCreateKernel(p: Obj, name: *const c_char, err: *mut cl_int) -> Obj;
        fn clSetKernelArg(k: Obj, index: cl_uint, size: usize, value: *const c_void) -> cl_int;
        fn clSetKernelArgSVMPointer(k: Obj, index: cl_uint, value: *const c_void) -> cl_int;
        fn clEnqueueNDRangeKernel(q: Obj, k: Obj, dims: cl_uint, offset: *const usize, global: *const usize, local: *const usize, n_wait: cl_uint, wait: *const Obj, event: *mut Obj) -> cl_int;
        fn clGetEventInfo(e: Obj, param: cl_uint, size: usize, value: *mut c_void, size_ret: *mut usize) -> cl_int;
        fn clReleaseEvent(e: Obj) -> cl_int;
    }
}

/// The loader's functions, opened once (an error names where it looked).
pub(crate) fn cl() -> Result<&'static Cl, String> {
    static CL: OnceLock<Result<Cl, String>> = OnceLock::new();
    CL.get_or_init(|| {
        let mut search = Search::default();
        search.push_vendor_path();
        search.set_system_path(true);
        let load = Load {
            probe: Some("clGetPlatformIDs"),
            global: false,
        };
        search
            .open(&["libOpenCL.so.1"], load)
            .map(|o| Cl::resolve(o.library, o.path))
            .map_err(|e| format!("the OpenCL ICD loader {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Calls a bound function, or fails naming it.
macro_rules! call {
    ($cl:expr, $f:ident($($a:expr),* $(,)?)) => {{
        let f = $cl.$f().map_err(|e| crate::rt::err(e.to_string()))?;
        // SAFETY: the signature is the one cl.h gives; the arguments are
        // handles of the vendor's context and locals that live across the call.
        unsafe { f($($a),*) }
    }};
}
pub(crate) use call;
