//! Finds and loads a vendor: built into the program, by name, or by path.
//!
//! A name `x` resolves to `libdipu_vendor_x.so`, looked up in
//! `DIPU_VENDOR_PATH` (a `:`-separated list of directories), then next to
//! the running executable, then on the system's library search path. A
//! spec containing `/` or ending in `.so` is a path and loads that file.
//! Loaded libraries are never unloaded.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::plugin::abi::{
    DipuVendorError, DipuVendorVTable, DIPU_VENDOR_ABI_MAJOR, ENTRY_ABI_VERSION, ENTRY_CREATE,
};
use crate::plugin::import::PluginVendor;
use crate::{DeviceApi, Error, ErrorKind, Result};

/// Environment variable naming the vendor (default `host`).
pub const ENV_VENDOR: &str = "DIPU_VENDOR";
/// Environment variable with extra directories to search for vendor plugins.
pub const ENV_VENDOR_PATH: &str = "DIPU_VENDOR_PATH";
/// DIPU's name for the vendor, accepted as an alias of `DIPU_VENDOR`.
pub const ENV_DEVICE: &str = "DIPU_DEVICE";

/// `DIPU_DEVICE`'s values (DIPU's device names) and the vendors they name.
pub const DEVICE_NAMES: [(&str, &str); 3] = [
    ("cuda", "cuda"),
    ("camb", "cambricon"),
    ("ascend", "ascend"),
];

/// Which vendor to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VendorSpec {
    /// A vendor name: built in, or `libdipu_vendor_<name>.so` on the search path.
    Name(String),
    /// A plugin file.
    Path(PathBuf),
}

impl VendorSpec {
    /// Reads a spec as a user writes it: a path if it contains `/` or ends
    /// in `.so`, a name otherwise.
    pub fn parse(spec: &str) -> Result<VendorSpec> {
        let spec = spec.trim();
        if spec.contains('/') || spec.ends_with(".so") {
            return Ok(VendorSpec::Path(PathBuf::from(spec)));
        }
        let valid = !spec.is_empty()
            && spec
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "vendor name {spec:?} is not valid: use letters, digits, `_` and `-` \
                     (e.g. `host`, `cuda`) or a path to a plugin file"
                ),
            ));
        }
        Ok(VendorSpec::Name(spec.to_owned()))
    }

    /// The spec from `DIPU_VENDOR`, else from `DIPU_DEVICE` (DIPU's
    /// names: `cuda`, `camb`, `ascend`), else `host`.
    pub fn from_env() -> Result<VendorSpec> {
        let read = |name: &str| match std::env::var(name) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("{name} is not valid UTF-8"),
            )),
        };
        VendorSpec::from_values(read(ENV_VENDOR)?.as_deref(), read(ENV_DEVICE)?.as_deref())
    }

    /// The spec from the values of `DIPU_VENDOR` and `DIPU_DEVICE`. An
    /// unknown `DIPU_DEVICE` is an error listing the valid ones; so are the
    /// two naming different vendors.
    pub fn from_values(vendor: Option<&str>, device: Option<&str>) -> Result<VendorSpec> {
        let from_device = match device {
            None => None,
            Some(value) => {
                let name = DEVICE_NAMES
                    .iter()
                    .find(|(d, _)| *d == value.trim())
                    .map(|(_, v)| *v)
                    .ok_or_else(|| {
                        let valid: Vec<&str> = DEVICE_NAMES.iter().map(|(d, _)| *d).collect();
                        Error::new(
                            ErrorKind::InvalidConfig,
                            format!(
                                "{ENV_DEVICE}={value:?} is not a device DIPU knows: use one of {} \
                                 (or set {ENV_VENDOR} to a vendor name or plugin file)",
                                valid.join(", ")
                            ),
                        )
                    })?;
                Some(VendorSpec::Name(name.to_owned()))
            }
        };
        let from_vendor = match vendor {
            None => None,
            Some(value) => Some(VendorSpec::parse(value).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("{ENV_VENDOR}={value:?}: {}", e.message()),
                )
            })?),
        };
        match (from_vendor, from_device) {
            (Some(v), Some(d)) if v != d => Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{ENV_VENDOR}={vendor:?} and {ENV_DEVICE}={device:?} name different vendors \
                     ({v} and {d}): unset one"
                ),
            )),
            (Some(v), _) | (None, Some(v)) => Ok(v),
            (None, None) => Ok(VendorSpec::Name("host".to_owned())),
        }
    }
}

