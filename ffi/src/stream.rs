//! `dipu_stream`: a small value naming one stream, checked on every use
//! against the streams this library handed out.

use std::collections::HashMap;

use dipu_runtime::{DeviceContext, Error, Result, Runtime, Stream, StreamKind};
use parking_lot::Mutex;

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

/// A created stream's key: its context's address, device and id.
type StreamKey = (usize, i32, u32);

/// The (clamped) priorities of streams made by dipu_stream_create, by key
/// (read only by dipu_stream_priority, never on a hot path).
static CREATED_PRIORITIES: Mutex<Option<HashMap<StreamKey, i32>>> = Mutex::new(None);

fn ctx_key(ctx: &'static DeviceContext) -> usize {
    ctx as *const DeviceContext as usize
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

/// Stores `device`'s stream for `raw`, a vendor stream handle made outside
/// dipu-rs (e.g. a cudaStream_t from another library), in `*out`: work
/// queued on it runs on that handle, and the same handle always gives the
/// same stream. dipu-rs never destroys the handle: its maker keeps it
/// alive while it is used. Errors: DIPU_STATUS_INVALID_DEVICE,
/// DIPU_STATUS_INVALID_ARGUMENT for a NULL `out` or a 0 `raw` (the
/// default stream: use dipu_stream_default). Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream; `raw` must be a
/// live stream handle of the current vendor on `device`.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_from_raw(
    device: i32,
    raw: u64,
    out: *mut dipu_stream,
) -> dipu_status {
    ffi_boundary!("dipu_stream_from_raw", {
        // SAFETY: forwarded caller's contract.
        unsafe { stream_out(out, |rt| rt.context().external_stream(device, raw)) }
    })
}

/// Stores the stream priorities of `device`'s vendor in `*least` (the
/// default priority, usually 0) and `*greatest` (the most urgent: the
/// smallest number, e.g. -5). Errors: DIPU_STATUS_INVALID_DEVICE,
/// DIPU_STATUS_INVALID_ARGUMENT for a NULL pointer. Thread-safe.
///
/// # Safety
/// `least` and `greatest` must be NULL or valid for writing an int32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_priority_range(
    device: i32,
    least: *mut i32,
    greatest: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_stream_priority_range", {
        non_null(least, "least")?;
        non_null(greatest, "greatest")?;
        let rt = dipu_runtime::get()?;
        let ctx = rt.context();
        // A bad device is an error, as for every per-device call.
        ctx.default_stream(device)?;
        let range = ctx.api().stream_priority_range()?;
        // SAFETY: forwarded caller's contract.
        unsafe {
            write_out(least, "least", range.least)?;
            write_out(greatest, "greatest", range.greatest)
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
        unsafe {
            stream_out(out, |rt| {
                let ctx = rt.context();
                let stream = ctx.new_stream(device, priority)?;
                let clamped = ctx.api().stream_priority_range()?.clamp(priority);
                CREATED_PRIORITIES
                    .lock()
                    .get_or_insert_with(HashMap::new)
                    .insert((ctx_key(ctx), device, stream.id().as_u32()), clamped);
                Ok(stream)
            })
        }
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

/// Stores the stream of `device` whose id is `id` (the `id` field of a
/// dipu_stream this library handed out; 0 is the default stream) in
/// `*out`: a stream rebuilt from its (device, id) pair, as frameworks keep
/// them.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for an
/// id never handed out on `device` or a NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a dipu_stream.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_from_id(
    device: i32,
    id: u32,
    out: *mut dipu_stream,
) -> dipu_status {
    ffi_boundary!("dipu_stream_from_id", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            stream_out(out, |rt| {
                rt.context().stream_from_id(device, id)?.ok_or_else(|| {
                    Error::invalid_argument(format!(
                        "no stream of device {device} has id {id:#x} in this runtime"
                    ))
                })
            })
        }
    })
}

/// Stores `stream`'s priority in `*out`: 0 for the default stream and the
/// normal pool, the vendor's greatest priority for the high-priority pool,
/// the clamped priority a dipu_stream_create stream was made with.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for an
/// unknown stream or a NULL `out`; the vendor's status. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int32_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_stream_priority(stream: dipu_stream, out: *mut i32) -> dipu_status {
    ffi_boundary!("dipu_stream_priority", {
        non_null(out, "out")?;
        let rt = dipu_runtime::get()?;
        let s = from_c(&rt, stream)?;
        let ctx = rt.context();
        let priority = match s.id().kind() {
            StreamKind::Default
            | StreamKind::Pool {
                high_priority: false,
            } => 0,
            StreamKind::Pool {
                high_priority: true,
            } => ctx.api().stream_priority_range()?.greatest,
            StreamKind::Created => CREATED_PRIORITIES
                .lock()
                .as_ref()
                .and_then(|m| m.get(&(ctx_key(ctx), s.device(), s.id().as_u32())).copied())
                .unwrap_or(0),
        };
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", priority) }
    })
}
