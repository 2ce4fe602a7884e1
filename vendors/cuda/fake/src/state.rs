//! The one state the fake runtime, driver and NCCL share: devices with
//! their legacy default streams, allocations, streams, events, the virtual
//! address space and communicators.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::{Arc, OnceLock};

use dipu_fakekit::config::{number, Config};
use dipu_fakekit::handles::Table;
use dipu_fakekit::stream::{Event, Job, Worker};
use dipu_fakekit::vmem::Space;
use dipu_fakekit::{host, thread, trace};
use parking_lot::Mutex;

use crate::errors::*;
use crate::types::cudaStream_t;

/// One fake device.
#[derive(Debug)]
pub(crate) struct Device {
    /// The legacy default stream.
    pub(crate) legacy: Worker,
    /// Primary-context retains.
    pub(crate) retained: AtomicI32,
    /// Devices whose memory this one may access directly.
    pub(crate) peers: Mutex<Vec<i32>>,
}

/// A created stream.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) device: i32,
    pub(crate) worker: Worker,
    /// Created without `cudaStreamNonBlocking`: synchronises with the
    /// legacy default stream.
    pub(crate) blocking: bool,
}

/// Where a piece of memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mem {
    /// `cudaMalloc` memory of a device.
    Device(i32),
    /// Inside a reserved virtual range (driver API).
    Virtual,
    /// `cudaMallocHost` memory.
    Pinned,
    /// Anything else: pageable host memory.
    Pageable,
}

/// The fake's state.
#[derive(Debug)]
pub(crate) struct Fake {
    pub(crate) cfg: Config,
    /// `cudaRuntimeGetVersion`: 13050, or 12080 for the `.so.12` copy.
    pub(crate) runtime_version: i32,
    /// `cuDriverGetVersion`.
    pub(crate) driver_version: i32,
    pub(crate) devices: Vec<Device>,
    /// `cudaMalloc` blocks: start -> (bytes, device).
    pub(crate) device_mem: Mutex<BTreeMap<usize, (usize, i32)>>,
    /// `cudaMallocHost` blocks: start -> bytes.
    pub(crate) pinned: Mutex<BTreeMap<usize, usize>>,
    pub(crate) streams: Table<Stream>,
    /// Destroyed streams, until their queued work is done.
    pub(crate) retired: Mutex<Vec<Arc<Stream>>>,
    pub(crate) events: Table<Event>,
    pub(crate) vm: Space,
    pub(crate) driver_initialised: AtomicBool,
}

/// The fake's state, made on first use.
pub(crate) fn fake() -> &'static Fake {
    static FAKE: OnceLock<Fake> = OnceLock::new();
    FAKE.get_or_init(|| {
        let cfg = Config::from_env();
        let devices = (0..cfg.devices)
            .map(|d| Device {
                legacy: Worker::new(&format!("fake-cuda-legacy-{d}"), cfg.latency),
                retained: AtomicI32::new(0),
                peers: Mutex::new(Vec::new()),
            })
            .collect();
        Fake {
            runtime_version: if loaded_as_cuda12() { 12080 } else { 13050 },
            driver_version: driver_version(),
            devices,
            device_mem: Mutex::new(BTreeMap::new()),
            pinned: Mutex::new(BTreeMap::new()),
            streams: Table::new(0x5_0000_0000),
            retired: Mutex::new(Vec::new()),
            events: Table::new(0xE_0000_0000),
            vm: Space::new(),
            driver_initialised: AtomicBool::new(false),
            cfg,
        }
    })
}

/// `DIPU_FAKE_CUDA_DRIVER_VERSION` as CUDA's integer (`12.8` is 12080).
fn driver_version() -> i32 {
    let Ok(v) = std::env::var(crate::ENV_DRIVER_VERSION) else {
        return 13050;
    };
    if let Some((major, minor)) = v.trim().split_once('.') {
        if let (Ok(a), Ok(b)) = (major.parse::<i32>(), minor.parse::<i32>()) {
            return a * 1000 + b * 10;
        }
    }
    number(crate::ENV_DRIVER_VERSION, 13050) as i32
}

