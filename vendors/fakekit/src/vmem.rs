//! Virtual memory over `memfd` and `mmap`: address ranges reserved
//! inaccessible (`PROT_NONE`), physical chunks as memory files, mappings
//! that stay inaccessible until access is set, and per-device access, so a
//! fake can refuse a device that was never given access.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use parking_lot::Mutex;

/// Why a virtual-memory call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmError {
    /// A bad argument (unaligned, outside a reservation, overlapping...).
    Invalid(String),
    /// An unknown chunk handle.
    Handle(String),
    /// The system refused the memory.
    OutOfMemory(String),
}

/// What [`Space::chunk`] tells of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Its bytes.
    pub size: usize,
    /// Its device.
    pub device: i32,
    /// Whether it was released (its memory goes with its last mapping).
    pub released: bool,
    /// How many mappings use it.
    pub mappings: usize,
}

#[derive(Debug)]
struct Chunk {
    fd: OwnedFd,
    size: usize,
    device: i32,
    released: bool,
    mappings: usize,
}

#[derive(Debug)]
struct Mapping {
    len: usize,
    handle: u64,
    /// Devices that may touch it, and whether they may write.
    access: Vec<(i32, bool)>,
}

#[derive(Debug, Default)]
struct Inner {
    reservations: BTreeMap<usize, usize>,
    chunks: BTreeMap<u64, Chunk>,
    mappings: BTreeMap<usize, Mapping>,
    next: u64,
}

/// The virtual address space of a fake driver.
#[derive(Debug, Default)]
pub struct Space {
    inner: Mutex<Inner>,
}

fn errno() -> String {
    std::io::Error::last_os_error().to_string()
}

impl Space {
    /// An empty space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a chunk of `size` bytes on `device` (a memory file); its handle.
    pub fn create(&self, size: usize, device: i32) -> Result<u64, VmError> {
        if size == 0 {
            return Err(VmError::Invalid("a chunk of 0 bytes".into()));
        }
        // SAFETY: a NUL-terminated name and valid flags.
        let fd = unsafe { libc::memfd_create(c"dipu-fake-chunk".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(VmError::OutOfMemory(format!("memfd_create: {}", errno())));
        }
        // SAFETY: a fresh descriptor we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a valid descriptor; ftruncate only sizes the file.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(VmError::OutOfMemory(format!("ftruncate: {}", errno())));
        }
        let mut inner = self.inner.lock();
        inner.next += 1;
        let handle = inner.next;
        inner.chunks.insert(
            handle,
            Chunk {
                fd,
                size,
                device,
                released: false,
                mappings: 0,
            },
        );
        Ok(handle)
    }

    /// Releases a chunk; its memory goes once it is also unmapped.
    pub fn release(&self, handle: u64) -> Result<(), VmError> {
        let mut inner = self.inner.lock();
        let chunk = match inner.chunks.get_mut(&handle) {
            Some(c) if !c.released => c,
            _ => return Err(VmError::Handle(format!("chunk {handle} is not live"))),
        };
        chunk.released = true;
        if chunk.mappings == 0 {
            inner.chunks.remove(&handle);
        }
        Ok(())
    }

    /// Bytes of live chunks (created, and not both released and unmapped)
    /// on `device`.
    pub fn bytes_on(&self, device: i32) -> u64 {
        let inner = self.inner.lock();
        inner
            .chunks
            .values()
            .filter(|c| c.device == device)
            .map(|c| c.size as u64)
            .sum()
    }

    /// A chunk, while it holds memory (live, or released but still mapped).
    pub fn chunk(&self, handle: u64) -> Option<ChunkInfo> {
        self.inner.lock().chunks.get(&handle).map(|c| ChunkInfo {
            size: c.size,
            device: c.device,
            released: c.released,
            mappings: c.mappings,
        })
    }

    /// The length of the reservation starting at `ptr`.
    pub fn reservation(&self, ptr: usize) -> Option<usize> {
        self.inner.lock().reservations.get(&ptr).copied()
    }

