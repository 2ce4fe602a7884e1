//! The C ABI's allocate+free pair for `dipu bench alloc`: `dipu_malloc` +
//! `dipu_free` called through `libdipu_runtime.so`, opened at run time as
//! a C framework links it, beside the same allocator's own pair and the
//! system allocator's pair, in the same run: one thread; two threads on
//! one device; two threads each on its own device.

use std::ffi::{c_char, c_void, CStr};
use std::hint::black_box;
use std::path::{Path, PathBuf};

use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig, DeviceAllocator};
use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, Stream};

use super::{human, measure, ratio_text, system_pair, SIZES};

/// `dipu_stream` of `include/dipu_runtime.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct CStream {
    device: i32,
    id: u32,
    raw: u64,
}

/// `dipu_options` of `include/dipu_runtime.h` (NULL fields: from the environment).
#[repr(C)]
struct COptions {
    vendor: *const c_char,
    device_algorithm: *const c_char,
    alloc_conf: *const c_char,
    host_algorithm: *const c_char,
}

type Malloc = unsafe extern "C" fn(usize, CStream, *mut *mut c_void) -> i32;
type Free = unsafe extern "C" fn(*mut c_void) -> i32;
type FromPool = unsafe extern "C" fn(i32, i32, *mut CStream) -> i32;
type Init = unsafe extern "C" fn(*const COptions) -> i32;
type Shutdown = unsafe extern "C" fn(*mut c_void) -> i32;
type LastError = unsafe extern "C" fn() -> *const c_char;

/// The functions the bench calls, and the library that holds them.
struct CApi {
    malloc: Malloc,
    free: Free,
    from_pool: FromPool,
    init: Init,
    shutdown: Shutdown,
    last_error: LastError,
    _lib: libloading::Library,
}

impl CApi {
    /// Opens `path` and looks the functions up.
    fn open(path: &Path) -> Result<CApi> {
        let err = |e: libloading::Error| {
            Error::new(
                ErrorKind::VendorLibraryNotFound,
                format!("{}: {e}", path.display()),
            )
        };
        // SAFETY: libdipu_runtime.so's initialisers only set up Rust
        // statics; it is the C ABI library this repository builds.
        let lib = unsafe { libloading::Library::new(path) }.map_err(err)?;
        // SAFETY: each symbol has the C signature of include/dipu_runtime.h
        // that its type spells; the pointers are used only while `_lib`
        // keeps the library loaded.
        unsafe {
            Ok(CApi {
                malloc: *lib.get::<Malloc>(b"dipu_malloc\0").map_err(err)?,
                free: *lib.get::<Free>(b"dipu_free\0").map_err(err)?,
                from_pool: *lib
                    .get::<FromPool>(b"dipu_stream_from_pool\0")
                    .map_err(err)?,
                init: *lib.get::<Init>(b"dipu_init\0").map_err(err)?,
                shutdown: *lib.get::<Shutdown>(b"dipu_shutdown\0").map_err(err)?,
                last_error: *lib
                    .get::<LastError>(b"dipu_last_error_message\0")
                    .map_err(err)?,
                _lib: lib,
            })
        }
    }

    /// `Ok` for `DIPU_OK`, else the library's last error message.
    fn check(&self, status: i32, what: &str) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: the function returns a valid NUL-terminated string.
        let message = unsafe { CStr::from_ptr((self.last_error)()) };
        Err(Error::new(
            ErrorKind::Internal,
            format!("{what}: status {status}: {}", message.to_string_lossy()),
        ))
    }

    /// A pooled stream of `device`.
    fn stream(&self, device: i32) -> Result<CStream> {
        let mut s = CStream::default();
        // SAFETY: `s` is valid for writing a dipu_stream.
        let status = unsafe { (self.from_pool)(device, 0, &mut s) };
        self.check(status, "dipu_stream_from_pool")?;
        Ok(s)
    }
}

/// Where `libdipu_runtime.so` is: `given`, else next to the `dipu` binary
/// (target/<profile>/ after `cargo build -p dipu-ffi`).
pub(crate) fn library_path(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_owned());
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("libdipu_runtime.so")).filter(|p| p.exists())
}

/// Measurements of each pair per figure (alternating), the median kept.
pub(super) const REPEATS: usize = 3;

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The thread layouts: (threads, devices).
const LAYOUTS: [(usize, usize); 3] = [(1, 1), (2, 1), (2, 2)];

