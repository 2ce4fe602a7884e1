//! Virtual memory (`cuMemAddressReserve` / `cuMemCreate` / `cuMemMap`) on
//! host pages: a reservation is an inaccessible anonymous mapping, a
//! physical chunk is a memfd, and mapping puts the memfd's pages into the
//! reservation.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;

use dipu_deviceapi::{Error, ErrorKind, PhysicalMemHandle, Result};
use nix::errno::Errno;
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use parking_lot::Mutex;

use crate::memory::{Kind, Memory, Region};

/// Size and alignment unit of chunks and mappings (2 MiB, as CUDA's).
pub(crate) const GRANULARITY: usize = 2 << 20;

#[derive(Debug)]
struct Chunk {
    /// The memfd; dropped (closed) on release, while mappings keep the pages.
    fd: Option<OwnedFd>,
    size: usize,
    device: i32,
    mappings: usize,
}

#[derive(Debug, Default)]
struct State {
    next_handle: u64,
    /// Reservations: start -> size.
    reservations: BTreeMap<usize, usize>,
    /// Chunks not yet released.
    chunks: HashMap<u64, Chunk>,
    /// Released chunks still mapped somewhere; their memory returns to the
    /// device when the last mapping goes.
    released: HashMap<u64, Chunk>,
}

/// The vendor's reservations and chunks. Lock order: this, then the memory
/// registry.
#[derive(Debug, Default)]
pub(crate) struct Vmm {
    state: Mutex<State>,
}

fn os_error(what: String, errno: Errno) -> Error {
    let kind = if errno == Errno::ENOMEM {
        ErrorKind::OutOfMemory
    } else {
        ErrorKind::VendorError
    };
    Error::vendor(kind, errno as i64, format!("{what}: {}", errno.desc()))
}

fn nonzero_multiple(what: &str, bytes: usize) -> Result<NonZeroUsize> {
    NonZeroUsize::new(bytes)
        .filter(|_| bytes % GRANULARITY == 0)
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{what}: {bytes} bytes is not a nonzero multiple of the granularity ({GRANULARITY} bytes)"
            ))
        })
}

fn bad_handle(what: &str, handle: PhysicalMemHandle) -> Error {
    Error::invalid_argument(format!(
        "{what}: unknown physical memory handle {handle:?} (never created, or released)"
    ))
}

impl Vmm {
    /// Reserves `bytes` of inaccessible address space, aligned to the granularity.
    pub(crate) fn reserve(&self, bytes: usize) -> Result<*mut c_void> {
        let size = nonzero_multiple("vmm_reserve", bytes)?;
        let padded = size.checked_add(GRANULARITY).ok_or_else(|| {
            Error::invalid_argument(format!("vmm_reserve: {bytes} bytes is too large"))
        })?;
        let flags = MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE;
        // SAFETY: a new mapping at an address the kernel picks cannot overlap
        // memory anything else owns.
        let base = unsafe { mmap_anonymous(None, padded, ProtFlags::PROT_NONE, flags) }
            .map_err(|e| os_error(format!("vmm_reserve({bytes}): mmap"), e))?
            .as_ptr() as usize;
        let start = base.next_multiple_of(GRANULARITY);
        let trims = [
            (base, start - base),
            (start + bytes, base + padded.get() - start - bytes),
        ];
        for (addr, len) in trims {
            if let (Some(addr), true) = (NonNull::new(addr as *mut c_void), len > 0) {
                // SAFETY: `addr..addr + len` is an unused end of the mapping
                // just made, outside the range handed out.
                if let Err(e) = unsafe { munmap(addr, len) } {
                    tracing::warn!(target: "dipu_vendor_host", "vmm_reserve: trimming failed: {e}");
                }
            }
        }
        self.state.lock().reservations.insert(start, bytes);
        Ok(start as *mut c_void)
    }

