//! The fake CNRT: devices, the per-thread current device and default
//! queues, memory over the host's, queues, notifiers, host functions and
//! the per-thread sticky error.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::common::{config, copy_bytes, export, put, Handles};
use crate::queue::{Notifier, Queue, IN_HOST_FN};

pub(crate) const SUCCESS: c_int = 0;
pub(crate) const NOT_READY: c_int = 1;
pub(crate) const ARGS_INVALID: c_int = 100006;
pub(crate) const NO_MEM: c_int = 100100;
pub(crate) const UNKNOWN: c_int = 999991;

const DIR_H2D: c_int = 0;
const DIR_D2D: c_int = 1;
const DIR_D2H: c_int = 2;
const DIR_H2H: c_int = 3;
const DIR_P2P: c_int = 4;
const DIR_NONE: c_int = 5;
const TIMING_ALL_OFF: c_uint = 0x4;
/// Alignment of device allocations.
const ALIGN: usize = 512;

/// One allocation of the fake.
#[derive(Clone, Copy)]
struct Alloc {
    device: i32,
    size: usize,
    host: bool,
}

pub(crate) struct State {
    allocs: Mutex<BTreeMap<usize, Alloc>>,
    used: Mutex<Vec<u64>>,
    pub(crate) queues: Handles<Queue>,
    all_queues: Mutex<Vec<Weak<Queue>>>,
    notifiers: Handles<Notifier>,
}

pub(crate) fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| State {
        allocs: Mutex::new(BTreeMap::new()),
        used: Mutex::new(vec![0; config().devices as usize]),
        queues: Handles::new(1 << 36),
        all_queues: Mutex::new(Vec::new()),
        notifiers: Handles::new(1 << 37),
    })
}

/// A thread's default queues, destroyed when the thread ends.
struct Defaults(HashMap<i32, Arc<Queue>>);
impl Drop for Defaults {
    fn drop(&mut self) {
        for q in self.0.values() {
            q.destroy();
        }
    }
}

thread_local! {
    static CURRENT: Cell<i32> = const { Cell::new(0) };
    static LAST: Cell<c_int> = const { Cell::new(0) };
    static DEFAULTS: RefCell<Defaults> = RefCell::new(Defaults(HashMap::new()));
}

/// Makes a queue worker's device current on it.
pub(crate) fn set_worker_device(device: i32) {
    CURRENT.set(device);
}

/// The calling thread's current device.
pub(crate) fn current() -> i32 {
    CURRENT.get()
}

/// Records a failure as the thread's last (sticky) error.
fn after(code: c_int) -> c_int {
    if code != SUCCESS {
        LAST.set(code);
    }
    code
}

/// Device memory charged to `device`: `Err` when it does not fit.
pub(crate) fn charge(device: i32, bytes: u64) -> bool {
    let mut used = state().used.lock();
    let u = &mut used[device as usize];
    if u.saturating_add(bytes) > config().memory {
        return false;
    }
    *u += bytes;
    true
}

/// Returns `bytes` of `device`'s memory.
pub(crate) fn uncharge(device: i32, bytes: u64) {
    let mut used = state().used.lock();
    used[device as usize] = used[device as usize].saturating_sub(bytes);
}

/// Whether `ptr..ptr+len` is device memory: one `cnrtMalloc` allocation,
/// or virtual memory mapped with access set.
pub(crate) fn is_device(ptr: usize, len: usize) -> bool {
    let allocs = state().allocs.lock();
    if let Some((&base, a)) = allocs.range(..=ptr).next_back() {
        if !a.host && ptr + len <= base + a.size {
            return true;
        }
    }
    drop(allocs);
    crate::cndrv::is_accessible(ptr, len)
}

