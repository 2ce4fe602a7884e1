//! One POSIX shared-memory segment, mapped read-write, with typed views of
//! its header and counters (atomics placed over the mapped memory).

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use dipu_deviceapi::{Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{self, MapFlags, ProtFlags};
use nix::sys::stat::Mode;

use super::layout::{Counters, Header, Layout};

/// A mapped segment; unmapped on drop (the name is not unlinked here).
#[derive(Debug)]
pub(crate) struct Segment {
    base: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the mapping is plain shared memory owned by this value until it
// is dropped; every access goes through atomics or through copies that the
// collective protocol orders with those atomics (Release/Acquire), so it
// may be used from any thread.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`: shared access is through atomics only, or through
// raw copies the protocol keeps from racing.
unsafe impl Sync for Segment {}

impl Segment {
    /// Opens (creating if needed) the segment `name`, grows it to at least
    /// `layout.size` bytes (never shrinks it: another rank may already use
    /// more) and maps the first `layout.size` bytes.
    pub(crate) fn open(name: &str, layout: Layout) -> Result<Segment> {
        let fail = |what: &str, e: Errno| {
            let kind = if matches!(e, Errno::ENOSPC | Errno::ENOMEM) {
                ErrorKind::OutOfMemory
            } else {
                ErrorKind::VendorError
            };
            Error::vendor(
                kind,
                e as i64,
                format!(
                    "comm_init_rank: {what} of the shared-memory segment {name} ({} bytes) \
                     failed: {e}",
                    layout.size
                ),
            )
        };
        let fd = mman::shm_open(
            name,
            OFlag::O_CREAT | OFlag::O_RDWR | OFlag::O_CLOEXEC,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .map_err(|e| fail("shm_open", e))?;
        let size = i64::try_from(layout.size).map_err(|_| fail("sizing", Errno::EFBIG))?;
        // posix_fallocate only grows the file and reserves its pages now, so
        // a full /dev/shm is an error here, not a SIGBUS later.
        nix::fcntl::posix_fallocate(fd.as_raw_fd(), 0, size)
            .map_err(|e| fail("posix_fallocate", e))?;
        let stat = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| fail("fstat", e))?;
        if stat.st_size < size {
            return Err(fail("sizing (fstat shows it smaller)", Errno::EIO));
        }
        let len = NonZeroUsize::new(layout.size).ok_or_else(|| fail("sizing", Errno::EINVAL))?;
        // SAFETY: a fresh shared mapping of `len` bytes of a file that has at
        // least that many; no existing memory is affected.
        let base = unsafe {
            mman::mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| fail("mmap", e))?;
        Ok(Segment {
            base: base.cast(),
            layout,
        })
    }

    /// Removes `name` from /dev/shm; a name already gone is fine.
    pub(crate) fn unlink(name: &str) {
        match mman::shm_unlink(name) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => tracing::warn!(
                target: "dipu_vendor_host",
                "cannot remove the shared-memory segment {name}: {e}"
            ),
        }
    }

    /// The segment's layout.
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The header at the start of the segment.
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping starts page-aligned with a `Header` (zeroed
        // memory is a valid header: atomics of zero), lives as long as
        // `self`, and is only accessed through the header's atomics.
        unsafe { self.base.cast::<Header>().as_ref() }
    }

    /// Rank `rank`'s collective counters.
    pub(crate) fn coll(&self, rank: usize) -> &Counters {
        // SAFETY: as in `counters_at`; the offset is one of the layout's.
        unsafe { self.counters_at(self.layout.coll_counters(rank)) }
    }

    /// The counters of the channel `src -> dst`.
    pub(crate) fn channel(&self, src: usize, dst: usize) -> &Counters {
        let channel = self.layout.channel(src, dst);
        // SAFETY: as in `counters_at`; the offset is one of the layout's.
        unsafe { self.counters_at(self.layout.p2p_counters(channel)) }
    }

    /// # Safety
    /// `offset` must be a `Counters` offset of this segment's layout.
    unsafe fn counters_at(&self, offset: usize) -> &Counters {
        // SAFETY: the caller passes an in-bounds, 64-byte-aligned offset of
        // a `Counters` block; zeroed memory is valid for it, and it is
        // accessed only through its atomics while `self` is mapped.
        unsafe { self.base.add(offset).cast::<Counters>().as_ref() }
    }

    /// Address of rank `rank`'s collective slot for `step`.
    pub(crate) fn coll_slot(&self, rank: usize, step: u64) -> *mut u8 {
        // SAFETY: the layout's slot offsets lie inside the mapping.
        unsafe { self.base.as_ptr().add(self.layout.coll_slot(rank, step)) }
    }

    /// Address of channel `src -> dst`'s slot for `step`.
    pub(crate) fn p2p_slot(&self, src: usize, dst: usize, step: u64) -> *mut u8 {
        let channel = self.layout.channel(src, dst);
        // SAFETY: the layout's slot offsets lie inside the mapping.
        unsafe { self.base.as_ptr().add(self.layout.p2p_slot(channel, step)) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let base: NonNull<c_void> = self.base.cast();
        // SAFETY: `base` and the size are exactly the mapping made in
        // `open`, and nothing borrows from it any more (`&mut self`).
        if let Err(e) = unsafe { mman::munmap(base, self.layout.size) } {
            tracing::warn!(target: "dipu_vendor_host", "munmap of a communicator segment failed: {e}");
        }
    }
}
