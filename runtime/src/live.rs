//! The live device allocations of a runtime, as its allocators know them:
//! the segment map names a pointer's device, the device's allocator its
//! allocation. Used to range-check copies and to check raw frees.

use std::ffi::c_void;

use dipu_deviceapi::{Error, ErrorKind, Result};

use crate::Runtime;

/// One live device allocation made through a [`Runtime`](crate::Runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LiveAllocation {
    /// The start address.
    pub addr: usize,
    /// The bytes requested (the valid range is `addr..addr + len`).
    pub len: usize,
    /// The device it lives on.
    pub device: i32,
}

impl LiveAllocation {
    /// The start address as a pointer.
    pub fn as_ptr(&self) -> *mut c_void {
        self.addr as *mut c_void
    }

    /// Whether `addr..addr + bytes` lies inside this allocation.
    fn contains(&self, addr: usize, bytes: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(bytes)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

impl Runtime {
    /// The live device allocation made through this runtime that holds the
    /// byte at `ptr`, interior pointers included: its start, the bytes
    /// requested and its device. `None` for a pointer no live allocation
    /// holds (never allocated here, already freed, from before a shutdown,
    /// host memory).
    ///
    /// This is the runtime's one pointer lookup (copies' range checks, the
    /// errors of bad frees, a framework's pointer-attribute query): no
    /// process-wide lock and no record of its own. A lock-free map of the
    /// ranges reserved from the vendor names the device; that device's
    /// allocator answers from its block map under its own lock.
    pub fn find_allocation(&self, ptr: *const c_void) -> Option<LiveAllocation> {
        let (device, block) = self.allocators.find(ptr as usize)?;
        Some(LiveAllocation {
            addr: block.addr,
            len: block.requested,
            device,
        })
    }

    /// The device whose memory (live or cached) holds the byte at `ptr`,
    /// without a lock; `None` when no allocator of this runtime reserved it.
    #[inline]
    pub fn device_of(&self, ptr: *const c_void) -> Option<i32> {
        self.allocators.device_of(ptr as usize)
    }

    /// Every live device allocation made through this runtime, by address
    /// (from the allocators' snapshots: slow, for reports).
    pub fn live_allocations(&self) -> Vec<LiveAllocation> {
        let mut all: Vec<LiveAllocation> = self
            .allocators
            .created()
            .flat_map(|alloc| {
                let device = alloc.device();
                alloc.snapshot().segments.into_iter().flat_map(move |s| {
                    s.blocks
                        .into_iter()
                        .filter(|b| b.state == dipu_allocator::BlockState::Allocated)
                        .map(move |b| LiveAllocation {
                            addr: b.address,
                            len: b.requested,
                            device,
                        })
                })
            })
            .filter_map(|a| match self.guard_sizes {
                // The allocator's blocks hold the guards: the user's
                // allocation starts after the front one (a block waiting
                // for its guard check is not live).
                Some(g) => self
                    .find_allocation((a.addr + g.front) as *const c_void)
                    .filter(|l| l.addr == a.addr + g.front),
                None => Some(a),
            })
            .collect();
        all.sort_by_key(|a| a.addr);
        all
    }

    /// Why `ptr` cannot be freed (or recorded) on `device` as the start of
    /// a live allocation, replacing `cause` (the allocator's error) when
    /// the lookup says more; `op` names the caller. Errors other than
    /// `InvalidArgument` pass through.
    #[cold]
    pub(crate) fn explain_bad_pointer(
        &self,
        ptr: *const c_void,
        device: Option<i32>,
        op: &str,
        cause: Error,
    ) -> Error {
        if cause.kind() != ErrorKind::InvalidArgument {
            return cause;
        }
        let addr = ptr as usize;
        match self.find_allocation(ptr) {
            Some(a) if a.addr != addr => Error::invalid_argument(format!(
                "{op}: {ptr:p} points {} bytes into the allocation at {:#x} ({} bytes on device \
                 {}): pass the start address",
                addr - a.addr,
                a.addr,
                a.len,
                a.device
            )),
            Some(a) if device.is_some_and(|d| d != a.device) => Error::invalid_argument(format!(
                "{op}: {ptr:p} was allocated on device {}, not on device {}",
                a.device,
                device.unwrap_or(a.device)
            )),
            // Live after all: the allocator's own reason stands.
            Some(_) => cause,
            None => Error::invalid_argument(format!(
                "{op}: {ptr:p} is not a live device allocation of this runtime (never allocated \
                 through it, or already freed)"
            )),
        }
    }

    /// The live allocation holding `ptr..ptr + bytes`, or an
    /// `InvalidArgument` error naming `what` (e.g. "the source").
    pub(crate) fn live_range(
        &self,
        ptr: *const c_void,
        bytes: usize,
        op: &str,
        what: &str,
    ) -> Result<LiveAllocation> {
        if ptr.is_null() {
            return Err(Error::invalid_argument(format!(
                "{op}: {what} is a null pointer ({bytes} bytes)"
            )));
        }
        let addr = ptr as usize;
        match self.find_allocation(ptr) {
            Some(a) if a.contains(addr, bytes) => Ok(a),
            Some(a) => Err(Error::invalid_argument(format!(
                "{op}: {what} range {ptr:p}+{bytes} runs past the end of the allocation at \
                 {:#x} ({} bytes on device {})",
                a.addr, a.len, a.device
            ))),
            None => Err(Error::invalid_argument(format!(
                "{op}: {what} {ptr:p} is not inside a live device allocation of this runtime \
                 (never allocated through it, or already freed)"
            ))),
        }
    }
}
