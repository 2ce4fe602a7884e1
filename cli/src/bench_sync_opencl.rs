//! The raw OpenCL loops of `dipu bench sync --vendor opencl`: six calls of
//! the ICD loader (`libOpenCL.so.1`, the file the vendor has open), on the
//! vendor's own queue, with the C signatures of the Khronos `CL/cl.h`.

use std::ffi::c_void;

use dipu_deviceapi::{Error, ErrorKind, Result};

type Queue = *mut c_void;
type Event = *mut c_void;
type SvmMemcpy = unsafe extern "C" fn(
    Queue,
    u32,
    *mut c_void,
    *const c_void,
    usize,
    u32,
    *const Event,
    *mut Event,
) -> i32;
type Finish = unsafe extern "C" fn(Queue) -> i32;
type Marker = unsafe extern "C" fn(Queue, u32, *const Event, *mut Event) -> i32;
type WaitForEvents = unsafe extern "C" fn(u32, *const Event) -> i32;
type ReleaseEvent = unsafe extern "C" fn(Event) -> i32;

/// The loader's name, as the vendor opens it.
const LOADER: &str = "libOpenCL.so.1";
/// `CL_FALSE`.
const NON_BLOCKING: u32 = 0;

/// The calls, bound to one `cl_command_queue`.
pub(super) struct Raw {
    queue: Queue,
    svm_memcpy: SvmMemcpy,
    finish: Finish,
    flush: Finish,
    marker: Marker,
    wait: WaitForEvents,
    release: ReleaseEvent,
    _library: libloading::Library,
}

impl Raw {
    /// Opens the loader and binds the calls to `queue`, a live
    /// `cl_command_queue` of the vendor.
    pub(super) fn open(queue: Queue) -> Result<Raw> {
        let err = |e: libloading::Error| {
            Error::new(
                ErrorKind::VendorLibraryNotFound,
                format!("{LOADER} for the raw loop: {e}"),
            )
        };
        // SAFETY: the vendor has this library open already; its
        // initialisers have run.
        let library = unsafe { libloading::Library::new(LOADER) }.map_err(err)?;
        // SAFETY: each symbol has the C signature of CL/cl.h that its type
        // spells; the library is kept in the result.
        unsafe {
            Ok(Raw {
                queue,
                svm_memcpy: *library
                    .get::<SvmMemcpy>(b"clEnqueueSVMMemcpy\0")
                    .map_err(err)?,
                finish: *library.get::<Finish>(b"clFinish\0").map_err(err)?,
                flush: *library.get::<Finish>(b"clFlush\0").map_err(err)?,
                marker: *library
                    .get::<Marker>(b"clEnqueueMarkerWithWaitList\0")
                    .map_err(err)?,
                wait: *library
                    .get::<WaitForEvents>(b"clWaitForEvents\0")
                    .map_err(err)?,
                release: *library
                    .get::<ReleaseEvent>(b"clReleaseEvent\0")
                    .map_err(err)?,
                _library: library,
            })
        }
    }

    /// A non-blocking `clEnqueueSVMMemcpy` of `bytes` from `src` to `dst`.
    ///
    /// # Safety
    /// As [`Raw::copy_finish`].
    unsafe fn enqueue_copy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract; a live queue, no events.
        let code = unsafe {
            (self.svm_memcpy)(
                self.queue,
                NON_BLOCKING,
                dst,
                src,
                bytes,
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        status(code, "clEnqueueSVMMemcpy")
    }

    /// A non-blocking `clEnqueueSVMMemcpy`, then `clFinish`.
    ///
    /// # Safety
    /// `dst` holds `bytes` SVM bytes of the queue's context, `src` as many
    /// host bytes.
    pub(super) unsafe fn copy_finish(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.enqueue_copy(dst, src, bytes) }?;
        // SAFETY: a live queue.
        status(unsafe { (self.finish)(self.queue) }, "clFinish")
    }

    /// A non-blocking `clEnqueueSVMMemcpy`, then what the vendor's
    /// `stream_synchronize` calls: a marker, `clFlush`, `clWaitForEvents`
    /// on the marker and its release.
    ///
    /// # Safety
    /// As [`Raw::copy_finish`].
    pub(super) unsafe fn copy_marker_wait(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.enqueue_copy(dst, src, bytes) }?;
        let mut marker = std::ptr::null_mut();
        // SAFETY: a live queue, no wait list, a valid out-pointer.
        let code = unsafe { (self.marker)(self.queue, 0, std::ptr::null(), &mut marker) };
        status(code, "clEnqueueMarkerWithWaitList")?;
        // SAFETY: a live queue; `marker` is a live event, released once.
        let (flushed, waited, released) = unsafe {
            let flushed = (self.flush)(self.queue);
            let waited = (self.wait)(1, &marker);
            (flushed, waited, (self.release)(marker))
        };
        status(flushed, "clFlush")?;
        status(waited, "clWaitForEvents")?;
        status(released, "clReleaseEvent")
    }
}

/// `Ok` for `CL_SUCCESS`, else an error naming the call and the code.
fn status(code: i32, call: &str) -> Result<()> {
    match code {
        0 => Ok(()),
        code => Err(Error::new(
            ErrorKind::VendorError,
            format!("{call} in the raw loop: OpenCL status {code}"),
        )),
    }
}