impl fmt::Display for VendorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VendorSpec::Name(n) => f.write_str(n),
            VendorSpec::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Where a loaded vendor came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VendorOrigin {
    /// Built into the program.
    Builtin,
    /// Loaded from this plugin file.
    File(PathBuf),
}

impl fmt::Display for VendorOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VendorOrigin::Builtin => f.write_str("built in"),
            VendorOrigin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A vendor ready for use, and where it came from.
#[derive(Clone)]
pub struct LoadedVendor {
    /// The vendor.
    pub api: Arc<dyn DeviceApi>,
    /// Where it came from.
    pub origin: VendorOrigin,
}

impl fmt::Debug for LoadedVendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedVendor")
            .field("name", &self.api.name())
            .field("origin", &self.origin)
            .finish()
    }
}

type BuiltinCtor = Box<dyn Fn() -> Result<Arc<dyn DeviceApi>> + Send + Sync>;

/// Loads vendors; built-in vendors are registered with [`Loader::with_builtin`].
#[derive(Default)]
pub struct Loader {
    builtins: Vec<(String, BuiltinCtor)>,
    search_dirs: Option<Vec<PathBuf>>,
}

impl Loader {
    /// A loader with no built-in vendors and the default search path.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a vendor built into the program under `name`.
    pub fn with_builtin(
        mut self,
        name: &str,
        create: impl Fn() -> Result<Arc<dyn DeviceApi>> + Send + Sync + 'static,
    ) -> Self {
        self.builtins.push((name.to_owned(), Box::new(create)));
        self
    }

    /// Replaces the directories searched for named plugins (before the
    /// system search path); by default `DIPU_VENDOR_PATH` then the
    /// executable's directory.
    pub fn with_search_dirs(mut self, dirs: Vec<PathBuf>) -> Self {
        self.search_dirs = Some(dirs);
        self
    }

    /// Loads the vendor `spec` names. Calls are traced at `trace` level
    /// under the target `dipu::vendor_call` when that is enabled.
    pub fn load(&self, spec: &VendorSpec) -> Result<LoadedVendor> {
        let loaded = match spec {
            VendorSpec::Name(name) => match self.builtins.iter().find(|(n, _)| n == name) {
                Some((_, create)) => LoadedVendor {
                    api: create()?,
                    origin: VendorOrigin::Builtin,
                },
                None => self.load_by_name(name)?,
            },
            VendorSpec::Path(path) => {
                if !path.exists() {
                    return Err(Error::new(
                        ErrorKind::VendorLibraryNotFound,
                        format!("vendor plugin {} does not exist", path.display()),
                    ));
                }
                // The dynamic linker treats a bare relative name as a search
                // request, so hand it the absolute path of the file we checked.
                let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                load_file(&absolute, path)?
            }
        };
        tracing::debug!(vendor = loaded.api.name(), origin = %loaded.origin, "vendor loaded");
        Ok(LoadedVendor {
            api: crate::traced::maybe_traced(loaded.api),
            origin: loaded.origin,
        })
    }

