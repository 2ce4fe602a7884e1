//! The operations streams run: copies, fills and simulated kernels. Each
//! checks its device-side ranges when it is queued (the error goes back to
//! the caller) and again when it runs (the error becomes the vendor's
//! asynchronous error), holding the registry's read lock while it touches
//! memory so nothing is freed or unmapped under it.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::{CopyKind, Error, ErrorKind, Result};

use crate::memory::{Memory, Regions};
use crate::stream::Op;

/// A device-side range an operation touches.
#[derive(Debug, Clone, Copy)]
struct Check {
    side: &'static str,
    addr: usize,
    len: usize,
    /// The device the memory must belong to (`None`: any device).
    device: Option<i32>,
}

fn validate(regions: &Regions, checks: &[Check]) -> Result<()> {
    for c in checks {
        regions
            .check_device(c.addr, c.len, c.device)
            .map_err(|e| e.context(c.side))?;
    }
    Ok(())
}

fn null_check(side: &str, ptr: usize, bytes: usize) -> Result<()> {
    if ptr == 0 {
        return Err(Error::invalid_argument(format!(
            "{side}: null pointer with {bytes} bytes"
        )));
    }
    Ok(())
}

/// Describes the call an operation came from, for its errors only: built
/// when an error needs it, so the common path formats nothing.
pub(crate) trait Describe: Fn() -> String + Send + 'static {}
impl<F: Fn() -> String + Send + 'static> Describe for F {}

/// Checks `checks` now and builds an op that checks them again and then
/// runs `body` under the registry's read lock.
fn checked_op(
    memory: &Arc<Memory>,
    call: impl Describe,
    checks: Vec<Check>,
    body: impl FnOnce() + Send + 'static,
) -> Result<Op> {
    validate(&memory.read(), &checks).map_err(|e| e.context(call()))?;
    let memory = Arc::clone(memory);
    Ok(Box::new(move || {
        let regions = memory.read();
        validate(&regions, &checks).map_err(|e| e.context(call()))?;
        body();
        drop(regions);
        Ok(())
    }))
}

/// `memset` of device memory.
pub(crate) fn memset(
    memory: &Arc<Memory>,
    call: impl Describe,
    dst: *mut c_void,
    value: u8,
    bytes: usize,
) -> Result<Option<Op>> {
    if bytes == 0 {
        return Ok(None);
    }
    let dst = dst as usize;
    let checks = vec![Check {
        side: "destination",
        addr: dst,
        len: bytes,
        device: None,
    }];
    // SAFETY: when the op runs, `dst..dst + bytes` is a live device range,
    // re-checked under the registry's read lock that is held while it runs,
    // so it cannot be freed or unmapped meanwhile. Another stream touching
    // it at the same time is a bug of the caller, as on a real device.
    let body = move || unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
    checked_op(memory, call, checks, body).map(Some)
}

/// `memcpy` in direction `kind`; the host side is not checked.
pub(crate) fn memcpy(
    memory: &Arc<Memory>,
    call: impl Describe,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: CopyKind,
) -> Result<Option<Op>> {
    copy(
        memory,
        call,
        (dst as usize, kind.dst_is_device().then_some(None)),
        (src as usize, kind.src_is_device().then_some(None)),
        bytes,
    )
}

/// `memcpy_peer` from `src` on `src_device` to `dst` on `dst_device`.
pub(crate) fn memcpy_peer(
    memory: &Arc<Memory>,
    call: impl Describe,
    (dst, dst_device): (*mut c_void, i32),
    (src, src_device): (*const c_void, i32),
    bytes: usize,
) -> Result<Option<Op>> {
    copy(
        memory,
        call,
        (dst as usize, Some(Some(dst_device))),
        (src as usize, Some(Some(src_device))),
        bytes,
    )
}

/// A copy; each side is (address, `Some(device constraint)` if device memory).
fn copy(
    memory: &Arc<Memory>,
    call: impl Describe,
    (dst, dst_dev): (usize, Option<Option<i32>>),
    (src, src_dev): (usize, Option<Option<i32>>),
    bytes: usize,
) -> Result<Option<Op>> {
    if bytes == 0 {
        return Ok(None);
    }
    null_check("destination", dst, bytes).map_err(|e| e.context(call()))?;
    null_check("source", src, bytes).map_err(|e| e.context(call()))?;
    let mut checks = Vec::with_capacity(2);
    if let Some(device) = dst_dev {
        checks.push(Check {
            side: "destination",
            addr: dst,
            len: bytes,
            device,
        });
    }
    if let Some(device) = src_dev {
        checks.push(Check {
            side: "source",
            addr: src,
            len: bytes,
            device,
        });
    }
    // SAFETY: when the op runs, device sides are live ranges, re-checked under
    // the registry's read lock held while it runs; host sides are valid for
    // `bytes` until the stream passes this op (the trait's contract).
    // `copy` allows overlapping ranges.
    let body = move || unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
    checked_op(memory, call, checks, body).map(Some)
}

/// A simulated kernel that runs for `duration`, then fills `bytes` at `dst`
/// with `value`.
pub(crate) fn fill(
    memory: &Arc<Memory>,
    dst: *mut c_void,
    value: u8,
    bytes: usize,
    duration: Duration,
) -> Result<Op> {
    let at = dst as usize;
    let call = move || format!("fill kernel ({at:#x}, {value:#04x}, {bytes} bytes)");
    let write = memset(memory, call, dst, value, bytes)?;
    Ok(Box::new(move || {
        std::thread::sleep(duration);
        write.map_or(Ok(()), |op| op())
    }))
}

/// A simulated kernel that reads `bytes` at `addr` for `duration` and
/// expects every byte to be `value` at its start and at its end.
pub(crate) fn expect(
    memory: &Arc<Memory>,
    addr: *const c_void,
    value: u8,
    bytes: usize,
    duration: Duration,
) -> Result<Op> {
    let call = format!("expect kernel ({addr:p}, {value:#04x}, {bytes} bytes)");
    let addr = addr as usize;
    let checks = vec![Check {
        side: "input",
        addr,
        len: bytes,
        device: None,
    }];
    if bytes > 0 {
        validate(&memory.read(), &checks).map_err(|e| e.context(&call))?;
    }
    let memory = Arc::clone(memory);
    let look = move |when: &str| -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let regions = memory.read();
        validate(&regions, &checks).map_err(|e| e.context(&call))?;
        // SAFETY: the range is live device memory, re-checked under the
        // registry's read lock, which is held while reading it.
        let data = unsafe { std::slice::from_raw_parts(addr as *const u8, bytes) };
        match data.iter().position(|b| *b != value) {
            None => Ok(()),
            Some(at) => Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "{call}: at the {when} of the kernel byte {at} is {:#04x}, not {value:#04x} \
                     (memory changed while a stream was still reading it?)",
                    data[at]
                ),
            )),
        }
    };
    Ok(Box::new(move || {
        look("start")?;
        std::thread::sleep(duration);
        look("end")
    }))
}