    /// Returns a whole reservation; nothing may be mapped in it.
    pub(crate) fn free_reservation(&self, memory: &Memory, ptr: usize, bytes: usize) -> Result<()> {
        let mut state = self.state.lock();
        let what = format!("vmm_free_reservation({ptr:#x}, {bytes})");
        match state.reservations.get(&ptr) {
            Some(&size) if size == bytes => {}
            Some(&size) => {
                return Err(Error::invalid_argument(format!(
                    "{what}: the reservation at this address has {size} bytes"
                )))
            }
            None => {
                return Err(Error::invalid_argument(format!(
                    "{what}: not the start of a live reservation"
                )))
            }
        }
        if memory.read().overlaps(ptr, bytes) {
            return Err(Error::invalid_argument(format!(
                "{what}: memory is still mapped in the reservation; vmm_unmap it first"
            )));
        }
        let start = NonNull::new(ptr as *mut c_void)
            .ok_or_else(|| Error::invalid_argument(what.clone()))?;
        // SAFETY: `ptr..ptr + bytes` is exactly a reservation this vendor
        // made, with nothing mapped in it (checked), so no live memory goes.
        unsafe { munmap(start, bytes) }.map_err(|e| os_error(what, e))?;
        state.reservations.remove(&ptr);
        Ok(())
    }

    /// Creates a chunk of `bytes` counted against `device`'s memory.
    pub(crate) fn create(
        &self,
        memory: &Memory,
        device: i32,
        bytes: usize,
    ) -> Result<PhysicalMemHandle> {
        nonzero_multiple("vmm_create", bytes)?;
        memory.reserve(device, bytes as u64)?;
        let made = memfd_create(c"dipu-host-vmm", MemFdCreateFlag::MFD_CLOEXEC)
            .and_then(|fd| nix::unistd::ftruncate(&fd, bytes as i64).map(|()| fd));
        let fd = match made {
            Ok(fd) => fd,
            Err(e) => {
                memory.release(device, bytes as u64);
                return Err(os_error(format!("vmm_create({bytes}): memfd"), e));
            }
        };
        let mut state = self.state.lock();
        state.next_handle += 1;
        let handle = state.next_handle;
        let chunk = Chunk {
            fd: Some(fd),
            size: bytes,
            device,
            mappings: 0,
        };
        state.chunks.insert(handle, chunk);
        Ok(PhysicalMemHandle::from_raw(handle))
    }

    /// Releases a chunk; its memory returns once it is unmapped everywhere.
    pub(crate) fn release(&self, memory: &Memory, handle: PhysicalMemHandle) -> Result<()> {
        let mut state = self.state.lock();
        let mut chunk = state
            .chunks
            .remove(&handle.as_raw())
            .ok_or_else(|| bad_handle("vmm_release", handle))?;
        chunk.fd = None;
        if chunk.mappings == 0 {
            memory.release(chunk.device, chunk.size as u64);
        } else {
            state.released.insert(handle.as_raw(), chunk);
        }
        Ok(())
    }

