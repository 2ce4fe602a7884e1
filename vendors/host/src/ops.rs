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

fn validate<'c>(regions: &Regions, checks: impl IntoIterator<Item = &'c Check>) -> Result<()> {
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

/// The device-side ranges of one operation (at most two).
type Checks = [Option<Check>; 2];

fn validate_all(regions: &Regions, checks: &Checks) -> Result<()> {
    validate(regions, checks.iter().flatten())
}

/// A copy or fill whose arguments passed the checks that need no registry:
/// run it on the caller's thread ([`Checked::run_here`]) or queue it
/// ([`Checked::into_op`]).
pub(crate) struct Checked<'m, D, B> {
    memory: &'m Arc<Memory>,
    call: D,
    checks: Checks,
    body: B,
}

impl<D: Describe, B: FnOnce() + Send + 'static> Checked<'_, D, B> {
    /// Checks the ranges and runs the body under one hold of the
    /// registry's read lock; a failed check is the caller's error.
    pub(crate) fn run_here(self) -> Result<()> {
        let regions = self.memory.read();
        validate_all(&regions, &self.checks).map_err(|e| e.context((self.call)()))?;
        (self.body)();
        Ok(())
    }

    /// Checks the ranges now and builds an op that checks them again and
    /// then runs the body under the registry's read lock.
    pub(crate) fn into_op(self) -> Result<Op> {
        let Checked {
            memory,
            call,
            checks,
            body,
        } = self;
        validate_all(&memory.read(), &checks).map_err(|e| e.context(call()))?;
        let memory = Arc::clone(memory);
        Ok(Box::new(move || {
            let regions = memory.read();
            validate_all(&regions, &checks).map_err(|e| e.context(call()))?;
            body();
            drop(regions);
            Ok(())
        }))
    }
}

/// `memset` of device memory.
pub(crate) fn memset<D: Describe>(
    memory: &Arc<Memory>,
    call: D,
    dst: *mut c_void,
    value: u8,
    bytes: usize,
) -> Option<Checked<'_, D, impl FnOnce() + Send + 'static>> {
    if bytes == 0 {
        return None;
    }
    let dst = dst as usize;
    let checks = [
        Some(Check {
            side: "destination",
            addr: dst,
            len: bytes,
            device: None,
        }),
        None,
    ];
    // SAFETY: when the body runs, `dst..dst + bytes` is a live device
    // range, checked under the registry's read lock that is held while it
    // runs, so it cannot be freed or unmapped meanwhile. Another stream
    // touching it at the same time is a bug of the caller, as on a real
    // device.
    let body = move || unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
    Some(Checked {
        memory,
        call,
        checks,
        body,
    })
}

/// `memcpy` in direction `kind`; the host side is not checked.
pub(crate) fn memcpy<D: Describe>(
    memory: &Arc<Memory>,
    call: D,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: CopyKind,
) -> Result<Option<Checked<'_, D, impl FnOnce() + Send + 'static>>> {
    copy(
        memory,
        call,
        (dst as usize, kind.dst_is_device().then_some(None)),
        (src as usize, kind.src_is_device().then_some(None)),
        bytes,
    )
}

/// `memcpy_peer` from `src` on `src_device` to `dst` on `dst_device`.
pub(crate) fn memcpy_peer<D: Describe>(
    memory: &Arc<Memory>,
    call: D,
    (dst, dst_device): (*mut c_void, i32),
    (src, src_device): (*const c_void, i32),
    bytes: usize,
) -> Result<Option<Checked<'_, D, impl FnOnce() + Send + 'static>>> {
    copy(
        memory,
        call,
        (dst as usize, Some(Some(dst_device))),
        (src as usize, Some(Some(src_device))),
        bytes,
    )
}

/// A copy; each side is (address, `Some(device constraint)` if device memory).
fn copy<D: Describe>(
    memory: &Arc<Memory>,
    call: D,
    (dst, dst_dev): (usize, Option<Option<i32>>),
    (src, src_dev): (usize, Option<Option<i32>>),
    bytes: usize,
) -> Result<Option<Checked<'_, D, impl FnOnce() + Send + 'static>>> {
    if bytes == 0 {
        return Ok(None);
    }
    null_check("destination", dst, bytes).map_err(|e| e.context(call()))?;
    null_check("source", src, bytes).map_err(|e| e.context(call()))?;
    let checks = [
        dst_dev.map(|device| Check {
            side: "destination",
            addr: dst,
            len: bytes,
            device,
        }),
        src_dev.map(|device| Check {
            side: "source",
            addr: src,
            len: bytes,
            device,
        }),
    ];
    // SAFETY: when the body runs, device sides are live ranges, checked
    // under the registry's read lock held while it runs; host sides are
    // valid for `bytes` until the stream passes this copy (the trait's
    // contract). `copy` allows overlapping ranges.
    let body = move || unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
    Ok(Some(Checked {
        memory,
        call,
        checks,
        body,
    }))
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
    let write = memset(memory, call, dst, value, bytes)
        .map(Checked::into_op)
        .transpose()?;
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
    let checks = [Check {
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
