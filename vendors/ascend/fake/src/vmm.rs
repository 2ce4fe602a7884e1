//! Virtual memory: reservations are `PROT_NONE` address space, physical
//! chunks are memfd files, mappings map a whole file at a reserved address.
//! "此处的size必须与aclrtMallocPhysical接口的size参数值相同" and "offset：物理内存
//! 偏移值，当前只能设置为0" (aclrtMapMem.md); `aclrtUnmapMem(void *virPtr)` takes
//! no size: it unmaps the one mapping that starts there.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::entry::{code, fail, out, R};
use crate::state::{self, regions, Kind, Region};

/// The granularity: 2 MB huge pages.
pub(crate) const GRANULARITY: usize = 2 << 20;

/// `aclrtPhysicalMemProp` as the header lays it out (32 bytes).
#[repr(C)]
pub(crate) struct PhysicalMemProp {
    pub(crate) handle_type: i32,
    pub(crate) allocation_type: i32,
    pub(crate) mem_attr: i32,
    pub(crate) location_id: u32,
    pub(crate) location_type: i32,
    pub(crate) reserve: u64,
}

#[derive(Debug)]
struct Chunk {
    fd: i32,
    size: usize,
    device: i32,
    mapped: usize,
    freed: bool,
}

#[derive(Default)]
struct Vmm {
    /// Reservations: start to length.
    reserved: BTreeMap<usize, usize>,
    /// Mappings: start to (length, chunk).
    mapped: BTreeMap<usize, (usize, usize)>,
    chunks: HashMap<usize, Chunk>,
}

fn vmm() -> &'static Mutex<Vmm> {
    static VMM: OnceLock<Mutex<Vmm>> = OnceLock::new();
    VMM.get_or_init(Default::default)
}

fn errno() -> String {
    std::io::Error::last_os_error().to_string()
}

/// `aclrtMemGetAllocationGranularity`.
#[cfg_attr(
    feature = "old-cann",
    expect(dead_code, reason = "not exported by the old build")
)]
pub(crate) fn granularity(prop: *mut PhysicalMemProp, granularity: *mut usize) -> R {
    if prop.is_null() {
        return fail(code::INVALID_PARAM, "prop is null");
    }
    out(granularity, GRANULARITY, "granularity")
}

/// `aclrtReserveMemAddress`: alignment 0 (the granularity), no expected
/// address, no flags.
pub(crate) fn reserve(
    ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expect: *mut c_void,
    flags: u64,
) -> R {
    state::current()?;
    if size == 0 || size % GRANULARITY != 0 {
        return fail(
            code::INVALID_PARAM,
            format!("size {size} is not a multiple of {GRANULARITY}"),
        );
    }
    if !expect.is_null() || flags != 0 || (alignment != 0 && GRANULARITY % alignment != 0) {
        return fail(
            code::INVALID_PARAM,
            "the fake supports no expected address, no flags, and alignments dividing 2 MB",
        );
    }
    let span = size + GRANULARITY;
    // SAFETY: a fresh anonymous PROT_NONE mapping at an address of the
    // kernel's choice; nothing is read or written through it here.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return fail(code::RT_MEMORY_ALLOCATION, format!("mmap: {}", errno()));
    }
    let start = (base as usize).div_ceil(GRANULARITY) * GRANULARITY;
    // Trim to an aligned range of `size` bytes.
    // SAFETY: both pieces lie inside the mapping just made, which nothing else uses.
    unsafe {
        if start > base as usize {
            libc::munmap(base, start - base as usize);
        }
        let end = base as usize + span;
        if end > start + size {
            libc::munmap((start + size) as *mut c_void, end - start - size);
        }
    }
    vmm().lock().reserved.insert(start, size);
    out(ptr, start as *mut c_void, "virPtr")
}

/// `aclrtReleaseMemAddress`: nothing may be mapped in it.
pub(crate) fn release(ptr: *mut c_void) -> R {
    let mut v = vmm().lock();
    let start = ptr as usize;
    let Some(&size) = v.reserved.get(&start) else {
        return fail(code::INVALID_PARAM, format!("{ptr:p} is not a reservation"));
    };
    if v.mapped.range(start..start + size).next().is_some() {
        return fail(code::RT_PARAM_INVALID, "the reservation still has mappings");
    }
    v.reserved.remove(&start);
    // SAFETY: the whole reservation, mapped by `reserve`, unused.
    unsafe { libc::munmap(ptr, size) };
    Ok(())
}