    /// Maps all of chunk `handle` at `ptr`, inside a reservation.
    pub(crate) fn map(
        &self,
        memory: &Memory,
        ptr: usize,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        let mut state = self.state.lock();
        let what = format!("vmm_map({ptr:#x}, {bytes}, {handle:?})");
        let chunk = state
            .chunks
            .get(&handle.as_raw())
            .ok_or_else(|| bad_handle("vmm_map", handle))?;
        if bytes != chunk.size {
            return Err(Error::invalid_argument(format!(
                "{what}: the chunk has {} bytes; a mapping covers a whole chunk",
                chunk.size
            )));
        }
        let start = NonZeroUsize::new(ptr)
            .filter(|_| ptr % GRANULARITY == 0)
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{what}: the address is not aligned to {GRANULARITY} bytes"
                ))
            })?;
        let inside = state
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&r, &size)| ptr - r <= size && bytes <= size - (ptr - r));
        if !inside {
            return Err(Error::invalid_argument(format!(
                "{what}: the range is not inside one reservation"
            )));
        }
        let mut regions = memory.write();
        if regions.overlaps(ptr, bytes) {
            return Err(Error::invalid_argument(format!(
                "{what}: part of the range is already mapped"
            )));
        }
        let (Some(fd), Some(len)) = (chunk.fd.as_ref(), NonZeroUsize::new(bytes)) else {
            return Err(bad_handle("vmm_map", handle));
        };
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        let flags = MapFlags::MAP_SHARED | MapFlags::MAP_FIXED;
        // SAFETY: the range lies inside a reservation this vendor made and
        // overlaps no mapping (checked under the registry's write lock, so no
        // stream operation is using it): MAP_FIXED replaces only inaccessible
        // pages that nothing refers to.
        unsafe { mmap(Some(start), len, prot, flags, fd, 0) }.map_err(|e| os_error(what, e))?;
        let kind = Kind::Mapped {
            device: chunk.device,
            chunk: handle.as_raw(),
        };
        regions.0.insert(
            ptr,
            Region {
                size: bytes,
                kind,
                arena: false,
            },
        );
        drop(regions);
        if let Some(chunk) = state.chunks.get_mut(&handle.as_raw()) {
            chunk.mappings += 1;
        }
        Ok(())
    }

    /// Unmaps `ptr..ptr + bytes`, which must be made of whole mappings.
    pub(crate) fn unmap(&self, memory: &Memory, ptr: usize, bytes: usize) -> Result<()> {
        let mut state = self.state.lock();
        let what = format!("vmm_unmap({ptr:#x}, {bytes})");
        let mut regions = memory.write();
        let mut cursor = ptr;
        let end = ptr.checked_add(bytes).filter(|_| ptr != 0 && bytes != 0);
        let end =
            end.ok_or_else(|| Error::invalid_argument(format!("{what}: empty or invalid range")))?;
        let mut chunks = Vec::new();
        while cursor < end {
            match regions.0.get(&cursor) {
                Some(Region { size, kind: Kind::Mapped { chunk, .. }, .. }) if cursor + size <= end => {
                    chunks.push(*chunk);
                    cursor += size;
                }
                _ => {
                    return Err(Error::invalid_argument(format!(
                        "{what}: the range is not a run of whole mappings ({cursor:#x} does not start one that fits)"
                    )))
                }
            }
        }
        let (Some(start), Some(len)) = (NonZeroUsize::new(ptr), NonZeroUsize::new(bytes)) else {
            return Err(Error::invalid_argument(what));
        };
        let flags = MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED | MapFlags::MAP_NORESERVE;
        // SAFETY: the range is made of mappings this vendor placed inside its
        // own reservation; the registry's write lock keeps stream operations
        // off it, and the caller no longer uses it (the trait's contract).
        unsafe { mmap_anonymous(Some(start), len, ProtFlags::PROT_NONE, flags) }
            .map_err(|e| os_error(what, e))?;
        let mut cursor = ptr;
        while cursor < end {
            let Some(region) = regions.0.remove(&cursor) else {
                break;
            };
            cursor += region.size;
        }
        drop(regions);
        for id in chunks {
            if let Some(chunk) = state.chunks.get_mut(&id) {
                chunk.mappings -= 1;
            } else if let Some(chunk) = state.released.get_mut(&id) {
                chunk.mappings -= 1;
                if chunk.mappings == 0 {
                    memory.release(chunk.device, chunk.size as u64);
                    state.released.remove(&id);
                }
            }
        }
        Ok(())
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        for (&start, &size) in &self.state.get_mut().reservations {
            if let Some(addr) = NonNull::new(start as *mut c_void) {
                // SAFETY: the reservation (and whatever is mapped in it) is
                // this vendor's, and the vendor is going away.
                let _ = unsafe { munmap(addr, size) };
            }
        }
    }
}
