//! The fake CNDrv virtual memory API, on the kit's
//! [`dipu_fakekit::vmem::Space`]: reservations of address space with
//! nothing behind them (`mmap` without access), physical chunks as memory
//! files, mappings that stay inaccessible until `cnMemSetAccess` on the
//! mapped range, one mapping per chunk, and unmaps of whole mapped ranges
//! only. A chunk is charged to its device until released and unmapped.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use dipu_fakekit::vmem::Space;

use crate::common::{config, export, put};

const SUCCESS: c_int = 0;
const INVALID: c_int = 1;
const OUT_OF_MEMORY: c_int = 2;
const GENERIC: c_int = 999;
/// Both granularities: 2 MiB.
const GRANULARITY: usize = 2 << 20;
/// `CN_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED`.
const ATTR_VMM: c_int = 0x30B;
/// Devices are 64-bit handles, not ordinals: the ordinal is the low bits.
const DEVICE_TAG: u64 = 0xCA3B_0000_0000;

/// `CNmemLocation`.
#[repr(C)]
pub struct Location {
    type_: c_int,
    id: c_uint,
}

/// `CNmemAllocationProp`.
#[repr(C)]
pub struct Prop {
    type_: c_int,
    handle_types: c_int,
    location: Location,
    flags: [u8; 2],
}

/// `CNmemAccessDesc`.
#[repr(C)]
pub struct AccessDesc {
    location: Location,
    access_flags: c_int,
    cache_type: c_int,
    pinned_type: c_int,
}

fn space() -> &'static Space {
    static SPACE: OnceLock<Space> = OnceLock::new();
    SPACE.get_or_init(Space::new)
}

/// Whether `ptr..ptr+len` lies in consecutive mappings with access set
/// (for some device).
pub(crate) fn is_accessible(ptr: usize, len: usize) -> bool {
    (0..config().devices).any(|d| space().access(ptr, len, d, false) == Some(true))
}

/// Gives chunk `handle`'s memory back to its device if the space let it go.
fn settle(handle: u64, size: usize, device: i32) {
    if space().chunk(handle).is_none() {
        crate::rt::uncharge(device, size as u64);
    }
}

fn ordinal(dev: u64) -> Option<i32> {
    let o = dev.checked_sub(DEVICE_TAG)?;
    (o < config().devices as u64).then_some(o as i32)
}

fn prop_device(prop: *const Prop) -> Option<i32> {
    if prop.is_null() {
        return None;
    }
    // SAFETY: non-null, and the prototype makes it a valid property.
    let p = unsafe { &*prop };
    let ok = p.type_ == 1 && p.location.type_ == 1 && (p.location.id as i32) < config().devices;
    ok.then_some(p.location.id as i32)
}

fn after(code: c_int) -> c_int {
    code
}

static NAMES: &[(c_int, &str, &str)] = &[
    (SUCCESS, "CN_SUCCESS\0", "success\0"),
    (INVALID, "CN_ERROR_INVALID_VALUE\0", "invalid value\0"),
    (
        OUT_OF_MEMORY,
        "CN_MEMORY_ERROR_OUT_OF_MEMORY\0",
        "out of device memory\0",
    ),
    (
        GENERIC,
        "CN_ERROR_UNKNOWN\0",
        "unknown error (injected by the fake)\0",
    ),
];

fn describe(code: c_int, which: usize, out: *mut *const c_char) -> c_int {
    let Some(&(_, n, s)) = NAMES.iter().find(|(c, _, _)| *c == code) else {
        return INVALID;
    };
    let text = if which == 0 { n } else { s };
    if put(out, text.as_ptr().cast()) {
        SUCCESS
    } else {
        INVALID
    }
}