/// Prints the C ABI table: the system pair, BF's own pair and the C ABI
/// pair (BF, set through `dipu_options`) per size and layout, with the C
/// pair's ratios to both and each device pair's per-thread throughput
/// against its one-thread figure.
pub(super) fn run(ctx: &'static DeviceContext, lib: &Path, iterations: u32) -> Result<()> {
    let api = CApi::open(lib)?;
    let bf = c"BF";
    let options = COptions {
        vendor: std::ptr::null(),
        device_algorithm: bf.as_ptr(),
        alloc_conf: std::ptr::null(),
        host_algorithm: std::ptr::null(),
    };
    // SAFETY: `options` is valid; its NULL fields mean "from the environment".
    api.check(unsafe { (api.init)(&options) }, "dipu_init")?;
    let result = table(ctx, &api, iterations);
    // SAFETY: NULL asks for no report.
    let shutdown = api.check(
        unsafe { (api.shutdown)(std::ptr::null_mut()) },
        "dipu_shutdown",
    );
    result.and(shutdown)
}

fn table(ctx: &'static DeviceContext, api: &CApi, iterations: u32) -> Result<()> {
    crate::outln!(
        "{:>8} {:>7} {:>7}  {:>9} {:>9} {:>9} {:>7} {:>7}  {:>10} {:>10}",
        "size",
        "threads",
        "devices",
        "sys",
        "BF(own)",
        "C-ABI",
        "C/own",
        "C/sys",
        "own x1thr",
        "C x1thr"
    );
    // Device d's thread t: its stream (own pair) and C stream.
    let own_streams: Vec<Stream> = vec![
        ctx.stream_from_pool(0, false)?,
        ctx.stream_from_pool(0, false)?,
        ctx.stream_from_pool(1, false)?,
    ];
    let c_streams = [api.stream(0)?, api.stream(0)?, api.stream(1)?];
    let config = AllocatorConfig::default();
    for size in SIZES {
        let mut single = (f64::NAN, f64::NAN);
        for (threads, devices) in LAYOUTS {
            // Thread t's stream index: one device: 0, 1; two devices: 0, 2.
            let pick = |t: usize| if devices == 2 && t == 1 { 2 } else { t };
            let allocs: Vec<Box<dyn DeviceAllocator>> = (0..devices as i32)
                .map(|d| new_device_allocator(ctx, d, Algorithm::BestFit, &config))
                .collect::<Result<_>>()?;
            let own = |t: usize| -> Result<()> {
                let s = own_streams[pick(t)];
                let alloc = &allocs[s.device() as usize];
                let a = alloc.allocate(size, s)?;
                alloc.free(black_box(a.ptr))
            };
            let c = |t: usize| -> Result<()> {
                let mut p = std::ptr::null_mut();
                // SAFETY: `p` is valid for writing a pointer.
                let status = unsafe { (api.malloc)(size, c_streams[pick(t)], &mut p) };
                api.check(status, "dipu_malloc")?;
                // SAFETY: `p` came from dipu_malloc and is freed once.
                api.check(unsafe { (api.free)(black_box(p)) }, "dipu_free")
            };
            // Alternated, the order swapped each repetition, medians kept:
            // the load of a shared machine drifts between figures.
            let (mut owns, mut cs, mut systems) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..REPEATS {
                systems.push(system_pair(size, threads, iterations)?);
                if r % 2 == 1 {
                    cs.push(measure(threads, iterations, &c, &|| 0)?.0);
                }
                owns.push(measure(threads, iterations, &own, &|| 0)?.0);
                if r % 2 == 0 {
                    cs.push(measure(threads, iterations, &c, &|| 0)?.0);
                }
            }
            let (own_ns, c_ns, sys_ns) = (median(owns), median(cs), median(systems));
            for s in &own_streams {
                s.synchronize()?;
            }
            for a in &allocs {
                a.empty_cache()?;
            }
            if threads == 1 {
                single = (own_ns, c_ns);
            }
            crate::outln!(
                "{:>8} {:>7} {:>7}  {:>9.1} {:>9.1} {:>9.1} {:>7} {:>7}  {:>10} {:>10}",
                human(size),
                threads,
                devices,
                sys_ns,
                own_ns,
                c_ns,
                ratio_text(c_ns / own_ns),
                ratio_text(c_ns / sys_ns),
                ratio_text(single.0 / own_ns),
                ratio_text(single.1 / c_ns)
            );
        }
    }
    Ok(())
}
