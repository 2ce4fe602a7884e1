//! Shared mappings of files in `/dev/shm`.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::AtomicU64;

/// A shared, read-write mapping of a whole file; unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every shared word is read
// and written through atomics, and data is written only before it is
// published.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Maps the first `len` (> 0) bytes of `file`, shared.
    pub(crate) fn new(file: &File, len: usize) -> std::io::Result<Map> {
        // SAFETY: a fresh mapping of an open descriptor; the kernel checks
        // the arguments.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map {
            ptr: ptr.cast(),
            len,
        })
    }

    /// The start of the mapping (page-aligned).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The 8-aligned word at byte `at` (`at + 8 <= len`).
    pub(crate) fn word(&self, at: usize) -> &AtomicU64 {
        assert!(
            at % 8 == 0 && at + 8 <= self.len,
            "word {at} of {}",
            self.len
        );
        // SAFETY: in bounds and aligned (the mapping is page-aligned);
        // shared words are only accessed atomically.
        unsafe { &*self.ptr.add(at).cast::<AtomicU64>() }
    }

    /// Every byte.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the whole mapping, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Copies `data` to byte `at`.
    ///
    /// # Safety
    /// `at + data.len() <= len`, and nobody reads those bytes meanwhile.
    pub(crate) unsafe fn write(&self, at: usize, data: &[u8]) {
        // SAFETY: in bounds, and exclusive, by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) };
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
