//! Virtual memory on the kit's [`dipu_fakekit::vmem::Space`] (reservations
//! `PROT_NONE`, physical chunks memory files), with ACL's rules on top:
//! "此处的size必须与aclrtMallocPhysical接口的size参数值相同" and "offset：物理内存
//! 偏移值，当前只能设置为0" (aclrtMapMem.md): a mapping is a whole chunk,
//! accessible at once (ACL has no access call); `aclrtUnmapMem(void *virPtr)`
//! takes no size: it unmaps the one mapping that starts there. A chunk
//! counts on its device's memory until it is both freed and unmapped.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use dipu_fakekit::vmem::{Space, VmError};

use crate::entry::{code, fail, out, Fail, R};
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

fn space() -> &'static Space {
    static SPACE: OnceLock<Space> = OnceLock::new();
    SPACE.get_or_init(Space::new)
}

/// ACL's code for a failure of the space.
fn vm_fail(e: VmError) -> Fail {
    match e {
        VmError::OutOfMemory(m) => Fail {
            code: code::RT_MEMORY_ALLOCATION,
            message: m,
        },
        VmError::Invalid(m) | VmError::Handle(m) => Fail {
            code: code::INVALID_PARAM,
            message: m,
        },
    }
}

/// Gives chunk `handle`'s memory back to its device if the space let it go.
fn settle(handle: u64, size: usize, device: i32) {
    if space().chunk(handle).is_none() {
        if let Ok(dev) = state::device(device) {
            dev.used.fetch_sub(size as u64, Ordering::AcqRel);
        }
    }
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
    let start = space().reserve(size, GRANULARITY).map_err(vm_fail)?;
    out(ptr, start as *mut c_void, "virPtr")
}

/// `aclrtReleaseMemAddress`: nothing may be mapped in it.
pub(crate) fn release(ptr: *mut c_void) -> R {
    let Some(size) = space().reservation(ptr as usize) else {
        return fail(code::INVALID_PARAM, format!("{ptr:p} is not a reservation"));
    };
    space()
        .free_reservation(ptr as usize, size)
        .or_else(|_| fail(code::RT_PARAM_INVALID, "the reservation still has mappings"))
}

/// `aclrtMallocPhysical`: a chunk of `size` bytes, counted on the device.
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
    let id = space().create(size, device).map_err(|e| {
        dev.used.fetch_sub(size as u64, Ordering::AcqRel);
        vm_fail(e)
    })?;
    out(handle, id as usize as *mut c_void, "handle")
}

/// `aclrtFreePhysical`: the memory returns once no mapping uses it.
pub(crate) fn free_physical(handle: *mut c_void) -> R {
    let id = handle as usize as u64;
    let Some(c) = space().chunk(id) else {
        return fail(
            code::INVALID_PARAM,
            format!("{handle:p} is not a live physical chunk"),
        );
    };
    let (size, device) = (c.size, c.device);
    space().release(id).or_else(|_| {
        fail(
            code::INVALID_PARAM,
            format!("{handle:p} is not a live physical chunk"),
        )
    })?;
    settle(id, size, device);
    Ok(())
}

/// `aclrtMapMem`: a whole chunk at an aligned address of a reservation.
pub(crate) fn map(
    ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> R {
    state::current()?;
    let start = ptr as usize;
    let id = handle as usize as u64;
    let Some((chunk_size, device)) = space().chunk(id).map(|c| (c.size, c.device)) else {
        return fail(
            code::INVALID_PARAM,
            format!("{handle:p} is not a live physical chunk"),
        );
    };
    if offset != 0 || flags != 0 || size != chunk_size {
        return fail(
            code::INVALID_PARAM,
            format!(
                "offset and flags must be 0 and size the chunk's {chunk_size} bytes (got {size})"
            ),
        );
    }
    if start % GRANULARITY != 0 {
        return fail(
            code::INVALID_PARAM,
            format!("{ptr:p} + {size} is not inside a reservation, aligned"),
        );
    }
    space().map(start, size, 0, id).map_err(vm_fail)?;
    if let Err(e) = space().set_access(start, size, &[(device, true)]) {
        let _ = space().unmap(start, size);
        return Err(vm_fail(e));
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
    let start = ptr as usize;
    let Some((size, id)) = space().mapping(start) else {
        return fail(code::INVALID_PARAM, format!("no mapping starts at {ptr:p}"));
    };
    let chunk = space().chunk(id);
    space().unmap(start, size).map_err(vm_fail)?;
    regions().lock().remove(&start);
    if let Some(c) = chunk {
        settle(id, c.size, c.device);
    }
    Ok(())
}
