//! Where the CANN libraries are looked for ([`LibrarySearch`]), and
//! opening them.

use std::fmt;
use std::path::PathBuf;

use libloading::Library;

/// The ACL runtime's file name.
pub(crate) const ACL: &str = "libascendcl.so";
/// HCCL's file name.
pub(crate) const HCCL: &str = "libhccl.so";

/// The plugin search path, also searched for the CANN libraries.
const ENV_VENDOR_PATH: &str = "DIPU_VENDOR_PATH";

/// CANN's default installation (its `lib64/`).
pub const DEFAULT_TOOLKIT: &str = "/usr/local/Ascend/ascend-toolkit/latest";

/// A directory to look in, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDir {
    /// The directory.
    pub path: PathBuf,
    /// Where it came from, e.g. `ASCEND_HOME_PATH`.
    pub source: String,
}

impl fmt::Display for SearchDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.source)
    }
}

/// Where [`AscendVendor`](crate::AscendVendor) looks for `libascendcl.so`
/// and `libhccl.so` (see [`LibrarySearch::from_env`] for the order).
///
/// The default value searches nothing at all (not even the system path).
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch {
    dirs: Vec<SearchDir>,
    system: bool,
}

impl LibrarySearch {
    /// The search from the environment, in order:
    ///
    /// 1. `$ASCEND_HOME_PATH/lib64` (set by CANN's `set_env.sh`);
    /// 2. `$ASCEND_TOOLKIT_HOME/lib64`;
    /// 3. `/usr/local/Ascend/ascend-toolkit/latest/lib64`, CANN's default;
    /// 4. each directory of `DIPU_VENDOR_PATH`;
    /// 5. the dynamic linker's search path (`LD_LIBRARY_PATH`, `ld.so.cache`).
    pub fn from_env() -> Self {
        let mut search = LibrarySearch {
            system: true,
            ..Self::default()
        };
        for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
            if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                search.push_dir(PathBuf::from(root).join("lib64"), var);
            }
        }
        search.push_dir(
            PathBuf::from(DEFAULT_TOOLKIT).join("lib64"),
            "CANN's default location",
        );
        if let Some(paths) = std::env::var_os(ENV_VENDOR_PATH) {
            for dir in std::env::split_paths(&paths).filter(|d| !d.as_os_str().is_empty()) {
                search.push_dir(dir, ENV_VENDOR_PATH);
            }
        }
        search
    }

    /// Only `dirs`, in order, and not the dynamic linker's path (tests use
    /// this to be independent of the machine).
    pub fn dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut search = Self::default();
        for path in dirs {
            search.push_dir(path, "given");
        }
        search
    }

    /// Whether to also ask the dynamic linker.
    pub fn with_system_path(mut self, system: bool) -> Self {
        self.system = system;
        self
    }

    /// Adds `path` to the directories searched before the system path.
    pub fn push_dir(&mut self, path: PathBuf, source: &str) {
        if !self.dirs.iter().any(|d| d.path == path) {
            self.dirs.push(SearchDir {
                path,
                source: source.to_owned(),
            });
        }
    }

    /// Every directory searched before the system path, in order.
    pub fn directories(&self) -> &[SearchDir] {
        &self.dirs
    }

    /// Whether the dynamic linker's path is searched.
    pub fn uses_system_path(&self) -> bool {
        self.system
    }

    /// Opens `name` from the first directory that has it, else from the
    /// system path. `probe` is a function of the library, used to report
    /// which file the dynamic linker chose.
    pub(crate) fn open(&self, name: &str, probe: &str) -> Result<Opened, NotFound> {
        let mut looked = Vec::new();
        let mut failures = Vec::new();
        for dir in &self.dirs {
            looked.push(dir.to_string());
            let path = dir.path.join(name);
            if !path.is_file() {
                continue;
            }
            // SAFETY: loading CANN's library runs its initialisers, which is
            // how the library is meant to be used; nothing else is assumed.
            match unsafe { Library::new(&path) } {
                Ok(library) => return Ok(Opened { library, path }),
                Err(e) => failures.push(format!("{}: {e}", path.display())),
            }
        }
        if self.system {
            looked.push("the system library path (LD_LIBRARY_PATH, ld.so.cache)".to_owned());
            // SAFETY: as above; the dynamic linker picks the file.
            match unsafe { Library::new(name) } {
                Ok(library) => {
                    let path = dipu_vendorkit::bind::file_of(&library, probe)
                        .unwrap_or_else(|| PathBuf::from(name));
                    return Ok(Opened { library, path });
                }
                // "Not on the path" is what "not found" already says.
                Err(e)
                    if e.to_string()
                        .contains(&format!("{name}: cannot open shared object file")) => {}
                Err(e) => failures.push(format!("the dynamic linker: {e}")),
            }
        }
        Err(NotFound {
            name: name.to_owned(),
            looked,
            failures,
        })
    }
}

/// An opened library and the file it came from.
pub(crate) struct Opened {
    /// The library (kept loaded for the vendor's life).
    pub(crate) library: Library,
    /// The file.
    pub(crate) path: PathBuf,
}

/// Why a library was not opened: what was looked for, where, and the files
/// that existed but failed to load.
#[derive(Debug, Clone)]
pub(crate) struct NotFound {
    pub(crate) name: String,
    pub(crate) looked: Vec<String>,
    pub(crate) failures: Vec<String>,
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} not found; looked in: ", self.name)?;
        if self.looked.is_empty() {
            f.write_str("nowhere (no directory given and the system path not searched)")?;
        } else {
            f.write_str(&self.looked.join(", "))?;
        }
        if !self.failures.is_empty() {
            write!(f, "; could not load: {}", self.failures.join("; "))?;
        }
        Ok(())
    }
}
