//! Shareable device memory: a simulated device's large allocations are
//! cut from one sparse memory file (`memfd`) mapped once, so a
//! communicator rank in another process can map that file once too and
//! read any buffer of the device at memory speed (`comm/direct.rs`).
//!
//! The file is as large as twice the device's capacity, but holds pages
//! only where allocations touched them: a freed range's pages are given
//! back to the system at once (a hole is punched), in this process and in
//! every peer that maps the file.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

use dipu_deviceapi::{Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::fcntl::{fallocate, FallocateFlags};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use nix::sys::stat::fstat;
use parking_lot::Mutex;

/// Device allocations of at least this many bytes come from the arena
/// (smaller ones from the host allocator: no collective reads them
/// directly, and a page each would waste memory).
pub(crate) const ARENA_FROM: usize = 256 << 10;
/// The arena's granularity: a page.
const PAGE: usize = 4096;
/// The most address space one arena takes.
const MAX_SPAN: usize = 1 << 44;

/// What identifies an arena to a peer process: its descriptor there, the
/// file's inode (so a descriptor reused for another file is told apart)
/// and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) fd: i32,
    pub(crate) inode: u64,
    pub(crate) size: u64,
}

/// One device's memory file, mapped read-write.
#[derive(Debug)]
pub(crate) struct Arena {
    fd: OwnedFd,
    inode: u64,
    base: usize,
    span: usize,
    free: Mutex<FreeRanges>,
}

// SAFETY: `base` is an address (the mapping belongs to the arena and lives
// as long as it); every other field is Send and Sync.
unsafe impl Send for Arena {}
// SAFETY: as above; the free ranges are behind a mutex.
unsafe impl Sync for Arena {}

impl Arena {
    /// A new arena for a device of `capacity` bytes.
    pub(crate) fn create(device: i32, capacity: u64) -> Result<Arena> {
        let fail = |what: &str, e: Errno| {
            Error::new(
                ErrorKind::OutOfMemory,
                format!("host device {device}: cannot set up its shareable memory: {what}: {e}"),
            )
        };
        let span = usize::try_from(capacity.saturating_mul(2))
            .unwrap_or(MAX_SPAN)
            .clamp(PAGE, MAX_SPAN)
            .next_multiple_of(PAGE);
        let fd = memfd_create(c"dipu-host-device", MemFdCreateFlag::MFD_CLOEXEC)
            .map_err(|e| fail("memfd_create", e))?;
        nix::unistd::ftruncate(&fd, span as i64).map_err(|e| fail("ftruncate", e))?;
        let inode = fstat(fd.as_raw_fd()).map_err(|e| fail("fstat", e))?.st_ino;
        let length = NonZeroUsize::new(span).expect("span is at least a page");
        // SAFETY: a new shared mapping of our own file at an address the
        // kernel chooses: it replaces nothing; the file is `span` bytes
        // long, so every mapped page is backed (no SIGBUS).
        let base = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED | MapFlags::MAP_NORESERVE,
                &fd,
                0,
            )
        }
        .map_err(|e| fail("mmap", e))?;
        Ok(Arena {
            fd,
            inode,
            base: base.as_ptr() as usize,
            span,
            free: Mutex::new(FreeRanges::new(span)),
        })
    }

    /// What a peer process needs to map this arena.
    pub(crate) fn identity(&self) -> Identity {
        Identity {
            fd: self.fd.as_raw_fd(),
            inode: self.inode,
            size: self.span as u64,
        }
    }

    /// `bytes` (nonzero) of the arena, or `None` if no range is left.
    pub(crate) fn alloc(&self, bytes: usize) -> Option<*mut c_void> {
        let len = bytes.checked_next_multiple_of(PAGE)?;
        let offset = self.free.lock().take(len)?;
        Some((self.base + offset) as *mut c_void)
    }

    /// The offset of `addr` in the file, if `addr..addr + len` is inside.
    pub(crate) fn offset_of(&self, addr: usize, len: usize) -> Option<u64> {
        let offset = addr.checked_sub(self.base)?;
        (offset.checked_add(len)? <= self.span).then_some(offset as u64)
    }

    /// Gives back the `bytes` at `addr` that [`Arena::alloc`] returned;
    /// their pages go back to the system.
    pub(crate) fn free(&self, addr: usize, bytes: usize) {
        let len = bytes.next_multiple_of(PAGE);
        let offset = addr - self.base;
        let punched = fallocate(
            self.fd.as_raw_fd(),
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            offset as i64,
            len as i64,
        );
        if let Err(e) = punched {
            // The range stays usable; only its pages stay resident.
            tracing::warn!(target: "dipu_vendor_host", "freeing {len} bytes of device memory: punching a hole failed: {e}");
        }
        self.free.lock().give(offset, len);
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let Some(base) = NonNull::new(self.base as *mut c_void) else {
            return;
        };
        // SAFETY: the arena's own mapping, unmapped once; the vendor (and
        // so every allocation in it) is gone.
        let unmapped = unsafe { munmap(base, self.span) };
        if let Err(e) = unmapped {
            tracing::warn!(target: "dipu_vendor_host", "unmapping a device arena failed: {e}");
        }
    }
}

/// Free ranges of the file: by start (to merge neighbours) and by size
/// (best fit, lowest offset among equals).
#[derive(Debug)]
struct FreeRanges {
    by_start: BTreeMap<usize, usize>,
    by_size: BTreeSet<(usize, usize)>,
}

impl FreeRanges {
    fn new(span: usize) -> FreeRanges {
        let mut ranges = FreeRanges {
            by_start: BTreeMap::new(),
            by_size: BTreeSet::new(),
        };
        ranges.insert(0, span);
        ranges
    }

