//! The live device allocations made through a runtime, by address: used
//! to range-check copies and to free raw pointers on the right device.

use std::collections::BTreeMap;
use std::ffi::c_void;

use dipu_deviceapi::{Error, Result};
use parking_lot::RwLock;

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

/// Live allocations by start address (zero-byte allocations, which have
/// a null pointer, are not recorded).
#[derive(Debug, Default)]
pub(crate) struct LiveMap {
    map: RwLock<Map>,
}

impl LiveMap {
    /// Records a new allocation.
    pub(crate) fn insert(&self, a: LiveAllocation) {
        if a.addr != 0 {
            self.map.write().insert(a.addr, (a.len, a.device));
        }
    }

    /// The allocation containing the byte at `addr`, if any.
    pub(crate) fn find(&self, addr: usize) -> Option<LiveAllocation> {
        containing(&self.map.read(), addr)
    }

    /// The allocation `ptr` starts, or an `InvalidArgument` error saying
    /// why `ptr` is not one (`op` names the caller in the message).
    pub(crate) fn get_exact(&self, ptr: *const c_void, op: &str) -> Result<LiveAllocation> {
        exact(&self.map.read(), ptr, op)
    }

    /// Takes the allocation `ptr` starts on `device` out of the map.
    pub(crate) fn remove(&self, ptr: *mut c_void, device: i32, op: &str) -> Result<LiveAllocation> {
        let mut map = self.map.write();
        let a = exact(&map, ptr, op)?;
        if a.device != device {
            return Err(Error::invalid_argument(format!(
                "{op}: {ptr:p} was allocated on device {}, not on device {device}",
                a.device
            )));
        }
        map.remove(&a.addr);
        Ok(a)
    }

    /// The device of the live allocation holding `ptr..ptr + bytes`, or an
    /// `InvalidArgument` error naming `what` (e.g. "the source").
    pub(crate) fn check_range(
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
        match self.find(addr) {
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

    /// Every live allocation, by address.
    pub(crate) fn all(&self) -> Vec<LiveAllocation> {
        self.map
            .read()
            .iter()
            .map(|(&addr, &(len, device))| LiveAllocation { addr, len, device })
            .collect()
    }
}

type Map = BTreeMap<usize, (usize, i32)>;

/// The allocation of `map` containing the byte at `addr`, if any.
fn containing(map: &Map, addr: usize) -> Option<LiveAllocation> {
    let (&start, &(len, device)) = map.range(..=addr).next_back()?;
    let a = LiveAllocation {
        addr: start,
        len,
        device,
    };
    (addr < start + len).then_some(a)
}

/// The allocation of `map` that `ptr` starts, or why there is none.
fn exact(map: &Map, ptr: *const c_void, op: &str) -> Result<LiveAllocation> {
    let addr = ptr as usize;
    match containing(map, addr) {
        Some(a) if a.addr == addr => Ok(a),
        Some(a) => Err(Error::invalid_argument(format!(
            "{op}: {ptr:p} points {} bytes into the allocation at {:#x} ({} bytes on device \
             {}): pass the start address",
            addr - a.addr,
            a.addr,
            a.len,
            a.device
        ))),
        None => Err(Error::invalid_argument(format!(
            "{op}: {ptr:p} is not a live device allocation of this runtime (never allocated \
             through it, or already freed)"
        ))),
    }
}
