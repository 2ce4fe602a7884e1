//! Where the Cambricon libraries are looked for ([`LibrarySearch`]), and
//! opening them.

use std::fmt;
use std::path::PathBuf;

use libloading::Library;

/// Environment variable: the Neuware installation (its `lib64/`).
pub const ENV_NEUWARE_HOME: &str = "NEUWARE_HOME";
/// Neuware's default installation directory of libraries.
pub const DEFAULT_NEUWARE_LIB: &str = "/usr/local/neuware/lib64";

/// CNRT's file name.
pub(crate) const CNRT: [&str; 1] = ["libcnrt.so"];
/// CNCL's file name.
pub(crate) const CNCL: [&str; 1] = ["libcncl.so"];
/// CNDrv's file name.
pub(crate) const CNDRV: [&str; 1] = ["libcndrv.so"];

/// A directory to look in, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDir {
    /// The directory.
    pub path: PathBuf,
    /// Where it came from, e.g. `NEUWARE_HOME`.
    pub source: String,
}

impl fmt::Display for SearchDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.source)
    }
}

/// Where [`CambriconVendor`](crate::CambriconVendor) looks for `libcnrt`,
/// `libcncl` and `libcndrv` (see [`LibrarySearch::from_env`] for the order).
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch {
    dirs: Vec<SearchDir>,
    system: bool,
}

impl LibrarySearch {
    /// The search from the environment, in order: `$NEUWARE_HOME/lib64` and
    /// `$NEUWARE_HOME/lib`; `/usr/local/neuware/lib64`; each directory of
    /// `DIPU_VENDOR_PATH`; then the dynamic linker's path
    /// (`LD_LIBRARY_PATH`, `ld.so.cache`).
    pub fn from_env() -> Self {
        let mut search = LibrarySearch {
            system: true,
            ..Self::default()
        };
        if let Some(home) = std::env::var_os(ENV_NEUWARE_HOME).filter(|v| !v.is_empty()) {
            let home = PathBuf::from(home);
            search.push_dir(home.join("lib64"), ENV_NEUWARE_HOME);
            search.push_dir(home.join("lib"), ENV_NEUWARE_HOME);
        }
        search.push_dir(
            PathBuf::from(DEFAULT_NEUWARE_LIB),
            "Neuware's default location",
        );
        if let Some(paths) = std::env::var_os("DIPU_VENDOR_PATH") {
            for dir in std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()) {
                search.push_dir(dir, "DIPU_VENDOR_PATH");
            }
        }
        search
    }

    /// Only `dirs`, in order, never the dynamic linker's path (tests use
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

    /// Opens the first of `names` found, directory by directory, then on
    /// the system path. CNRT is opened with `RTLD_GLOBAL`, as CNCL expects
    /// to find it already loaded.
    pub(crate) fn open(&self, names: &[&str]) -> Result<Opened, NotFound> {
        let mut looked = Vec::new();
        let mut failures = Vec::new();
        for dir in &self.dirs {
            looked.push(dir.to_string());
            for name in names {
                let path = dir.path.join(name);
                if !path.is_file() {
                    continue;
                }
                match load(&path) {
                    Ok(library) => return Ok(Opened { library, path }),
                    Err(e) => failures.push(format!("{}: {e}", path.display())),
                }
            }
        }
        if self.system {
            looked.push("the system library path (LD_LIBRARY_PATH, ld.so.cache)".to_owned());
            for name in names {
                match load(std::path::Path::new(name)) {
                    Ok(library) => {
                        return Ok(Opened {
                            library,
                            path: PathBuf::from(name),
                        })
                    }
                    Err(e) if e.contains("cannot open shared object file") => {}
                    Err(e) => failures.push(format!("the dynamic linker: {e}")),
                }
            }
        }
        Err(NotFound {
            names: names.join(" or "),
            looked,
            failures,
        })
    }
}

fn load(path: &std::path::Path) -> Result<Library, String> {
    use libloading::os::unix::{Library as Unix, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading Cambricon's library runs its initialisers, which is
    // how the library is meant to be used; nothing else is assumed.
    unsafe { Unix::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map(Library::from)
        .map_err(|e| e.to_string())
}

/// An opened library and the file it came from.
pub(crate) struct Opened {
    /// The library (kept loaded for the vendor's life).
    pub(crate) library: Library,
    /// The file (or the bare name the dynamic linker resolved).
    pub(crate) path: PathBuf,
}

/// Why a library was not opened: what was looked for, where, and the files
/// that existed but failed to load.
#[derive(Debug, Clone)]
pub(crate) struct NotFound {
    pub(crate) names: String,
    pub(crate) looked: Vec<String>,
    pub(crate) failures: Vec<String>,
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} not found; looked in: ", self.names)?;
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
