//! Device and pinned host memory (host memory with a registry), fills and
//! copies, memory figures and peer access.

use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::entry::{code, fail, out, R};
use crate::state::{self, regions, Kind, Region};
use crate::streams::{of_device, resolve};

/// The alignment of every allocation: "内存首地址64字节对齐" (aclrtMalloc.md).
const ALIGN: usize = 64;

fn round_up(n: usize, to: usize) -> Option<usize> {
    n.checked_add(to - 1).map(|v| v / to * to)
}

fn layout(len: usize) -> R<Layout> {
    Layout::from_size_align(len.max(1), ALIGN).map_or_else(
        |_| {
            fail(
                code::RT_MEMORY_ALLOCATION,
                format!("{len} bytes is more than the host has"),
            )
        },
        Ok,
    )
}

/// `aclrtMalloc` (`pad`: "向上对齐成32字节整数倍后再多加32字节", aclrtMalloc.md)
/// or `aclrtMallocAlign32` (no extra 32 bytes). "size不能为0" (both docs).
pub(crate) fn malloc(ptr: *mut *mut c_void, size: usize, pad: bool) -> R {
    let device = state::current()?;
    if size == 0 {
        return fail(code::INVALID_PARAM, "size must not be 0");
    }
    let len = round_up(size, 32)
        .and_then(|n| n.checked_add(if pad { 32 } else { 0 }))
        .ok_or_else(|| crate::entry::Fail {
            code: code::INVALID_PARAM,
            message: format!("{size} bytes overflows"),
        })?;
    let dev = state::device(device)?;
    crate::entry::injected_oom()?;
    let total = crate::config::get().memory;
    let counted = len as u64;
    if dev.used.fetch_add(counted, Ordering::AcqRel) + counted > total {
        dev.used.fetch_sub(counted, Ordering::AcqRel);
        return fail(
            code::RT_MEMORY_ALLOCATION,
            format!("device {device} is out of memory ({len} bytes asked, {total} in all)"),
        );
    }
    // SAFETY: a non-zero size and a valid alignment.
    let p = unsafe { std::alloc::alloc(layout(len)?) };
    if p.is_null() {
        dev.used.fetch_sub(counted, Ordering::AcqRel);
        return fail(code::RT_MEMORY_ALLOCATION, "the host is out of memory");
    }
    regions().lock().insert(
        p as usize,
        Region {
            len,
            kind: Kind::Device { device, counted },
        },
    );
    out(ptr, p.cast(), "devPtr")
}

/// Memory freed while work was still queued on its device: released once
/// the device is idle. "本接口会立刻释放传入的内存，接口内部不会进行隐式的Device同步
/// 或流同步、也不会等待使用该内存的任务完成" (aclrtFree.md): the fake returns the
/// memory to the device's budget at once, and keeps the host bytes alive
/// only so that its own stream threads never touch freed memory.
fn graveyard() -> &'static Mutex<Vec<(i32, usize, Layout)>> {
    static GRAVE: OnceLock<Mutex<Vec<(i32, usize, Layout)>>> = OnceLock::new();
    GRAVE.get_or_init(Default::default)
}

/// Releases what the graveyard holds for idle devices.
pub(crate) fn drain_graveyard() {
    let mut grave = graveyard().lock();
    grave.retain(|&(device, p, layout)| {
        if of_device(device).iter().all(|s| s.idle()) {
            // SAFETY: allocated by `malloc` with this layout, freed once.
            unsafe { std::alloc::dealloc(p as *mut u8, layout) };
            false
        } else {
            true
        }
    });
}

