//! The kernel library (`libdiopi_impl*.so`): found, opened with
//! `RTLD_NOW` (so a library needing a diopirt function the runtime lacks
//! is refused, naming it), and asked for operators by name.
//!
//! Search order of [`open_default`]: `DIPU_DIOPI_LIBRARY` (a path), else
//! `libdiopi_impl_<vendor>.so`, then `libdiopi_impl.so`, each looked for
//! beside the vendor plugin, or, for a built-in vendor, beside the library
//! holding the runtime (`libdipu_runtime.so`) and then beside the
//! executable.

use std::ffi::{c_char, c_void, CStr, CString};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dipu_runtime::{Error, ErrorKind, Result, VendorOrigin, VendorSpec};
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use parking_lot::Mutex;

/// The variable naming the kernel library's path.
pub const ENV_LIBRARY: &str = "DIPU_DIOPI_LIBRARY";

/// An open kernel library. It is never unloaded (as vendor plugins are
/// not): kernels queued on streams may still run its code after
/// [`close`], and frameworks keep the function pointers they looked up.
#[derive(Debug)]
pub struct KernelLibrary {
    path: PathBuf,
    lib: ManuallyDrop<Library>,
}

impl KernelLibrary {
    /// The file it was opened from (as found, made absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The address of the function `name` ("diopiAdd"), or `None` when
    /// the library does not define it: that means fall back, not an error.
    pub fn symbol(&self, name: &str) -> Option<*mut c_void> {
        let name = CString::new(name).ok()?;
        // SAFETY: looking a symbol up runs no code; the pointer is only
        // returned, never called here.
        let sym = unsafe { self.lib.get::<*mut c_void>(name.as_bytes_with_nul()) };
        sym.ok().map(|s| *s).filter(|p| !p.is_null())
    }