    fn insert(&mut self, start: usize, len: usize) {
        self.by_start.insert(start, len);
        self.by_size.insert((len, start));
    }

    fn remove(&mut self, start: usize, len: usize) {
        self.by_start.remove(&start);
        self.by_size.remove(&(len, start));
    }

    /// The offset of a free range of `len` bytes, now taken.
    fn take(&mut self, len: usize) -> Option<usize> {
        let &(size, start) = self.by_size.range((len, 0)..).next()?;
        self.remove(start, size);
        if size > len {
            self.insert(start + len, size - len);
        }
        Some(start)
    }

    /// Returns `start..start + len`, merged with free neighbours.
    fn give(&mut self, mut start: usize, mut len: usize) {
        if let Some((&before, &before_len)) = self.by_start.range(..start).next_back() {
            if before + before_len == start {
                self.remove(before, before_len);
                start = before;
                len += before_len;
            }
        }
        if let Some(&after_len) = self.by_start.get(&(start + len)) {
            self.remove(start + len, after_len);
            len += after_len;
        }
        self.insert(start, len);
    }
}

/// A peer process's arena, mapped here (read-write: an all_reduce writes
/// its reduced block into the peers' buffers).
#[derive(Debug)]
pub(crate) struct PeerArena {
    base: usize,
    size: usize,
}

// SAFETY: `base` is the address of a mapping owned by this value.
unsafe impl Send for PeerArena {}
// SAFETY: as above; the value is never changed.
unsafe impl Sync for PeerArena {}

impl PeerArena {
    /// Maps the arena `identity` of process `pid` (same user, and allowed
    /// to read its descriptors: the rule `process_vm_readv` follows too).
    pub(crate) fn open(pid: i32, identity: Identity) -> std::result::Result<PeerArena, String> {
        let path = format!("/proc/{pid}/fd/{}", identity.fd);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {path}: {e}"))?;
        let stat = fstat(file.as_raw_fd()).map_err(|e| format!("fstat of {path}: {e}"))?;
        if stat.st_ino != identity.inode || stat.st_size as u64 != identity.size {
            return Err(format!(
                "{path} is not the device memory the peer published"
            ));
        }
        let size = usize::try_from(identity.size).map_err(|e| e.to_string())?;
        let length = NonZeroUsize::new(size).ok_or("an empty arena")?;
        // SAFETY: a new shared mapping of the peer's file, at an address the
        // kernel chooses; the file is `size` bytes long and never shrinks
        // (its owner only punches holes), so no access to the mapping can
        // fault.
        let base = unsafe {
            mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED | MapFlags::MAP_NORESERVE,
                &file,
                0,
            )
        }
        .map_err(|e| format!("mapping {path}: {e}"))?;
        Ok(PeerArena {
            base: base.as_ptr() as usize,
            size,
        })
    }

    /// The local address of `len` bytes at `offset` of the peer's file.
    pub(crate) fn at(&self, offset: u64, len: usize) -> Option<usize> {
        let offset = usize::try_from(offset).ok()?;
        (offset.checked_add(len)? <= self.size).then_some(self.base + offset)
    }
}

impl Drop for PeerArena {
    fn drop(&mut self) {
        let Some(base) = NonNull::new(self.base as *mut c_void) else {
            return;
        };
        // SAFETY: this value's own mapping, unmapped once; nothing reads
        // through it any more (it lives as long as its communicator).
        let _ = unsafe { munmap(base, self.size) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ranges_take_best_fit_and_merge() {
        let mut r = FreeRanges::new(16 * PAGE);
        let a = r.take(4 * PAGE).unwrap();
        let b = r.take(4 * PAGE).unwrap();
        let c = r.take(4 * PAGE).unwrap();
        assert_eq!((a, b, c), (0, 4 * PAGE, 8 * PAGE));
        r.give(a, 4 * PAGE);
        // Two 4-page ranges are free (at 0 and at the end): the lowest
        // offset among equal best fits wins.
        assert_eq!(r.take(2 * PAGE), Some(0));
        assert_eq!(r.take(8 * PAGE), None);
        r.give(0, 2 * PAGE);
        r.give(b, 4 * PAGE);
        r.give(c, 4 * PAGE);
        assert_eq!(r.by_start.len(), 1, "{r:?}");
        assert_eq!(r.take(16 * PAGE), Some(0));
    }

    #[test]
    fn arena_memory_is_shared_with_a_peer_mapping() {
        let arena = Arena::create(0, 64 << 20).unwrap();
        let p = arena.alloc(ARENA_FROM).unwrap() as *mut u8;
        // SAFETY: `p` is ARENA_FROM bytes of the arena, ours.
        unsafe { std::ptr::write_bytes(p, 0x5a, ARENA_FROM) };
        let pid = i32::try_from(std::process::id()).unwrap();
        let peer = PeerArena::open(pid, arena.identity()).unwrap();
        let offset = arena.offset_of(p as usize, ARENA_FROM).unwrap();
        let q = peer.at(offset, ARENA_FROM).unwrap() as *const u8;
        // SAFETY: the peer mapping is readable for ARENA_FROM bytes there.
        let seen = unsafe { std::slice::from_raw_parts(q, ARENA_FROM) };
        assert!(seen.iter().all(|b| *b == 0x5a));
        assert!(peer.at(arena.identity().size, 1).is_none());
        // A freed range reads back as zeros through the peer (its pages
        // were given back).
        arena.free(p as usize, ARENA_FROM);
        assert!(seen.iter().all(|b| *b == 0));
        let wrong = Identity {
            inode: arena.identity().inode + 1,
            ..arena.identity()
        };
        assert!(PeerArena::open(pid, wrong)
            .unwrap_err()
            .contains("not the device memory"));
    }
}