    fn dirs(&self) -> Vec<PathBuf> {
        if let Some(dirs) = &self.search_dirs {
            return dirs.clone();
        }
        let mut dirs: Vec<PathBuf> = std::env::var_os(ENV_VENDOR_PATH)
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf));
        for dir in [exe_dir, own_library_dir()].into_iter().flatten() {
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }

    fn load_by_name(&self, name: &str) -> Result<LoadedVendor> {
        let file = format!("libdipu_vendor_{name}.so");
        let mut looked = Vec::new();
        for dir in self.dirs() {
            let candidate = dir.join(&file);
            if candidate.exists() {
                return load_file(&candidate, &candidate);
            }
            looked.push(dir.display().to_string());
        }
        // Last, the dynamic linker's own search (LD_LIBRARY_PATH, ld.so.cache).
        match load_file(Path::new(&file), Path::new(&file)) {
            Ok(v) => Ok(v),
            Err(e) if e.kind() == ErrorKind::VendorLibraryNotFound => {
                let builtins: Vec<&str> = self.builtins.iter().map(|(n, _)| n.as_str()).collect();
                Err(Error::new(
                    ErrorKind::VendorLibraryNotFound,
                    format!(
                        "vendor `{name}` is not built in ({}) and {file} was not found; looked in: {}, \
                         and the system library search path ({}); set {ENV_VENDOR_PATH} to the \
                         directory that holds it or pass a path",
                        if builtins.is_empty() { "none are".to_owned() } else { format!("built in: {}", builtins.join(", ")) },
                        if looked.is_empty() { "no directories".to_owned() } else { looked.join(", ") },
                        e.message()
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }
}

/// The directory of the binary or shared library this code is linked into
/// (e.g. `libdipu_runtime.so`), so plugins installed beside it are found.
fn own_library_dir() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: `Dl_info` is plain data for which all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = own_library_dir as fn() -> Option<PathBuf>;
    // SAFETY: dladdr only inspects the address of one of our own functions
    // and fills `info`, which lives for the call.
    let found = unsafe { libc::dladdr(here as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: on success `dli_fname` points to a NUL-terminated path owned by
    // the dynamic linker, valid while the object stays loaded (for ever).
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.parent().map(Path::to_path_buf)
}

/// Loads plugin `file` (shown to people as `shown`).
fn load_file(file: &Path, shown: &Path) -> Result<LoadedVendor> {
    let shown = shown.display();
    let is_bare_name = file.components().count() == 1;
    // SAFETY: loading a shared library runs its initialisers; a vendor
    // plugin is trusted code by the user's own choice of DIPU_VENDOR.
    let library = match unsafe { libloading::Library::new(file) } {
        Ok(lib) => lib,
        Err(e) if is_bare_name => {
            return Err(Error::new(ErrorKind::VendorLibraryNotFound, e.to_string()))
        }
        Err(e) => {
            return Err(Error::new(
                ErrorKind::NotAVendor,
                format!("{shown} exists but cannot be loaded as a shared library: {e}"),
            ))
        }
    };
    let not_a_vendor = |symbol: &str| {
        Error::new(
            ErrorKind::NotAVendor,
            format!(
                "{shown} is not a dipu vendor plugin: it has no `{symbol}` symbol \
                 (a Rust vendor adds `dipu_deviceapi::export_vendor!(...)`, a C vendor \
                 implements include/dipu_vendor.h)"
            ),
        )
    };
    // SAFETY: the symbol's type is fixed by the plugin ABI (include/dipu_vendor.h).
    let abi_version =
        unsafe { library.get::<unsafe extern "C" fn() -> u32>(ENTRY_ABI_VERSION.as_bytes()) }
            .map_err(|_| not_a_vendor(ENTRY_ABI_VERSION))?;
    // SAFETY: as above; the function takes no arguments.
    let plugin_major = unsafe { abi_version() };
    if plugin_major != DIPU_VENDOR_ABI_MAJOR {
        return Err(abi_mismatch(&shown, plugin_major));
    }
    // SAFETY: the symbol's type is fixed by the plugin ABI.
    let create = unsafe {
        library.get::<unsafe extern "C" fn(*mut DipuVendorError) -> *const DipuVendorVTable>(
            ENTRY_CREATE.as_bytes(),
        )
    }
    .map_err(|_| not_a_vendor(ENTRY_CREATE))?;
    let mut err = DipuVendorError::empty();
    // SAFETY: `err` is a live, writable error struct for the call's duration.
    let table = unsafe { create(&mut err) };
    if table.is_null() {
        let e = crate::plugin::import::error_from_abi(ErrorKind::VendorInitFailed.code(), &err);
        let kind = match e.kind() {
            ErrorKind::NoDevice | ErrorKind::VendorLibraryNotFound => e.kind(),
            _ => ErrorKind::VendorInitFailed,
        };
        let message = format!(
            "vendor plugin {shown} failed to initialise: {}",
            e.message()
        );
        return Err(match e.vendor_code() {
            Some(code) => Error::vendor(kind, code, message),
            None => Error::new(kind, message),
        });
    }
    let table = copy_table(table, &shown)?;
    let vendor =
        PluginVendor::new(table).map_err(|e| e.context(format!("vendor plugin {shown}")))?;
    // Vendors are never unloaded: their threads and callbacks may outlive any scope.
    std::mem::forget(library);
    Ok(LoadedVendor {
        api: Arc::new(vendor),
        origin: VendorOrigin::File(file.to_path_buf()),
    })
}

fn abi_mismatch(shown: &impl fmt::Display, plugin_major: u32) -> Error {
    Error::new(
        ErrorKind::AbiMismatch,
        format!(
            "{shown} was built for dipu vendor ABI version {plugin_major}, but this runtime \
             speaks version {DIPU_VENDOR_ABI_MAJOR}; rebuild the vendor against a matching dipu-deviceapi"
        ),
    )
}

/// Copies a plugin's table, which may be shorter (older) than ours, into a
/// full table whose unknown fields stay empty.
pub(crate) fn copy_table(
    table: *const DipuVendorVTable,
    shown: &impl fmt::Display,
) -> Result<DipuVendorVTable> {
    let header = std::mem::offset_of!(DipuVendorVTable, describe) + std::mem::size_of::<usize>();
    // SAFETY: a non-null table returned by `dipu_vendor_create` starts with
    // the two u32 fields every ABI version has.
    let (major, size) = unsafe { ((*table).abi_major, (*table).struct_size as usize) };
    if major != DIPU_VENDOR_ABI_MAJOR {
        return Err(abi_mismatch(shown, major));
    }
    if size < header {
        return Err(Error::new(
            ErrorKind::NotAVendor,
            format!("{shown} returned a vendor table of {size} bytes, smaller than the {header}-byte minimum"),
        ));
    }
    let mut full = DipuVendorVTable::empty();
    let len = size.min(std::mem::size_of::<DipuVendorVTable>());
    // SAFETY: the plugin's table is `size` bytes long and ours is at least
    // `len`; every field is valid for any bit pattern a C compiler writes for
    // a pointer, an integer or a nullable function pointer.
    unsafe {
        std::ptr::copy_nonoverlapping(
            table.cast::<u8>(),
            (&mut full as *mut DipuVendorVTable).cast::<u8>(),
            len,
        )
    };
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_as_names_or_paths() {
        assert_eq!(
            VendorSpec::parse("cuda").unwrap(),
            VendorSpec::Name("cuda".into())
        );
        assert_eq!(
            VendorSpec::parse("./libdipu_vendor_x.so").unwrap(),
            VendorSpec::Path("./libdipu_vendor_x.so".into())
        );
        assert_eq!(
            VendorSpec::parse("libfoo.so").unwrap(),
            VendorSpec::Path("libfoo.so".into())
        );
        let e = VendorSpec::parse("cu da").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("cu da"));
        assert_eq!(
            VendorSpec::parse("").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn dipu_device_is_an_alias_with_dipus_names() {
        let name = |n: &str| VendorSpec::Name(n.into());
        assert_eq!(VendorSpec::from_values(None, None).unwrap(), name("host"));
        assert_eq!(
            VendorSpec::from_values(None, Some("ascend")).unwrap(),
            name("ascend")
        );
        assert_eq!(
            VendorSpec::from_values(None, Some("camb")).unwrap(),
            name("cambricon")
        );
        assert_eq!(
            VendorSpec::from_values(None, Some("cuda")).unwrap(),
            name("cuda")
        );
        assert_eq!(
            VendorSpec::from_values(Some("cuda"), Some("cuda")).unwrap(),
            name("cuda")
        );
        let e = VendorSpec::from_values(None, Some("npu")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.message().contains("cuda, camb, ascend"), "{e}");
        assert!(e.message().contains("\"npu\""), "{e}");
        let e = VendorSpec::from_values(Some("cuda"), Some("ascend")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.message().contains("name different vendors"), "{e}");
        let e = VendorSpec::from_values(Some("cu da"), None).unwrap_err();
        assert!(e.message().contains("DIPU_VENDOR"), "{e}");
    }

    #[test]
    fn unknown_name_lists_where_it_looked() {
        let dir = std::env::temp_dir().join("dipu-no-such-vendor-dir");
        let loader = Loader::new().with_search_dirs(vec![dir.clone()]);
        let e = loader
            .load(&VendorSpec::Name("nosuchvendor".into()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::VendorLibraryNotFound);
        assert!(
            e.message().contains("libdipu_vendor_nosuchvendor.so"),
            "{e}"
        );
        assert!(e.message().contains(&dir.display().to_string()), "{e}");
        assert!(e.message().contains("system library search path"), "{e}");
    }

    #[test]
    fn default_search_dirs_include_the_executable_directory() {
        let exe_dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let dirs = Loader::new().dirs();
        assert!(dirs.contains(&exe_dir), "{dirs:?}");
        assert!(own_library_dir().is_some());
    }

    #[test]
    fn missing_path_is_not_found() {
        let e = Loader::new()
            .load(&VendorSpec::Path("/nonexistent/libdipu_vendor_x.so".into()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::VendorLibraryNotFound);
        assert!(e.message().contains("/nonexistent/libdipu_vendor_x.so"));
    }
}