/// Whether this object was loaded from a file named `libcudart.so.12`.
fn loaded_as_cuda12() -> bool {
    static PROBE: u8 = 0;
    // SAFETY: Dl_info is plain data; dladdr fills it for an address of
    // this object and returns a name owned by the dynamic linker.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(std::ptr::addr_of!(PROBE).cast(), &mut info) == 0
            || info.dli_fname.is_null()
        {
            return false;
        }
        std::ffi::CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .ends_with("libcudart.so.12")
    }
}

thread_local! {
    /// The runtime's last error of this thread.
    static LAST_ERROR: Cell<i32> = const { Cell::new(0) };
    /// The driver's current context of this thread (0: none).
    static CONTEXT: Cell<usize> = const { Cell::new(0) };
}

/// The runtime's last error: returned, and reset when `reset`.
pub(crate) fn last_error(reset: bool) -> i32 {
    LAST_ERROR.with(|e| if reset { e.replace(0) } else { e.get() })
}

/// The primary context handle of `device`.
pub(crate) fn primary(device: i32) -> usize {
    0xC7_0000 + device as usize * 0x100
}

/// The device of a primary context handle.
pub(crate) fn context_device(ctx: usize) -> Option<i32> {
    let d = ctx.checked_sub(0xC7_0000)?;
    (d % 0x100 == 0 && d / 0x100 < fake().devices.len()).then_some((d / 0x100) as i32)
}

/// The calling thread's current context (0: none).
pub(crate) fn current_context() -> usize {
    CONTEXT.with(Cell::get)
}

/// Makes `ctx` the calling thread's current context.
pub(crate) fn set_context(ctx: usize) {
    CONTEXT.with(|c| c.set(ctx));
}

/// The runtime's current device of this thread (0 until set).
pub(crate) fn current_device() -> i32 {
    thread::current_device().unwrap_or(0)
}

/// Runs the runtime call `name`: traces it, refuses it in a forked child,
/// inside a host function, or on a driver too old for this runtime, fails
/// it as `DIPU_FAKE_FAULTS` says, and records a failure as the thread's
/// last error.
pub(crate) fn rt(
    name: &str,
    args: impl FnOnce() -> String,
    body: impl FnOnce(&'static Fake) -> Result<(), i32>,
) -> i32 {
    trace::call(name, args);
    let code = match rt_guard(name) {
        Err(code) => code,
        Ok(f) => body(f).err().unwrap_or(cudaSuccess),
    };
    if code != cudaSuccess {
        LAST_ERROR.with(|e| e.set(code));
    }
    code
}

fn rt_guard(name: &str) -> Result<&'static Fake, i32> {
    // "The host function must not make any CUDA API calls. Attempting to
    // use a CUDA API may result in cudaErrorNotPermitted" (cudaLaunchHostFunc).
    if host::in_callback() {
        return Err(cudaErrorNotPermitted);
    }
    if thread::forked() {
        return Err(cudaErrorInitializationError);
    }
    let f = fake();
    // A runtime needs a driver of at least its own CUDA version.
    let needed = f.runtime_version / 1000 * 1000;
    if f.driver_version < needed {
        return Err(cudaErrorInsufficientDriver);
    }
    if let Some(code) = f.cfg.faults.fail(name) {
        return Err(code);
    }
    thread::mark_initialised();
    Ok(f)
}

/// A queue work can be submitted to.
pub(crate) enum Queue {
    /// The legacy default stream of a device.
    Legacy(i32),
    /// A created stream.
    Created(Arc<Stream>),
}

impl Fake {
    /// The queue `stream` names: null (or `cudaStreamLegacy`,
    /// `cudaStreamPerThread`) is the current device's legacy stream.
    pub(crate) fn queue(&self, stream: cudaStream_t) -> Result<Queue, i32> {
        let raw = stream as usize;
        if raw <= 2 {
            return Ok(Queue::Legacy(current_device()));
        }
        self.streams
            .get(raw)
            .map(Queue::Created)
            .ok_or(cudaErrorInvalidResourceHandle)
    }