/// The queue of a handle: null is the calling thread's default queue on
/// its current device ("each host thread has its own default queue on
/// each device").
pub(crate) fn queue_of(handle: *mut c_void) -> Option<Arc<Queue>> {
    if handle.is_null() {
        let device = current();
        return Some(DEFAULTS.with(|d| {
            let mut d = d.borrow_mut();
            Arc::clone(d.0.entry(device).or_insert_with(|| {
                let q = Queue::new(device);
                state().all_queues.lock().push(Arc::downgrade(&q));
                q
            }))
        }));
    }
    state().queues.get(handle as usize)
}

fn valid_device(device: c_int) -> bool {
    (0..config().devices).contains(&device)
}

/// Checks a copy's direction against the pointers: the device side must be
/// device memory, the host side must not be.
fn check_copy(dst: usize, src: usize, bytes: usize, dir: c_int) -> bool {
    let (dst_dev, src_dev) = match dir {
        DIR_H2D => (true, false),
        DIR_D2H => (false, true),
        DIR_D2D | DIR_P2P => (true, true),
        DIR_H2H => (false, false),
        DIR_NONE => return true,
        _ => return false,
    };
    is_device(dst, bytes.max(1)) == dst_dev && is_device(src, bytes.max(1)) == src_dev
}

static NAMES: &[(c_int, &str, &str)] = &[
    (SUCCESS, "cnrtSuccess\0", "success\0"),
    (NOT_READY, "cnrtErrorNotReady\0", "work is still pending\0"),
    (ARGS_INVALID, "cnrtErrorArgsInvalid\0", "invalid argument\0"),
    (NO_MEM, "cnrtErrorNoMem\0", "out of memory\0"),
    (
        UNKNOWN,
        "cnrtErrorUnknown\0",
        "unknown error (injected by the fake)\0",
    ),
];

fn name_of(code: c_int, which: usize) -> *const c_char {
    let (_, n, s) = NAMES
        .iter()
        .find(|(c, _, _)| *c == code)
        .copied()
        .unwrap_or((0, "cnrtErrorUnknown\0", "unrecognised error code\0"));
    let text = if which == 0 { n } else { s };
    text.as_ptr().cast()
}

/// `cnrtGetErrorName` of the fake CNRT.
#[no_mangle]
pub extern "C" fn cnrtGetErrorName(error: c_int) -> *const c_char {
    name_of(error, 0)
}

/// `cnrtGetErrorStr` of the fake CNRT.
#[no_mangle]
pub extern "C" fn cnrtGetErrorStr(error: c_int) -> *const c_char {
    name_of(error, 1)
}

/// `cnrtGetLastError` of the fake CNRT: returns and clears the thread's
/// sticky error.
#[no_mangle]
pub extern "C" fn cnrtGetLastError() -> c_int {
    dipu_fakekit::trace::call("cnrtGetLastError", String::new);
    LAST.replace(SUCCESS)
}

/// `cnrtPeekAtLastError` of the fake CNRT: returns it without clearing.
#[no_mangle]
pub extern "C" fn cnrtPeekAtLastError() -> c_int {
    LAST.get()
}

/// Fails every CNRT call made from inside a host function.
fn in_host_fn() -> bool {
    IN_HOST_FN.get()
}

fn device_props(prop: *mut c_void, device: c_int, words: usize) -> c_int {
    if prop.is_null() || !valid_device(device) {
        return ARGS_INVALID;
    }
    let name = format!("Fake MLU370 {device} (dipu-fake-cambricon)");
    let mut bytes = vec![0u8; words * 8];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    // The 6.14 struct is large; write well past 256 bytes so a buffer of
    // the 6.0 size is visibly overrun under a checker.
    if words > 32 {
        bytes[words * 8 - 16..words * 8 - 8].copy_from_slice(&config().memory.to_ne_bytes());
    }
    copy_bytes(prop as usize, bytes.as_ptr() as usize, bytes.len());
    SUCCESS
}

