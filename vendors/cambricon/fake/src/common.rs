//! Configuration, the call trace, injected faults and the panic guard of
//! every exported function.

use std::collections::HashMap;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// The fake's configuration, from the environment.
pub(crate) struct Config {
    pub(crate) devices: i32,
    pub(crate) memory: u64,
    pub(crate) latency_us: u64,
    pub(crate) vmm: bool,
    trace: Option<Mutex<std::fs::File>>,
    faults: HashMap<String, u64>,
    calls: Mutex<HashMap<&'static str, u64>>,
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The configuration, read on first use.
pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let mut faults = HashMap::new();
        let mut vmm = true;
        for spec in std::env::var("DIPU_FAKE_FAULTS")
            .unwrap_or_default()
            .split(',')
        {
            let spec = spec.trim();
            if spec == "vmm=0" {
                vmm = false;
            } else if let Some((name, n)) = spec.split_once('@') {
                if let Ok(n) = n.parse() {
                    faults.insert(name.to_owned(), n);
                }
            }
        }
        let trace = std::env::var_os("DIPU_FAKE_TRACE")
            .filter(|p| !p.is_empty())
            .and_then(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .ok()
            })
            .map(Mutex::new);
        Config {
            devices: env_num("DIPU_FAKE_DEVICES", 2).clamp(1, 64) as i32,
            memory: env_num("DIPU_FAKE_MEMORY", 4 << 30),
            latency_us: env_num("DIPU_FAKE_LATENCY_US", 0),
            vmm,
            trace,
            faults,
            calls: Mutex::new(HashMap::new()),
        }
    })
}

/// Records a call of `name` in the trace; `true` when an injected fault
/// makes this call fail.
pub(crate) fn enter(name: &'static str) -> bool {
    let cfg = config();
    let n = {
        let mut calls = cfg.calls.lock();
        let n = calls.entry(name).or_insert(0);
        *n += 1;
        *n
    };
    let fail = cfg.faults.get(name) == Some(&n);
    if let Some(trace) = &cfg.trace {
        let thread = std::thread::current();
        let _ = writeln!(
            trace.lock(),
            "{name} #{n} thread={:?}{}",
            thread.id(),
            if fail { " FAULT" } else { "" }
        );
    }
    fail
}

/// Runs `body` for exported function `name`: traced, failing with `fault`
/// when injected, and returning `panicked` if it panics (no panic crosses
/// the C boundary).
pub(crate) fn guard(
    name: &'static str,
    fault: i32,
    panicked: i32,
    body: impl FnOnce() -> i32,
) -> i32 {
    if enter(name) {
        return fault;
    }
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(panicked)
}

/// A handle table: opaque 64-bit handles to shared objects. Handles start
/// high (above 2^32) so that a caller truncating them to 32 bits fails.
pub(crate) struct Handles<T> {
    next: Mutex<u64>,
    map: Mutex<HashMap<u64, std::sync::Arc<T>>>,
}

impl<T> Handles<T> {
    pub(crate) fn new(base: u64) -> Self {
        Handles {
            next: Mutex::new(base),
            map: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn insert(&self, value: std::sync::Arc<T>) -> u64 {
        let mut next = self.next.lock();
        *next += 0x10;
        self.map.lock().insert(*next, value);
        *next
    }

    pub(crate) fn get(&self, handle: u64) -> Option<std::sync::Arc<T>> {
        self.map.lock().get(&handle).cloned()
    }

    pub(crate) fn remove(&self, handle: u64) -> Option<std::sync::Arc<T>> {
        self.map.lock().remove(&handle)
    }
}

/// A 64-bit FNV-1a hash (the clique id's hash).
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Writes `value` through `out`; `false` for a null pointer.
pub(crate) fn put<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: non-null; the C prototype makes `out` a valid, aligned
    // out-pointer of this type.
    unsafe { out.write(value) };
    true
}

/// Copies `bytes` bytes from `src` to `dst` (ranges may overlap).
pub(crate) fn copy_bytes(dst: usize, src: usize, bytes: usize) {
    if bytes == 0 || dst == src {
        return;
    }
    // SAFETY: the caller checked both ranges are live memory of the fake's
    // (device memory) or the caller's (host memory) for `bytes` bytes.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
}

/// Declares exported C functions of one library: each is traced, can be
/// failed by an injected fault, catches panics, and passes its result to
/// `$after` (CNRT records it as the thread's last error).
macro_rules! export {
    ($lib:literal, $fault:expr, $after:path;
     $(fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block)*) => {$(
        #[doc = concat!("`", stringify!($name), "` of the fake ", $lib, ".")]
        ///
        /// # Safety
        /// The contract of its C prototype in `dipu_cambricon_api.h`.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> std::ffi::c_int {
            let code = $crate::common::guard(stringify!($name), $fault, $fault, || $body);
            $after(code)
        }
    )*};
}
pub(crate) use export;
