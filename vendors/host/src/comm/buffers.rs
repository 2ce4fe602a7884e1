//! Moving data between user buffers (device memory of the vendor's
//! registry) and the shared slots. Every move checks the user range under
//! the registry's read lock and holds the lock only for that one chunk, so
//! a rank never waits for a peer while holding it.

use dipu_deviceapi::Result;

use super::nt;
use super::reduce::{Kernel, Out};
use super::state::CommState;
use crate::memory::Memory;

/// Checks that `addr..addr + len` is live device memory of `device`.
pub(crate) fn check(
    memory: &Memory,
    side: &str,
    addr: usize,
    len: usize,
    device: i32,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    memory
        .read()
        .check_device(addr, len, Some(device))
        .map(drop)
        .map_err(|e| e.context(format!("the {side} buffer")))
}

/// Copies `len` bytes of the user buffer at `src` into the slot `dst`.
pub(crate) fn copy_in(
    comm: &CommState,
    side: &str,
    src: usize,
    dst: *mut u8,
    len: usize,
) -> Result<()> {
    let regions = comm.memory.read();
    check_locked(&regions, comm, side, src, len)?;
    // SAFETY: `src..src + len` is live device memory (checked under the
    // read lock, held until the copy is done, so it cannot be freed
    // meanwhile); `dst` is a slot of at least `len` bytes that this rank
    // alone writes, and no peer reads it before this rank posts the step.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
    drop(regions);
    Ok(())
}

/// Copies `len` bytes of the slot `src` into the user buffer at `dst`.
pub(crate) fn copy_out(
    comm: &CommState,
    side: &str,
    src: *const u8,
    dst: usize,
    len: usize,
) -> Result<()> {
    let regions = comm.memory.read();
    check_locked(&regions, comm, side, dst, len)?;
    // SAFETY: `dst..dst + len` is live device memory (checked under the read
    // lock held across the copy); `src` is a posted slot of at least `len`
    // bytes that its writer does not touch until this rank consumes the
    // step; a slot and a user buffer never overlap.
    unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, len) };
    drop(regions);
    Ok(())
}

/// Reduces `count` elements of `terms` (posted slots) into the user
/// buffer at `dst`, with non-temporal stores when `streaming`.
pub(crate) fn reduce_out(
    comm: &CommState,
    kernel: Kernel,
    terms: &[*const u8],
    (dst, count, elem): (usize, usize, usize),
    streaming: bool,
) -> Result<()> {
    let regions = comm.memory.read();
    check_locked(&regions, comm, "receive", dst, count * elem)?;
    // SAFETY: the terms are posted slots, aligned for the kernel's type,
    // with `count` elements that their writers leave alone until this rank
    // consumes the step; `dst` is live device memory for `count` elements
    // (checked under the read lock held across the call) and no slot.
    unsafe {
        let out = Out {
            ptr: dst as *mut u8,
            streaming,
        };
        kernel(terms, &[out], count);
    }
    if streaming {
        nt::fence();
    }
    drop(regions);
    Ok(())
}

fn check_locked(
    regions: &crate::memory::Regions,
    comm: &CommState,
    side: &str,
    addr: usize,
    len: usize,
) -> Result<()> {
    regions
        .check_device(addr, len, Some(comm.device))
        .map(drop)
        .map_err(|e| {
            e.context(format!(
                "the {side} buffer (freed or unmapped before the stream reached the operation?)"
            ))
        })
}
