//! `dipu_stream`: a small value naming one stream, checked on every use
//! against the streams this library handed out.

use dipu_runtime::{Error, Result, Runtime, Stream};

use crate::status::{dipu_status, ffi_boundary, non_null, write_out};

/// One stream of one device, as a value: copy it freely. Streams are never
/// destroyed, so a handle stays valid until `dipu_shutdown`; after that it
/// is rejected as unknown. `{device, 0, 0}` is always `device`'s default
/// stream (so `dipu_stream s = {0};` is device 0's default stream); other
/// values must come from a `dipu_stream_*` function.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct dipu_stream {
    /// The device the stream belongs to.
    pub device: i32,
    /// The stream's id within its device (0: the default stream).
    pub id: u32,
    /// The vendor's handle (0: the default stream).
    pub raw: u64,
}

/// The C value of `stream`.
pub(crate) fn to_c(stream: Stream) -> dipu_stream {
    dipu_stream {
        device: stream.device(),
        id: stream.id().as_u32(),
        raw: stream.raw().as_raw(),
    }
}

/// The stream `s` names in `rt`: `InvalidDevice` for a bad device,
/// `InvalidArgument` for a handle `rt`'s context never handed out. No
/// lock for default and pool streams (the context's own tables).
#[inline]
pub(crate) fn from_c(rt: &Runtime, s: dipu_stream) -> Result<Stream> {
    match rt.context().stream_from_parts(s.device, s.id, s.raw)? {
        Some(stream) => Ok(stream),
        None => Err(Error::invalid_argument(format!(
            "{{device {}, id {:#x}, raw {:#x}}} is not a stream of this runtime (never handed \
             out by a dipu_stream_* function, corrupted, or from before dipu_shutdown)",
            s.device, s.id, s.raw
        ))),
    }
}

/// Runs `f` on the runtime and writes the stream it returns to `out`.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream.
unsafe fn stream_out(
    out: *mut dipu_stream,
    f: impl FnOnce(&Runtime) -> Result<Stream>,
) -> Result<()> {
    non_null(out, "out")?;
    let rt = dipu_runtime::get()?;
    let stream = f(&rt)?;
    // SAFETY: forwarded caller's contract.
    unsafe { write_out(out, "out", to_c(stream)) }
}

/// Stores `device`'s default stream in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_default(device: i32, out: *mut dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_stream_default", {
        // SAFETY: forwarded caller's contract.
        unsafe { stream_out(out, |rt| rt.context().default_stream(device)) }
    })
}

/// Stores the next stream of `device`'s pool of 32 normal-priority
/// (`high_priority` 0) or high-priority (non-zero) streams in `*out`
/// (created together on first use, handed out round-robin, never destroyed).
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`, the vendor's status if it cannot create streams. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_from_pool(
    device: i32,
    high_priority: i32,
    out: *mut dipu_stream,
) -> dipu_status {
    ffi_boundary!("dipu_stream_from_pool", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            stream_out(out, |rt| {
                rt.context().stream_from_pool(device, high_priority != 0)
            })
        }
    })
}

/// Creates a new stream of `device` with `priority` (0 normal, negative
/// more urgent; clamped to the vendor's range) and stores it in `*out`. It
/// lives until the process ends: prefer dipu_stream_from_pool.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`, the vendor's status. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_create(
    device: i32,
    priority: i32,
    out: *mut dipu_stream,
) -> dipu_status {
    ffi_boundary!("dipu_stream_create", {
        // SAFETY: forwarded caller's contract.
        unsafe { stream_out(out, |rt| rt.context().new_stream(device, priority)) }
    })
}

/// Stores the calling thread's current stream on `device` (initially its
/// default stream) in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe (the current stream is per thread).
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_current(device: i32, out: *mut dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_stream_current", {
        // SAFETY: forwarded caller's contract.
        unsafe { stream_out(out, |rt| rt.context().current_stream(device)) }
    })
}

/// Makes `stream` the calling thread's current stream on its device (the
/// current device is unchanged).
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown stream. Thread-safe (per thread).
#[no_mangle]
pub extern "C" fn dipu_stream_set_current(stream: dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_stream_set_current", {
        let rt = dipu_runtime::get()?;
        let stream = from_c(&rt, stream)?;
        rt.context().set_current_stream(stream);
        Ok(())
    })
}

/// Waits until all work queued on `stream` is done.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown stream, the vendor's status. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_stream_synchronize(stream: dipu_stream) -> dipu_status {
    ffi_boundary!("dipu_stream_synchronize", {
        let rt = dipu_runtime::get()?;
        from_c(&rt, stream)?.synchronize()
    })
}

/// Stores 1 in `*done` if all work queued on `stream` is done, else 0.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown stream or a NULL `done`. Thread-safe.
///
/// # Safety
/// `done` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_query(stream: dipu_stream, done: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_stream_query", {
        non_null(done, "done")?;
        let rt = dipu_runtime::get()?;
        let finished = from_c(&rt, stream)?.query()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(done, "done", finished.into()) }
    })
}