    /// The function `name` as the function pointer type `F` (e.g.
    /// `unsafe extern "C" fn(ContextHandle, TensorHandle, *const DiopiScalar) -> DiopiError`),
    /// or `None` when the library lacks it.
    ///
    /// # Safety
    /// `F` must be a function pointer type matching the C declaration of
    /// `name` in `include/diopi/functions.h` (or `functions_ext.h`); the pointer is valid while
    /// the library stays open (keep the `Arc`).
    pub unsafe fn function<F: Copy>(&self, name: &str) -> Option<F> {
        assert_eq!(
            size_of::<F>(),
            size_of::<*mut c_void>(),
            "F must be a function pointer"
        );
        let p = self.symbol(name)?;
        // SAFETY: same size (asserted); the type is the caller's contract.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// Calls the library's `const char *name(void)` getter
    /// (`diopiGetLastErrorString`, `diopiGetVendorName`, `diopiGetImplVersion`).
    fn string_getter(&self, name: &str) -> Option<String> {
        // SAFETY: DIOPI declares these three as `const char *f(void)`.
        let f = unsafe { self.function::<unsafe extern "C" fn() -> *const c_char>(name) }?;
        // SAFETY: calling the library's getter; it takes no arguments.
        let s = unsafe { f() };
        if s.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string the library keeps valid.
        Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }

    /// `diopiGetLastErrorString()` of the library (`None` if it has none).
    pub fn last_error(&self) -> Option<String> {
        self.string_getter("diopiGetLastErrorString")
    }

    /// `diopiGetVendorName()` of the library.
    pub fn vendor_name(&self) -> Option<String> {
        self.string_getter("diopiGetVendorName")
    }

    /// `diopiGetImplVersion()` of the library.
    pub fn impl_version(&self) -> Option<String> {
        self.string_getter("diopiGetImplVersion")
    }
}

/// The library open for the process (`open`, `open_default`, `close`).
static OPEN: Mutex<Option<Arc<KernelLibrary>>> = Mutex::new(None);

/// The library open now, if any.
pub fn current() -> Option<Arc<KernelLibrary>> {
    OPEN.lock().clone()
}

/// The library open now, or an error saying none is.
pub fn require_current() -> Result<Arc<KernelLibrary>> {
    current().ok_or_else(|| {
        Error::invalid_argument(
            "no DIOPI kernel library is open (call dipu_diopi_open first, or set DIPU_DIOPI_LIBRARY)",
        )
    })
}

/// Forgets the process's library (a no-op when none is open), so that
/// another one may be opened. The file stays mapped: function pointers
/// looked up before stay valid.
pub fn close() {
    let old = OPEN.lock().take();
    drop(old);
}

/// Opens the kernel library at `path` for the process (returned as is if
/// it is open already; an `InvalidArgument` error if another is).
pub fn open(path: &Path) -> Result<Arc<KernelLibrary>> {
    let mut open = OPEN.lock();
    if !path.exists() {
        return Err(Error::new(
            ErrorKind::VendorLibraryNotFound,
            format!("DIOPI kernel library {} does not exist", path.display()),
        ));
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    if let Some(lib) = open.as_ref() {
        if same_file(&lib.path, &absolute) {
            return Ok(Arc::clone(lib));
        }
        return Err(Error::invalid_argument(format!(
            "DIOPI kernel library {} is open: close it before opening {}",
            lib.path.display(),
            absolute.display()
        )));
    }
    let lib = Arc::new(load(&absolute)?);
    *open = Some(Arc::clone(&lib));
    Ok(lib)
}

/// Opens the process's library from [`ENV_LIBRARY`] or the vendor's
/// places (module docs); the error of a failed search names the library
/// and every place looked in.
pub fn open_default() -> Result<Arc<KernelLibrary>> {
    if let Some(path) = std::env::var_os(ENV_LIBRARY).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return open(&path).map_err(|e| e.context(format!("{ENV_LIBRARY}={}", path.display())));
    }
    let SearchPlaces {
        names,
        dirs: places,
    } = search_places()?;
    for name in &names {
        for (dir, _) in &places {
            let candidate = dir.join(name);
            if candidate.exists() {
                return open(&candidate);
            }
        }
    }
    let looked: Vec<String> = places
        .iter()
        .map(|(dir, why)| format!("{} ({why})", dir.display()))
        .collect();
    Err(Error::new(
        ErrorKind::VendorLibraryNotFound,
        format!(
            "no DIOPI kernel library found: looked for {} in {}; set {ENV_LIBRARY} to its path",
            names.join(" and "),
            looked.join(", ")
        ),
    ))
}

/// Where [`open_default`] looks when `DIPU_DIOPI_LIBRARY` is not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPlaces {
    /// File names, in order of preference.
    pub names: Vec<String>,
    /// Directories, in order, each with why it is searched.
    pub dirs: Vec<(PathBuf, &'static str)>,
}

/// The file names and the directories (with why each) of the search.
///
/// For the built-in host vendor the runtime is not started (a framework
/// opens the library at import, and a process that forks before it uses a
/// device must keep its runtime unstarted); any other vendor is loaded to
/// learn its name and file.
pub fn search_places() -> Result<SearchPlaces> {
    let host = !dipu_runtime::is_initialized()
        && matches!(VendorSpec::from_env(), Ok(VendorSpec::Name(ref n)) if n == "host");
    let (vendor, plugin) = if host {
        ("host".to_owned(), None)
    } else {
        let rt = dipu_runtime::get()?;
        let plugin = match rt.vendor_origin() {
            VendorOrigin::File(plugin) => Some(plugin.clone()),
            _ => None,
        };
        (rt.vendor_name().to_owned(), plugin)
    };
    let names = vec![
        format!("libdiopi_impl_{vendor}.so"),
        "libdiopi_impl.so".to_owned(),
    ];
    let mut places: Vec<(PathBuf, &'static str)> = Vec::new();
    let mut add = |dir: Option<PathBuf>, why| {
        if let Some(dir) = dir {
            if !places.iter().any(|(d, _)| d == &dir) {
                places.push((dir, why));
            }
        }
    };
    match plugin {
        Some(plugin) => {
            let plugin = std::path::absolute(&plugin).unwrap_or_else(|_| plugin.clone());
            add(
                plugin.parent().map(Path::to_owned),
                "beside the vendor plugin",
            );
        }
        None => {
            add(
                runtime_object().and_then(|p| p.parent().map(Path::to_owned)),
                "beside libdipu_runtime.so",
            );
            add(
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_owned)),
                "beside the executable",
            );
        }
    }
    Ok(SearchPlaces {
        names,
        dirs: places,
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The file (shared library or executable) that holds this crate's code.
fn runtime_object() -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; zeroed is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = crate::diopirt::diopiGetTensorData as *const c_void;
    // SAFETY: dladdr only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(addr, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string of the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(name.to_string_lossy().into_owned());
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

/// Makes the runtime's own exported symbols (diopirt and
/// `dipu_launch_host_func_raw`) visible to libraries opened later, also
/// when `libdipu_runtime.so` itself was opened `RTLD_LOCAL` (as Python
/// extension modules are): the library is opened again with
/// `RTLD_NOLOAD | RTLD_GLOBAL`, which only promotes it. For the main
/// executable nothing is needed (its dynamic symbols are global).
fn promote_runtime_symbols() {
    let Some(object) = runtime_object() else {
        return;
    };
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok());
    if exe.as_deref() == Some(object.as_path()) {
        return;
    }
    let Ok(c) = CString::new(object.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: RTLD_NOLOAD never loads or initialises anything: it returns
    // the already loaded library with its flags upgraded. The handle is
    // kept open on purpose (the library holds this very code).
    let handle = unsafe {
        libc::dlopen(
            c.as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_NOW | libc::RTLD_GLOBAL,
        )
    };
    if handle.is_null() {
        tracing::debug!("could not make {} RTLD_GLOBAL", object.display());
    }
}

/// dlopens `path` with RTLD_NOW | RTLD_LOCAL, explaining failures.
fn load(path: &Path) -> Result<KernelLibrary> {
    crate::diopirt::keep_exports();
    promote_runtime_symbols();
    // SAFETY: loading runs the library's initialisers; a DIOPI kernel
    // library is trusted code the user chose to run.
    match unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) } {
        Ok(lib) => Ok(KernelLibrary {
            path: path.to_owned(),
            lib: ManuallyDrop::new(lib),
        }),
        Err(e) => {
            let text = e.to_string();
            if let Some(at) = text.find("undefined symbol: ") {
                let sym = text[at + "undefined symbol: ".len()..]
                    .split(|c: char| c.is_whitespace() || c == ',' || c == ')')
                    .next()
                    .unwrap_or("");
                return Err(Error::new(
                    ErrorKind::AbiMismatch,
                    format!(
                        "DIOPI kernel library {} needs `{sym}`, which this runtime does not \
                         provide (it exports DIOPI 1.0's diopirt and dipu_launch_host_func_raw): {text}",
                        path.display()
                    ),
                ));
            }
            Err(Error::new(
                ErrorKind::NotAVendor,
                format!(
                    "cannot load DIOPI kernel library {}: {text}",
                    path.display()
                ),
            ))
        }
    }
}