    /// The worker of a queue.
    pub(crate) fn worker<'a>(&'a self, q: &'a Queue) -> &'a Worker {
        match q {
            Queue::Legacy(d) => &self.devices[*d as usize].legacy,
            Queue::Created(s) => &s.worker,
        }
    }

    /// Queues `job` on `q`, after what it must wait for: "The legacy
    /// default stream ... implicitly synchronizes with all other blocking
    /// streams in the same CUDA context" (non-blocking streams excepted).
    pub(crate) fn submit(&'static self, q: &Queue, job: Job) -> u64 {
        let waits: Vec<(Arc<Stream>, u64)> = match q {
            Queue::Legacy(d) => self
                .streams
                .all()
                .into_iter()
                .filter(|s| s.blocking && s.device == *d)
                .map(|s| {
                    let t = s.worker.last();
                    (s, t)
                })
                .collect(),
            Queue::Created(s) if s.blocking => {
                let legacy = &self.devices[s.device as usize].legacy;
                let t = legacy.last();
                return s.worker.submit(Box::new(move || {
                    legacy.wait(t);
                    job()
                }));
            }
            Queue::Created(_) => Vec::new(),
        };
        self.worker(q).submit(Box::new(move || {
            for (s, t) in waits {
                s.worker.wait(t);
            }
            job()
        }))
    }

    /// Waits for every queue of `device` to pass what is queued now.
    pub(crate) fn drain_device(&self, device: i32) {
        self.devices[device as usize].legacy.drain();
        let retired = self.retired.lock().clone();
        for s in self.streams.all().into_iter().chain(retired) {
            if s.device == device {
                s.worker.drain();
            }
        }
        self.retired.lock().retain(|s| !s.worker.idle());
    }

    /// Bytes in use on `device`.
    pub(crate) fn used(&self, device: i32) -> u64 {
        let blocks: u64 = self
            .device_mem
            .lock()
            .values()
            .filter(|b| b.1 == device)
            .map(|b| b.0 as u64)
            .sum();
        blocks + self.vm.bytes_on(device)
    }

    /// Whether `device` is a valid ordinal.
    pub(crate) fn valid(&self, device: i32) -> bool {
        (0..self.devices.len() as i32).contains(&device)
    }

    /// Where `ptr..ptr + len` is.
    pub(crate) fn classify(&self, ptr: usize, len: usize) -> Mem {
        let inside = |m: &BTreeMap<usize, usize>| {
            m.range(..=ptr)
                .next_back()
                .is_some_and(|(&s, &n)| ptr + len <= s + n)
        };
        if let Some((&s, &(n, d))) = self.device_mem.lock().range(..=ptr).next_back() {
            if ptr + len <= s + n {
                return Mem::Device(d);
            }
        }
        if self.vm.access(ptr, len, -1, false).is_some() {
            return Mem::Virtual;
        }
        if inside(&self.pinned.lock()) {
            return Mem::Pinned;
        }
        Mem::Pageable
    }

    /// Checks that `device` may touch `ptr..ptr + len` as device memory:
    /// `cudaErrorInvalidValue` for memory that is not a device's, and
    /// `cudaErrorIllegalAddress` for a virtual mapping `device` was given
    /// no access to ("... only the devices given access may touch it").
    pub(crate) fn device_side(
        &self,
        ptr: usize,
        len: usize,
        device: i32,
        write: bool,
    ) -> Result<(), i32> {
        match self.classify(ptr, len) {
            Mem::Device(_) | Mem::Pinned => Ok(()),
            Mem::Virtual => match self.vm.access(ptr, len, device, write) {
                Some(true) => Ok(()),
                _ => Err(cudaErrorIllegalAddress),
            },
            Mem::Pageable => Err(cudaErrorInvalidValue),
        }
    }
}

/// A raw address that may cross to a worker thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr(pub(crate) usize);

impl Addr {
    /// Copies `len` bytes from `src` to `self`.
    ///
    /// # Safety
    /// Both ranges are live and accessible for `len` bytes.
    pub(crate) unsafe fn copy_from(self, src: Addr, len: usize) {
        // SAFETY: by the caller's contract; ranges may overlap.
        unsafe { std::ptr::copy(src.0 as *const u8, self.0 as *mut u8, len) }
    }
}