/// `aclrtFree`: "如果传入的devPtr为空指针，本接口会返回报错" (aclrtFree.md).
pub(crate) fn free(ptr: *mut c_void) -> R {
    state::current()?;
    if ptr.is_null() {
        return fail(code::INVALID_PARAM, "devPtr is null");
    }
    let region = {
        let mut regions = regions().lock();
        match regions.get(&(ptr as usize)) {
            Some(Region {
                kind: Kind::Device { .. },
                ..
            }) => regions.remove(&(ptr as usize)),
            _ => None,
        }
    };
    let Some(Region {
        len,
        kind: Kind::Device { device, counted },
    }) = region
    else {
        return fail(
            code::INVALID_PARAM,
            format!("{ptr:p} is not memory from aclrtMalloc"),
        );
    };
    state::device(device)?
        .used
        .fetch_sub(counted, Ordering::AcqRel);
    let pending = of_device(device).iter().filter(|s| !s.idle()).count();
    if pending > 0 {
        crate::entry::trace(
            "aclrtFree",
            0,
            &format!("{pending} streams of device {device} still have work queued"),
        );
    }
    graveyard()
        .lock()
        .push((device, ptr as usize, layout(len)?));
    drain_graveyard();
    Ok(())
}

/// `aclrtMallocHost`.
pub(crate) fn malloc_host(ptr: *mut *mut c_void, size: usize) -> R {
    state::current()?;
    if size == 0 {
        return fail(code::INVALID_PARAM, "size must not be 0");
    }
    crate::entry::injected_oom()?;
    // SAFETY: a non-zero size and a valid alignment.
    let p = unsafe { std::alloc::alloc(layout(size)?) };
    if p.is_null() {
        return fail(code::RT_MEMORY_ALLOCATION, "the host is out of memory");
    }
    regions().lock().insert(
        p as usize,
        Region {
            len: size,
            kind: Kind::Host,
        },
    );
    out(ptr, p.cast(), "hostPtr")
}

/// `aclrtFreeHost`.
pub(crate) fn free_host(ptr: *mut c_void) -> R {
    state::current()?;
    let removed = {
        let mut regions = regions().lock();
        match regions.get(&(ptr as usize)) {
            Some(Region {
                kind: Kind::Host, ..
            }) => regions.remove(&(ptr as usize)),
            _ => None,
        }
    };
    let Some(region) = removed else {
        return fail(
            code::INVALID_PARAM,
            format!("{ptr:p} is not memory from aclrtMallocHost"),
        );
    };
    // SAFETY: allocated by `malloc_host` with this layout, freed once.
    unsafe { std::alloc::dealloc(ptr.cast(), layout(region.len)?) };
    Ok(())
}

/// `aclrtGetMemInfo` of the current device.
pub(crate) fn mem_info(free: *mut usize, total: *mut usize) -> R {
    let dev = state::device(state::current()?)?;
    let all = crate::config::get().memory;
    let used = dev.used.load(Ordering::Acquire).min(all);
    out(free, (all - used) as usize, "free")?;
    out(total, all as usize, "total")
}

/// Where a byte range is: a device, or the host.
fn place(ptr: *const c_void, len: usize, what: &str) -> R<Option<i32>> {
    if ptr.is_null() {
        return fail(code::INVALID_PARAM, format!("{what} is null"));
    }
    state::device_of(ptr as usize, len)
}

/// Checks a copy: sizes ("destMax：目的内存地址的最大内存长度", aclrtMemcpy.md), the
/// kind against the memory, and peer access between devices: "如果执行两个Device
/// 间的内存复制，需先调用aclrtDeviceCanAccessPeer接口…调用aclrtDeviceEnablePeerAccess
/// 接口开启两个Device间的数据交互功能" (aclrtMemcpy.md).
fn check_copy(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: i32) -> R {
    if count > dest_max {
        return fail(
            code::INVALID_PARAM,
            format!("count {count} exceeds destMax {dest_max}"),
        );
    }
    let (d, s) = (place(dst, count, "dst")?, place(src, count, "src")?);
    let expected = match kind {
        0 => (false, false),
        1 => (true, false),
        2 => (false, true),
        3 => (true, true),
        #[cfg(not(feature = "old-cann"))]
        4 => (d.is_some(), s.is_some()),
        _ => return fail(code::INVALID_PARAM, format!("unknown copy kind {kind}")),
    };
    if (d.is_some(), s.is_some()) != expected {
        return fail(
            code::RT_PARAM_INVALID,
            format!(
                "copy kind {kind} does not match the memory (dst on device: {}, src on device: {})",
                d.is_some(),
                s.is_some()
            ),
        );
    }
    if let (Some(a), Some(b)) = (d, s) {
        if a != b {
            let ab = state::device(a)?.peers.lock().contains(&b);
            let ba = state::device(b)?.peers.lock().contains(&a);
            if !(ab && ba) {
                return fail(
                    code::RT_FEATURE_NOT_SUPPORT,
                    format!(
                        "a copy between devices {b} and {a} needs peer access enabled both ways"
                    ),
                );
            }
        }
    }
    Ok(())
}