export! { "CNDrv", GENERIC, after;
    fn cnGetErrorName(error: c_int, out: *mut *const c_char) { describe(error, 0, out) }
    fn cnGetErrorString(error: c_int, out: *mut *const c_char) { describe(error, 1, out) }
    fn cnDeviceGet(dev: *mut u64, ordinal: c_int) {
        if !(0..config().devices).contains(&ordinal) { return INVALID; }
        if put(dev, DEVICE_TAG + ordinal as u64) { SUCCESS } else { INVALID }
    }
    fn cnDeviceGetAttribute(value: *mut c_int, attr: c_int, dev: u64) {
        if ordinal(dev).is_none() || attr != ATTR_VMM { return INVALID; }
        if put(value, 1) { SUCCESS } else { INVALID }
    }
    fn cnMemGetAllocationGranularity(granularity: *mut usize, prop: *const Prop, option: c_int) {
        if prop_device(prop).is_none() || !(0..=1).contains(&option) { return INVALID; }
        if put(granularity, GRANULARITY) { SUCCESS } else { INVALID }
    }
    fn cnMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, start: u64, flags: u64) {
        if ptr.is_null() || size == 0 || size % GRANULARITY != 0 || start != 0 || flags != 0 { return INVALID; }
        let align = alignment.max(GRANULARITY);
        if !align.is_power_of_two() { return INVALID; }
        let Ok(base) = space().reserve(size, align) else { return OUT_OF_MEMORY; };
        put(ptr, base as u64);
        SUCCESS
    }
    fn cnMemAddressFree(ptr: u64, size: usize) {
        if space().free_reservation(ptr as usize, size).is_err() { return INVALID; }
        SUCCESS
    }
    fn cnMemCreate(handle: *mut u64, size: usize, prop: *const Prop, flags: u64) {
        let Some(device) = prop_device(prop) else { return INVALID; };
        if handle.is_null() || size == 0 || size % GRANULARITY != 0 || flags != 0 { return INVALID; }
        if crate::common::oom() || !crate::rt::charge(device, size as u64) { return OUT_OF_MEMORY; }
        let Ok(h) = space().create(size, device) else {
            crate::rt::uncharge(device, size as u64);
            return OUT_OF_MEMORY;
        };
        put(handle, h);
        SUCCESS
    }
    fn cnMemRelease(handle: u64) {
        let Some(c) = space().chunk(handle) else { return INVALID; };
        if space().release(handle).is_err() { return INVALID; }
        settle(handle, c.size, c.device);
        SUCCESS
    }
    fn cnMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        let base = ptr as usize;
        if offset != 0 || flags != 0 || base % GRANULARITY != 0 { return INVALID; }
        let Some(c) = space().chunk(handle) else { return INVALID; };
        if c.released || c.mappings > 0 || c.size != size { return INVALID; }
        match space().map(base, size, 0, handle) {
            Ok(()) => SUCCESS,
            Err(dipu_fakekit::vmem::VmError::OutOfMemory(_)) => GENERIC,
            Err(_) => INVALID,
        }
    }
    fn cnMemSetAccess(ptr: u64, size: usize, desc: *const AccessDesc, count: usize) {
        if desc.is_null() || count != 1 { return INVALID; }
        // SAFETY: non-null; one descriptor by the prototype's contract.
        let d = unsafe { &*desc };
        // Read-write is 0 in CNDrv (CUDA's 3 is refused).
        if d.access_flags != 0 || d.location.type_ != 1 || (d.location.id as i32) >= config().devices { return INVALID; }
        if space().set_access(ptr as usize, size, &[(d.location.id as i32, true)]).is_err() { return INVALID; }
        SUCCESS
    }
    fn cnMemUnmap(ptr: u64, size: usize) {
        let base = ptr as usize;
        // A whole mapped range only.
        let Some((len, handle)) = space().mapping(base) else { return INVALID; };
        if len != size { return INVALID; }
        let chunk = space().chunk(handle);
        if space().unmap(base, size).is_err() { return GENERIC; }
        if let Some(c) = chunk {
            settle(handle, c.size, c.device);
        }
        SUCCESS
    }
}
