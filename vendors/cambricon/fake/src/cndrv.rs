//! The fake CNDrv virtual memory API: reservations of address space with
//! nothing behind them (`mmap` without access), physical chunks as memory
//! files, mappings that stay inaccessible until `cnMemSetAccess` on the
//! mapped range, and unmaps of whole mapped ranges only.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use parking_lot::Mutex;

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

struct Chunk {
    fd: c_int,
    size: usize,
    device: i32,
    released: bool,
    mapped: bool,
}

struct Mapping {
    size: usize,
    handle: u64,
    accessible: bool,
}

#[derive(Default)]
struct Vm {
    reservations: BTreeMap<usize, usize>,
    chunks: HashMap<u64, Chunk>,
    next: u64,
    mappings: BTreeMap<usize, Mapping>,
}

fn vm() -> &'static Mutex<Vm> {
    static VM: OnceLock<Mutex<Vm>> = OnceLock::new();
    VM.get_or_init(|| {
        Mutex::new(Vm {
            next: 1 << 40,
            ..Vm::default()
        })
    })
}

/// Whether `ptr..ptr+len` lies in consecutive mappings with access set.
pub(crate) fn is_accessible(ptr: usize, len: usize) -> bool {
    let vm = vm().lock();
    let mut at = ptr;
    while at < ptr + len {
        match vm.mappings.range(..=at).next_back() {
            Some((&base, m)) if m.accessible && at < base + m.size => at = base + m.size,
            _ => return false,
        }
    }
    true
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
        // SAFETY: a fresh anonymous mapping with no access: address space only.
        let raw = unsafe {
            libc::mmap(std::ptr::null_mut(), size + align, libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
        };
        if raw == libc::MAP_FAILED { return OUT_OF_MEMORY; }
        let base = (raw as usize).next_multiple_of(align);
        let (head, tail) = (base - raw as usize, raw as usize + size + align - (base + size));
        // SAFETY: trimming the parts of our own mapping outside the aligned range.
        unsafe {
            if head > 0 { libc::munmap(raw, head); }
            if tail > 0 { libc::munmap((base + size) as *mut c_void, tail); }
        }
        vm().lock().reservations.insert(base, size);
        put(ptr, base as u64);
        SUCCESS
    }
    fn cnMemAddressFree(ptr: u64, size: usize) {
        let mut vm = vm().lock();
        let base = ptr as usize;
        if vm.reservations.get(&base) != Some(&size) { return INVALID; }
        if vm.mappings.range(base..base + size).next().is_some() { return INVALID; }
        vm.reservations.remove(&base);
        // SAFETY: our own reservation, with nothing mapped in it.
        unsafe { libc::munmap(base as *mut c_void, size) };
        SUCCESS
    }
    fn cnMemCreate(handle: *mut u64, size: usize, prop: *const Prop, flags: u64) {
        let Some(device) = prop_device(prop) else { return INVALID; };
        if handle.is_null() || size == 0 || size % GRANULARITY != 0 || flags != 0 { return INVALID; }
        if crate::common::oom() || !crate::rt::charge(device, size as u64) { return OUT_OF_MEMORY; }
        // SAFETY: a NUL-terminated name; flags are valid.
        let fd = unsafe { libc::memfd_create(c"fake-mlu-chunk".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: our own descriptor.
        if fd < 0 || unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
            crate::rt::uncharge(device, size as u64);
            return OUT_OF_MEMORY;
        }
        let mut vm = vm().lock();
        vm.next += 1;
        let h = vm.next;
        vm.chunks.insert(h, Chunk { fd, size, device, released: false, mapped: false });
        put(handle, h);
        SUCCESS
    }
    fn cnMemRelease(handle: u64) {
        let mut vm = vm().lock();
        let Some(chunk) = vm.chunks.get_mut(&handle) else { return INVALID; };
        if chunk.released { return INVALID; }
        chunk.released = true;
        if !chunk.mapped { drop_chunk(&mut vm, handle); }
        SUCCESS
    }
    fn cnMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) {
        let mut vm = vm().lock();
        let base = ptr as usize;
        if offset != 0 || flags != 0 { return INVALID; }
        let inside = vm.reservations.range(..=base).next_back().is_some_and(|(&r, &n)| base + size <= r + n);
        let overlaps = vm.mappings.range(..base + size).next_back().is_some_and(|(&m, map)| m + map.size > base);
        let Some(chunk) = vm.chunks.get(&handle) else { return INVALID; };
        if !inside || overlaps || chunk.released || chunk.mapped || chunk.size != size || base % GRANULARITY != 0 {
            return INVALID;
        }
        // SAFETY: inside our reservation, over nothing mapped; the chunk's file is `size` long.
        let at = unsafe {
            libc::mmap(base as *mut c_void, size, libc::PROT_NONE, libc::MAP_SHARED | libc::MAP_FIXED, chunk.fd, 0)
        };
        if at == libc::MAP_FAILED { return GENERIC; }
        if let Some(c) = vm.chunks.get_mut(&handle) {
            c.mapped = true;
        }
        vm.mappings.insert(base, Mapping { size, handle, accessible: false });
        SUCCESS
    }
    fn cnMemSetAccess(ptr: u64, size: usize, desc: *const AccessDesc, count: usize) {
        if desc.is_null() || count != 1 { return INVALID; }
        // SAFETY: non-null; one descriptor by the prototype's contract.
        let d = unsafe { &*desc };
        // Read-write is 0 in CNDrv (CUDA's 3 is refused).
        if d.access_flags != 0 || d.location.type_ != 1 || (d.location.id as i32) >= config().devices { return INVALID; }
        let mut vm = vm().lock();
        let base = ptr as usize;
        let keys: Vec<usize> = vm.mappings.range(base..base + size).map(|(&k, _)| k).collect();
        let covered: usize = keys.iter().map(|k| vm.mappings[k].size).sum();
        if keys.first() != Some(&base) || covered != size { return INVALID; }
        // SAFETY: our own mapped range.
        if unsafe { libc::mprotect(base as *mut c_void, size, libc::PROT_READ | libc::PROT_WRITE) } != 0 { return GENERIC; }
        for k in keys {
            if let Some(m) = vm.mappings.get_mut(&k) {
                m.accessible = true;
            }
        }
        SUCCESS
    }
    fn cnMemUnmap(ptr: u64, size: usize) {
        let mut vm = vm().lock();
        let base = ptr as usize;
        // A whole mapped range only.
        let Some(m) = vm.mappings.get(&base) else { return INVALID; };
        if m.size != size { return INVALID; }
        // SAFETY: replaces our own mapping by address space without access,
        // keeping the reservation.
        let at = unsafe {
            libc::mmap(base as *mut c_void, size, libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED, -1, 0)
        };
        if at == libc::MAP_FAILED { return GENERIC; }
        let handle = m.handle;
        vm.mappings.remove(&base);
        let release = vm.chunks.get_mut(&handle).map(|c| { c.mapped = false; c.released }).unwrap_or(false);
        if release { drop_chunk(&mut vm, handle); }
        SUCCESS
    }
}

fn drop_chunk(vm: &mut Vm, handle: u64) {
    if let Some(c) = vm.chunks.remove(&handle) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(c.fd) };
        crate::rt::uncharge(c.device, c.size as u64);
    }
}