    /// The length and chunk of the mapping starting at `ptr`.
    pub fn mapping(&self, ptr: usize) -> Option<(usize, u64)> {
        self.inner
            .lock()
            .mappings
            .get(&ptr)
            .map(|m| (m.len, m.handle))
    }

    /// Reserves `size` bytes aligned to `align` (a power of two),
    /// inaccessible until mapped.
    pub fn reserve(&self, size: usize, align: usize) -> Result<usize, VmError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(VmError::Invalid(format!("reserve {size} bytes at {align}")));
        }
        let total = size + align;
        // SAFETY: an anonymous, inaccessible mapping at an address of the
        // kernel's choice; nothing is overwritten.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(VmError::OutOfMemory(format!("mmap: {}", errno())));
        }
        let start = raw as usize;
        let aligned = (start + align - 1) & !(align - 1);
        // SAFETY: trimming the parts of our own fresh mapping outside
        // [aligned, aligned + size).
        unsafe {
            if aligned > start {
                libc::munmap(raw, aligned - start);
            }
            let end = aligned + size;
            if start + total > end {
                libc::munmap(end as *mut libc::c_void, start + total - end);
            }
        }
        self.inner.lock().reservations.insert(aligned, size);
        Ok(aligned)
    }

    /// Frees a whole reservation with nothing mapped in it.
    pub fn free_reservation(&self, ptr: usize, size: usize) -> Result<(), VmError> {
        let mut inner = self.inner.lock();
        if inner.reservations.get(&ptr) != Some(&size) {
            return Err(VmError::Invalid(format!(
                "{ptr:#x} + {size} is not a reservation"
            )));
        }
        if inner.mappings.range(ptr..ptr + size).next().is_some() {
            return Err(VmError::Invalid(format!(
                "the reservation {ptr:#x} still has mappings"
            )));
        }
        inner.reservations.remove(&ptr);
        // SAFETY: our own reservation, which nothing uses any more.
        unsafe { libc::munmap(ptr as *mut libc::c_void, size) };
        Ok(())
    }

    fn inside_reservation(inner: &Inner, ptr: usize, len: usize) -> bool {
        inner
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&start, &size)| ptr.saturating_add(len) <= start + size)
    }

    /// Maps `size` bytes of chunk `handle` from `offset` at `ptr` (inside a
    /// reservation, over nothing mapped), still inaccessible.
    pub fn map(&self, ptr: usize, size: usize, offset: usize, handle: u64) -> Result<(), VmError> {
        let mut inner = self.inner.lock();
        if !Self::inside_reservation(&inner, ptr, size) {
            return Err(VmError::Invalid(format!(
                "{ptr:#x} + {size} is not inside a reservation"
            )));
        }
        let overlaps = inner
            .mappings
            .range(..ptr + size)
            .next_back()
            .is_some_and(|(&start, m)| start + m.len > ptr);
        if overlaps {
            return Err(VmError::Invalid(format!("{ptr:#x} is already mapped")));
        }
        let chunk = match inner.chunks.get_mut(&handle) {
            Some(c) if !c.released => c,
            _ => return Err(VmError::Handle(format!("chunk {handle} is not live"))),
        };
        if offset + size > chunk.size {
            return Err(VmError::Invalid(format!(
                "{size} bytes at offset {offset} of a {} byte chunk",
                chunk.size
            )));
        }
        // SAFETY: replaces part of our own PROT_NONE reservation (checked
        // above) with the chunk's file, still inaccessible.
        let raw = unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                size,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                chunk.fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(VmError::OutOfMemory(format!("mmap: {}", errno())));
        }
        chunk.mappings += 1;
        inner.mappings.insert(
            ptr,
            Mapping {
                len: size,
                handle,
                access: Vec::new(),
            },
        );
        Ok(())
    }

    /// The mappings exactly covering `ptr..ptr + size`, contiguously.
    fn covering(inner: &Inner, ptr: usize, size: usize) -> Result<Vec<usize>, VmError> {
        let mut at = ptr;
        let mut found = Vec::new();
        for (&start, m) in inner.mappings.range(ptr..ptr + size) {
            if start != at {
                break;
            }
            found.push(start);
            at = start + m.len;
        }
        if at != ptr + size || found.is_empty() {
            return Err(VmError::Invalid(format!(
                "{ptr:#x} + {size} is not exactly a range of mappings"
            )));
        }
        Ok(found)
    }

    /// Gives `devices` (device, writable) access to the mappings exactly
    /// covering `ptr..ptr + size`, and makes them accessible to the host.
    pub fn set_access(
        &self,
        ptr: usize,
        size: usize,
        devices: &[(i32, bool)],
    ) -> Result<(), VmError> {
        let mut inner = self.inner.lock();
        let found = Self::covering(&inner, ptr, size)?;
        let prot = if devices.iter().any(|d| d.1) {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: the range is exactly our own mappings.
        if unsafe { libc::mprotect(ptr as *mut libc::c_void, size, prot) } != 0 {
            return Err(VmError::Invalid(format!("mprotect: {}", errno())));
        }
        for start in found {
            let m = inner.mappings.get_mut(&start).expect("found above");
            for &(device, write) in devices {
                m.access.retain(|a| a.0 != device);
                m.access.push((device, write));
            }
        }
        Ok(())
    }

    /// Unmaps the mappings exactly covering `ptr..ptr + size`; the range
    /// is reserved and inaccessible again.
    pub fn unmap(&self, ptr: usize, size: usize) -> Result<(), VmError> {
        let mut inner = self.inner.lock();
        let found = Self::covering(&inner, ptr, size)?;
        // SAFETY: replaces our own mappings with an inaccessible reservation.
        unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                size,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        for start in found {
            let m = inner.mappings.remove(&start).expect("found above");
            if let Some(chunk) = inner.chunks.get_mut(&m.handle) {
                chunk.mappings -= 1;
                if chunk.released && chunk.mappings == 0 {
                    inner.chunks.remove(&m.handle);
                }
            }
        }
        Ok(())
    }

    /// Whether `device` may touch `ptr..ptr + len` (`write`: to write it):
    /// `None` if the range is no reserved address at all (other memory),
    /// else whether every byte is mapped with that access.
    pub fn access(&self, ptr: usize, len: usize, device: i32, write: bool) -> Option<bool> {
        let inner = self.inner.lock();
        if !Self::inside_reservation(&inner, ptr, len.max(1)) {
            return None;
        }
        let mut at = ptr;
        let end = ptr.saturating_add(len.max(1));
        while at < end {
            let Some((&start, m)) = inner.mappings.range(..=at).next_back() else {
                return Some(false);
            };
            if start + m.len <= at || !m.access.iter().any(|a| a.0 == device && (a.1 || !write)) {
                return Some(false);
            }
            at = start + m.len;
        }
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_map_access_unmap_release() {
        let s = Space::new();
        let g = 2 << 20;
        let base = s.reserve(2 * g, g).unwrap();
        assert_eq!(base % g, 0);
        let h = s.create(g, 0).unwrap();
        assert_eq!(s.bytes_on(0), g as u64);
        s.map(base, g, 0, h).unwrap();
        assert_eq!(s.access(base, 8, 0, true), Some(false), "no access yet");
        assert!(s.map(base, g, 0, h).is_err(), "mapped twice");
        s.set_access(base, g, &[(0, true)]).unwrap();
        assert_eq!(s.access(base, 8, 0, true), Some(true));
        assert_eq!(s.access(base, 8, 1, false), Some(false), "another device");
        assert_eq!(
            s.access(base + g, 8, 0, false),
            Some(false),
            "unmapped part"
        );
        assert_eq!(s.access(16, 8, 0, false), None);
        // SAFETY: mapped read-write just above.
        unsafe { *(base as *mut u8) = 7 };
        s.release(h).unwrap();
        assert_eq!(s.bytes_on(0), g as u64, "still mapped");
        assert!(s.free_reservation(base, 2 * g).is_err(), "still mapped");
        s.unmap(base, g).unwrap();
        assert_eq!(s.bytes_on(0), 0);
        s.free_reservation(base, 2 * g).unwrap();
    }
}