export! { "CNRT", UNKNOWN, after;
    fn cnrtGetLibVersion(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) {
        if put(major, 6) && put(minor, 14) && put(patch, 1) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtGetDeviceCount(count: *mut c_uint) {
        if put(count, config().devices as c_uint) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtGetDevice(ordinal: *mut c_int) {
        if in_host_fn() { return UNKNOWN; }
        if put(ordinal, current()) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtSetDevice(ordinal: c_int) {
        if in_host_fn() { return UNKNOWN; }
        if !valid_device(ordinal) { return ARGS_INVALID; }
        CURRENT.set(ordinal);
        SUCCESS
    }
    fn cnrtSyncDevice() {
        if in_host_fn() { return UNKNOWN; }
        let device = current();
        let queues: Vec<_> = state().all_queues.lock().iter().filter_map(Weak::upgrade).collect();
        for q in queues.iter().filter(|q| q.device == device) {
            q.sync();
        }
        SUCCESS
    }
    fn cnrtDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) {
        if !valid_device(device) { return ARGS_INVALID; }
        let v = match attr {
            0x01 => 3,
            0x02 => 0,
            0x205 => 8,
            0x206 => 4,
            0x405 => (config().memory >> 20) as c_int,
            _ => return ARGS_INVALID,
        };
        if put(value, v) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtGetDeviceProperties(prop: *mut c_void, device: c_int) {
        device_props(prop, device, 32)
    }
    fn cnrtGetDeviceProperties_V3(prop: *mut c_void, device: c_int) {
        device_props(prop, device, 256)
    }
    fn cnrtMemGetInfo(free: *mut usize, total: *mut usize) {
        let used = state().used.lock()[current() as usize];
        let total_bytes = config().memory;
        if put(free, (total_bytes - used) as usize) && put(total, total_bytes as usize) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtMalloc(ptr: *mut *mut c_void, bytes: usize) {
        if ptr.is_null() || bytes == 0 { return ARGS_INVALID; }
        let device = current();
        if crate::common::oom() || !charge(device, bytes as u64) { return NO_MEM; }
        let Ok(layout) = std::alloc::Layout::from_size_align(bytes, ALIGN) else {
            uncharge(device, bytes as u64);
            return ARGS_INVALID;
        };
        // SAFETY: a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            uncharge(device, bytes as u64);
            return NO_MEM;
        }
        state().allocs.lock().insert(p as usize, Alloc { device, size: bytes, host: false });
        put(ptr, p.cast());
        SUCCESS
    }
    fn cnrtFree(ptr: *mut c_void) {
        free(ptr as usize, false)
    }
    fn cnrtHostMalloc(ptr: *mut *mut c_void, bytes: usize) {
        if ptr.is_null() || bytes == 0 { return ARGS_INVALID; }
        let Ok(layout) = std::alloc::Layout::from_size_align(bytes, ALIGN) else { return ARGS_INVALID; };
        // SAFETY: a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() { return NO_MEM; }
        state().allocs.lock().insert(p as usize, Alloc { device: -1, size: bytes, host: true });
        put(ptr, p.cast());
        SUCCESS
    }
    fn cnrtFreeHost(ptr: *mut c_void) {
        free(ptr as usize, true)
    }
    fn cnrtMemset(ptr: *mut c_void, value: c_int, bytes: usize) {
        if !is_device(ptr as usize, bytes.max(1)) { return ARGS_INVALID; }
        fill(ptr as usize, value, bytes);
        SUCCESS
    }
    fn cnrtMemsetAsync(ptr: *mut c_void, value: c_int, bytes: usize, queue: *mut c_void) {
        if !is_device(ptr as usize, bytes.max(1)) { return ARGS_INVALID; }
        let Some(q) = queue_of(queue) else { return ARGS_INVALID; };
        let p = ptr as usize;
        if q.push(Box::new(move || fill(p, value, bytes))) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtMemcpy(dst: *mut c_void, src: *mut c_void, bytes: usize, dir: c_int) {
        if !check_copy(dst as usize, src as usize, bytes, dir) { return ARGS_INVALID; }
        copy_bytes(dst as usize, src as usize, bytes);
        SUCCESS
    }
    fn cnrtMemcpyAsync(dst: *mut c_void, src: *mut c_void, bytes: usize, queue: *mut c_void, dir: c_int) {
        copy_async(dst as usize, src as usize, bytes, queue, dir)
    }
    fn cnrtMemcpyAsync_V2(dst: *mut c_void, src: *mut c_void, bytes: usize, queue: *mut c_void, dir: c_int) {
        copy_async(dst as usize, src as usize, bytes, queue, dir)
    }
    fn cnrtMemcpyPeer(dst: *mut c_void, dst_dev: c_int, src: *mut c_void, src_dev: c_int, bytes: usize) {
        if !valid_device(dst_dev) || !valid_device(src_dev) { return ARGS_INVALID; }
        if !check_copy(dst as usize, src as usize, bytes, DIR_P2P) { return ARGS_INVALID; }
        copy_bytes(dst as usize, src as usize, bytes);
        SUCCESS
    }
    fn cnrtMemcpyPeerAsync(dst: *mut c_void, dst_dev: c_int, src: *mut c_void, src_dev: c_int, bytes: usize, queue: *mut c_void) {
        if !valid_device(dst_dev) || !valid_device(src_dev) { return ARGS_INVALID; }
        copy_async(dst as usize, src as usize, bytes, queue, DIR_P2P)
    }
    fn cnrtDeviceGetQueuePriorityRange(least: *mut c_int, greatest: *mut c_int) {
        if put(least, 7) && put(greatest, 0) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtQueueCreate(queue: *mut *mut c_void) {
        create_queue(queue, 7)
    }
    fn cnrtQueueCreateWithPriority(queue: *mut *mut c_void, flags: c_uint, priority: c_int) {
        if flags != 0 { return ARGS_INVALID; }
        create_queue(queue, priority)
    }
    fn cnrtQueueDestroy(queue: *mut c_void) {
        if queue.is_null() { return ARGS_INVALID; }
        match state().queues.remove(queue as usize) {
            Some(q) => { q.destroy(); SUCCESS }
            None => ARGS_INVALID,
        }
    }
    fn cnrtQueueSync(queue: *mut c_void) {
        if in_host_fn() { return UNKNOWN; }
        let Some(q) = queue_of(queue) else { return ARGS_INVALID; };
        q.sync();
        SUCCESS
    }
    fn cnrtQueueQuery(queue: *mut c_void) {
        let Some(q) = queue_of(queue) else { return ARGS_INVALID; };
        if q.idle() { SUCCESS } else { NOT_READY }
    }
    fn cnrtQueueWaitNotifier(notifier: *mut c_void, queue: *mut c_void, flag: c_uint) {
        if flag != 0 { return ARGS_INVALID; }
        let (Some(n), Some(q)) = (state().notifiers.get(notifier as usize), queue_of(queue)) else {
            return ARGS_INVALID;
        };
        if !n.placed() { return SUCCESS; }
        if q.push(n.waiter()) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtInvokeHostFunc(queue: *mut c_void, func: Option<unsafe extern "C" fn(*mut c_void)>, data: *mut c_void) {
        let (Some(q), Some(func)) = (queue_of(queue), func) else { return ARGS_INVALID; };
        let data = data as usize;
        let task = move || {
            IN_HOST_FN.set(true);
            // SAFETY: the caller's function and data, called once.
            unsafe { func(data as *mut c_void) };
            IN_HOST_FN.set(false);
        };
        if q.push(Box::new(task)) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtNotifierCreate(notifier: *mut *mut c_void) {
        create_notifier(notifier, 0)
    }
    fn cnrtNotifierCreateWithFlags(notifier: *mut *mut c_void, flags: c_uint) {
        create_notifier(notifier, flags)
    }
    fn cnrtNotifierDestroy(notifier: *mut c_void) {
        let Some(n) = state().notifiers.get(notifier as usize) else { return ARGS_INVALID; };
        if n.device != current() { return ARGS_INVALID; }
        state().notifiers.remove(notifier as usize);
        SUCCESS
    }
    fn cnrtPlaceNotifier(notifier: *mut c_void, queue: *mut c_void) {
        let (Some(n), Some(q)) = (state().notifiers.get(notifier as usize), queue_of(queue)) else {
            return ARGS_INVALID;
        };
        if n.device != q.device { return ARGS_INVALID; }
        if n.place(&q) { SUCCESS } else { ARGS_INVALID }
    }
    fn cnrtQueryNotifier(notifier: *mut c_void) {
        let Some(n) = state().notifiers.get(notifier as usize) else { return ARGS_INVALID; };
        if n.is_done() { SUCCESS } else { NOT_READY }
    }
    fn cnrtWaitNotifier(notifier: *mut c_void) {
        if in_host_fn() { return UNKNOWN; }
        let Some(n) = state().notifiers.get(notifier as usize) else { return ARGS_INVALID; };
        n.wait();
        SUCCESS
    }
    fn cnrtNotifierElapsedTime(start: *mut c_void, end: *mut c_void, ms: *mut f32) {
        let (Some(s), Some(e)) = (state().notifiers.get(start as usize), state().notifiers.get(end as usize)) else {
            return ARGS_INVALID;
        };
        if !s.timing || !e.timing || !s.placed() || !e.placed() { return ARGS_INVALID; }
        let (Some(a), Some(b)) = (s.time(), e.time()) else { return NOT_READY; };
        let v = if b >= a { (b - a).as_secs_f32() * 1e3 } else { -((a - b).as_secs_f32() * 1e3) };
        if put(ms, v) { SUCCESS } else { ARGS_INVALID }
    }
}

fn free(ptr: usize, host: bool) -> c_int {
    if ptr == 0 {
        return SUCCESS;
    }
    let Some(a) = state().allocs.lock().get(&ptr).copied() else {
        return ARGS_INVALID;
    };
    if a.host != host {
        return ARGS_INVALID;
    }
    if !host {
        // Like cudaFree, wait for the device's queued work first.
        let queues: Vec<_> = state()
            .all_queues
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for q in queues.iter().filter(|q| q.device == a.device) {
            q.sync();
        }
    }
    state().allocs.lock().remove(&ptr);
    if !host {
        uncharge(a.device, a.size as u64);
    }
    let layout =
        std::alloc::Layout::from_size_align(a.size, ALIGN).expect("layout of a live allocation");
    // SAFETY: allocated above with this layout, removed from the registry once.
    unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
    SUCCESS
}

fn fill(ptr: usize, value: c_int, bytes: usize) {
    // SAFETY: checked to be device memory of at least `bytes` bytes.
    unsafe { std::ptr::write_bytes(ptr as *mut u8, value as u8, bytes) };
}

fn copy_async(dst: usize, src: usize, bytes: usize, queue: *mut c_void, dir: c_int) -> c_int {
    if !check_copy(dst, src, bytes, dir) {
        return ARGS_INVALID;
    }
    let Some(q) = queue_of(queue) else {
        return ARGS_INVALID;
    };
    if q.push(Box::new(move || copy_bytes(dst, src, bytes))) {
        SUCCESS
    } else {
        ARGS_INVALID
    }
}

fn create_queue(out: *mut *mut c_void, priority: c_int) -> c_int {
    if out.is_null() || !(0..=7).contains(&priority) {
        return ARGS_INVALID;
    }
    let q = Queue::new(current());
    state().all_queues.lock().push(Arc::downgrade(&q));
    let h = state().queues.insert(q);
    put(out, h as *mut c_void);
    SUCCESS
}

fn create_notifier(out: *mut *mut c_void, flags: c_uint) -> c_int {
    if out.is_null() || flags & !(0x2 | TIMING_ALL_OFF | 0x8) != 0 {
        return ARGS_INVALID;
    }
    let n = Notifier::new(current(), flags & TIMING_ALL_OFF == 0);
    let h = state().notifiers.insert(n);
    put(out, h as *mut c_void);
    SUCCESS
}