fn raw_copy(dst: usize, src: usize, count: usize) {
    // SAFETY: checked ranges the caller keeps alive (`copy` may overlap
    // for a copy onto itself).
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, count) };
}

/// `aclrtMemcpy`: "本接口会立刻进行内存复制，函数内部不会进行隐式的device同步或流同步"
/// (aclrtMemcpy.md).
pub(crate) fn memcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
) -> R {
    state::current()?;
    check_copy(dst, dest_max, src, count, kind)?;
    raw_copy(dst as usize, src as usize, count);
    Ok(())
}

/// `aclrtMemcpyAsync`: "本接口不支持异步Host内的内存复制功能，若传入的kind为
/// ACL_MEMCPY_HOST_TO_HOST时，接口返回报错ACL_ERROR_RT_FEATURE_NOT_SUPPORT"
/// (aclrtMemcpyAsync.md).
pub(crate) fn memcpy_async(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
    stream: *mut c_void,
) -> R {
    let s = resolve(stream)?;
    if kind == 0 {
        return fail(
            code::RT_FEATURE_NOT_SUPPORT,
            "asynchronous host-to-host copies are not supported",
        );
    }
    check_copy(dst, dest_max, src, count, kind)?;
    let (d, r) = (dst as usize, src as usize);
    s.enqueue(Box::new(move || raw_copy(d, r, count)))
}

fn check_fill(ptr: *mut c_void, max: usize, count: usize) -> R {
    if count > max {
        return fail(
            code::INVALID_PARAM,
            format!("count {count} exceeds maxCount {max}"),
        );
    }
    if place(ptr, count, "devPtr")?.is_none() {
        return fail(
            code::RT_PARAM_INVALID,
            format!("{ptr:p} is not device memory"),
        );
    }
    Ok(())
}

/// `aclrtMemset` (immediate, like `aclrtMemcpy`).
pub(crate) fn memset(ptr: *mut c_void, max: usize, value: i32, count: usize) -> R {
    state::current()?;
    check_fill(ptr, max, count)?;
    // SAFETY: a checked device range.
    unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), value as u8, count) };
    Ok(())
}

/// `aclrtMemsetAsync`.
pub(crate) fn memset_async(
    ptr: *mut c_void,
    max: usize,
    value: i32,
    count: usize,
    stream: *mut c_void,
) -> R {
    let s = resolve(stream)?;
    check_fill(ptr, max, count)?;
    let p = ptr as usize;
    s.enqueue(Box::new(move || {
        // SAFETY: a checked device range the caller keeps alive.
        unsafe { std::ptr::write_bytes(p as *mut u8, value as u8, count) }
    }))
}

/// `aclrtDeviceCanAccessPeer`: any two devices can (inject a failure of
/// it, or of `aclrtDeviceEnablePeerAccess`, to take the vendor's path
/// through the host).
pub(crate) fn can_access_peer(can: *mut i32, device: i32, peer: i32) -> R {
    state::device(device)?;
    state::device(peer)?;
    if device == peer {
        return fail(code::INVALID_PARAM, "a device and itself are not peers");
    }
    out(can, 1, "canAccessPeer")
}

/// `aclrtDeviceEnablePeerAccess` from the current device.
pub(crate) fn enable_peer(peer: i32, flags: u32) -> R {
    let me = state::current()?;
    state::device(peer)?;
    if flags != 0 {
        return fail(code::INVALID_PARAM, "flags must be 0");
    }
    if me == peer {
        return fail(
            code::RT_FEATURE_NOT_SUPPORT,
            format!("devices {me} and {peer} cannot be peers"),
        );
    }
    state::device(me)?.peers.lock().insert(peer);
    Ok(())
}