/// `aclrtMallocPhysical`: a memfd of `size` bytes, counted on the device.
pub(crate) fn malloc_physical(
    handle: *mut *mut c_void,
    size: usize,
    prop: *const PhysicalMemProp,
    flags: u64,
) -> R {
    state::current()?;
    if prop.is_null() || flags != 0 {
        return fail(code::INVALID_PARAM, "prop must be given and flags 0");
    }
    // SAFETY: non-null, and the caller passes a whole aclrtPhysicalMemProp.
    let p = unsafe { &*prop };
    if p.location_type != 1 {
        return fail(
            code::INVALID_PARAM,
            "the location must be a device (ACL_MEM_LOCATION_TYPE_DEVICE)",
        );
    }
    let device = p.location_id as i32;
    let dev = state::device(device)?;
    if size == 0 || size % GRANULARITY != 0 {
        return fail(
            code::INVALID_PARAM,
            format!("size {size} is not a multiple of {GRANULARITY}"),
        );
    }
    crate::entry::injected_oom()?;
    let total = crate::config::get().memory;
    if dev.used.fetch_add(size as u64, Ordering::AcqRel) + size as u64 > total {
        dev.used.fetch_sub(size as u64, Ordering::AcqRel);
        return fail(
            code::RT_MEMORY_ALLOCATION,
            format!("device {device} is out of memory"),
        );
    }
    // SAFETY: a NUL-terminated name; flags 0.
    let fd = unsafe { libc::memfd_create(c"fake-acl-physical".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: a file descriptor we own.
    if fd < 0 || unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
        let why = errno();
        if fd >= 0 {
            // SAFETY: ours, closed once.
            unsafe { libc::close(fd) };
        }
        dev.used.fetch_sub(size as u64, Ordering::AcqRel);
        return fail(code::RT_MEMORY_ALLOCATION, format!("memfd: {why}"));
    }
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed) << 4;
    vmm().lock().chunks.insert(
        id,
        Chunk {
            fd,
            size,
            device,
            mapped: 0,
            freed: false,
        },
    );
    out(handle, id as *mut c_void, "handle")
}

fn forget_chunk(v: &mut Vmm, id: usize) {
    if let Some(c) = v.chunks.remove(&id) {
        if let Ok(dev) = state::device(c.device) {
            dev.used.fetch_sub(c.size as u64, Ordering::AcqRel);
        }
    }
}

/// `aclrtFreePhysical`: the memory returns once no mapping uses it.
pub(crate) fn free_physical(handle: *mut c_void) -> R {
    let mut v = vmm().lock();
    let id = handle as usize;
    let Some(c) = v.chunks.get_mut(&id).filter(|c| !c.freed) else {
        return fail(
            code::INVALID_PARAM,
            format!("{handle:p} is not a live physical chunk"),
        );
    };
    c.freed = true;
    // SAFETY: our descriptor, closed once; mappings keep the memory.
    unsafe { libc::close(c.fd) };
    if c.mapped == 0 {
        forget_chunk(&mut v, id);
    }
    Ok(())
}

/// `aclrtMapMem`.
pub(crate) fn map(
    ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> R {
    state::current()?;
    let mut v = vmm().lock();
    let start = ptr as usize;
    let id = handle as usize;
    let Some(chunk) = v.chunks.get(&id).filter(|c| !c.freed) else {
        return fail(
            code::INVALID_PARAM,
            format!("{handle:p} is not a live physical chunk"),
        );
    };
    if offset != 0 || flags != 0 || size != chunk.size {
        return fail(
            code::INVALID_PARAM,
            format!(
                "offset and flags must be 0 and size the chunk's {} bytes (got {size})",
                chunk.size
            ),
        );
    }
    let inside = v
        .reserved
        .range(..=start)
        .next_back()
        .is_some_and(|(&s, &len)| start % GRANULARITY == 0 && start + size <= s + len);
    if !inside {
        return fail(
            code::INVALID_PARAM,
            format!("{ptr:p} + {size} is not inside a reservation, aligned"),
        );
    }
    let overlaps = v
        .mapped
        .range(..start + size)
        .next_back()
        .is_some_and(|(&s, &(len, _))| s + len > start);
    if overlaps {
        return fail(code::INVALID_PARAM, "the range is already mapped");
    }
    let (fd, device) = (chunk.fd, chunk.device);
    // SAFETY: a reserved, unmapped, aligned range of ours is replaced by
    // the chunk's file.
    let at = unsafe {
        libc::mmap(
            ptr,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return fail(code::RT_INTERNAL_ERROR, format!("mmap: {}", errno()));
    }
    v.mapped.insert(start, (size, id));
    if let Some(c) = v.chunks.get_mut(&id) {
        c.mapped += 1;
    }
    regions().lock().insert(
        start,
        Region {
            len: size,
            kind: Kind::Mapped { device },
        },
    );
    Ok(())
}

/// `aclrtUnmapMem`: the mapping that starts at `ptr`.
pub(crate) fn unmap(ptr: *mut c_void) -> R {
    let mut v = vmm().lock();
    let start = ptr as usize;
    let Some((size, id)) = v.mapped.remove(&start) else {
        return fail(code::INVALID_PARAM, format!("no mapping starts at {ptr:p}"));
    };
    regions().lock().remove(&start);
    // SAFETY: our mapping goes back to reserved, inaccessible address space.
    unsafe {
        libc::mmap(
            ptr,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    let forget = v.chunks.get_mut(&id).is_some_and(|c| {
        c.mapped -= 1;
        c.freed && c.mapped == 0
    });
    if forget {
        forget_chunk(&mut v, id);
    }
    Ok(())
}
