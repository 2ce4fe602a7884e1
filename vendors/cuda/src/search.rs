//! Where the CUDA libraries are looked for ([`LibrarySearch`]), and
//! opening them.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use libloading::Library;

/// Environment variable: a CUDA installation or Python environment to take
/// the CUDA libraries from, before anything else.
pub const ENV_CUDA_HOME: &str = "DIPU_CUDA_HOME";

/// The CUDA runtime's file names, newest first.
pub(crate) const CUDART: [&str; 2] = ["libcudart.so.13", "libcudart.so.12"];
/// NCCL's file name.
pub(crate) const NCCL: [&str; 1] = ["libnccl.so.2"];
/// The driver's file name.
pub(crate) const DRIVER: [&str; 1] = ["libcuda.so.1"];

/// Library folders of NVIDIA's wheels inside a `site-packages`.
const WHEEL_DIRS: [&str; 3] = [
    "nvidia/cu13/lib",
    "nvidia/cuda_runtime/lib",
    "nvidia/nccl/lib",
];

/// A directory to look in, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDir {
    /// The directory.
    pub path: PathBuf,
    /// Where it came from, e.g. `DIPU_CUDA_HOME` or `VIRTUAL_ENV`.
    pub source: String,
}

impl fmt::Display for SearchDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.source)
    }
}

/// Where [`CudaVendor`](crate::CudaVendor) looks for `libcudart`,
/// `libnccl` and `libcuda` (see [`LibrarySearch::from_env`] for the order).
///
/// [`LibrarySearch::from_env`] is what the plugin uses; the default value
/// searches nothing at all (not even the system path).
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch {
    before: Vec<SearchDir>,
    system: bool,
    after: Vec<SearchDir>,
}

impl LibrarySearch {
    /// The search from the environment. It looks, in order, in:
    ///
    /// 1. `$DIPU_CUDA_HOME/lib64`, `$DIPU_CUDA_HOME/lib`, and the NVIDIA wheels
    ///    of `$DIPU_CUDA_HOME` when it is a Python environment (a venv);
    /// 2. the same for `$CUDA_HOME`;
    /// 3. the NVIDIA wheels of the active Python environments: `$VIRTUAL_ENV`,
    ///    `$CONDA_PREFIX` (its `lib64/` and `lib/` too, where conda's CUDA
    ///    packages go), the prefix of the first `python3` on `PATH`, and the
    ///    user site (`~/.local`);
    /// 4. the dynamic linker's search path (`LD_LIBRARY_PATH`, `ld.so.cache`);
    /// 5. `/usr/local/cuda/lib64`.
    ///
    /// "The NVIDIA wheels of a prefix" are `nvidia/cu13/lib` (`nvidia-cuda-runtime`
    /// 13.x), `nvidia/cuda_runtime/lib` (`nvidia-cuda-runtime-cu12`) and
    /// `nvidia/nccl/lib` (`nvidia-nccl-cu13`/`-cu12`) under each
    /// `lib/python3*/site-packages` (or `dist-packages`) of the prefix. Python
    /// is never run: the directories are found by listing a few folders, which
    /// takes microseconds. The driver, `libcuda.so.1`, is installed with the
    /// kernel driver and is only looked up on the dynamic linker's path (never
    /// the toolkit's `stubs/`).
    pub fn from_env() -> Self {
        let mut search = LibrarySearch {
            system: true,
            ..Self::default()
        };
        for var in [ENV_CUDA_HOME, "CUDA_HOME"] {
            if let Some(root) = env_dir(var) {
                search.push_home(&root, var);
            }
        }
        if let Some(prefix) = env_dir("VIRTUAL_ENV") {
            search.push_python_prefix(&prefix, "VIRTUAL_ENV");
        }
        // Conda's CUDA packages install into the environment's own lib/.
        if let Some(prefix) = env_dir("CONDA_PREFIX") {
            search.push_home(&prefix, "CONDA_PREFIX");
        }
        for prefix in python_on_path() {
            search.push_python_prefix(&prefix, "python3 on PATH");
        }
        if let Some(home) = env_dir("HOME") {
            search.push_python_prefix(&home.join(".local"), "user site");
        }
        search.after.push(SearchDir {
            path: PathBuf::from("/usr/local/cuda/lib64"),
            source: "the toolkit's default location".into(),
        });
        search
    }

    /// Only `dirs`, in order: not the dynamic linker's path, so the driver
    /// is never found (tests use this to be independent of the machine).
    pub fn dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut search = Self::default();
        for path in dirs {
            search.push_dir(path, "given");
        }
        search
    }

    /// Whether to also ask the dynamic linker (and look for the driver).
    pub fn with_system_path(mut self, system: bool) -> Self {
        self.system = system;
        self
    }

    /// Adds `path` to the directories searched before the system path.
    pub fn push_dir(&mut self, path: PathBuf, source: &str) {
        if !self.before.iter().any(|d| d.path == path) {
            self.before.push(SearchDir {
                path,
                source: source.to_owned(),
            });
        }
    }

    /// Adds a CUDA installation: `root/lib64`, `root/lib`, then its NVIDIA
    /// wheels if it is a Python environment.
    pub fn push_home(&mut self, root: &Path, source: &str) {
        self.push_dir(root.join("lib64"), source);
        self.push_dir(root.join("lib"), source);
        self.push_python_prefix(root, source);
    }

    /// Adds the NVIDIA wheels' library folders of a Python environment
    /// (`prefix/lib*/python3*/{site,dist}-packages/nvidia/...`), if it has any
    /// `site-packages`.
    pub fn push_python_prefix(&mut self, prefix: &Path, source: &str) {
        let mut seen = HashSet::new();
        for packages in site_packages(prefix) {
            let key = packages.canonicalize().unwrap_or_else(|_| packages.clone());
            if seen.insert(key) {
                for wheel in WHEEL_DIRS {
                    self.push_dir(packages.join(wheel), source);
                }
            }
        }
    }

    /// Every directory searched before the system path, in order.
    pub fn before_system(&self) -> &[SearchDir] {
        &self.before
    }

    /// Whether the dynamic linker's path is searched.
    pub fn uses_system_path(&self) -> bool {
        self.system
    }

    /// Opens the first of `names` found, directory by directory (each
    /// directory tries every name), then on the system path. `probe` is a
    /// function of the library, used to report which file the dynamic
    /// linker chose.
    pub(crate) fn open(&self, names: &[&str], probe: &str) -> Result<Opened, NotFound> {
        let mut looked = Vec::new();
        let mut failures = Vec::new();
        for dir in &self.before {
            looked.push(dir.to_string());
            if let Some(opened) = open_in(dir, names, &mut failures) {
                return Ok(opened);
            }
        }
        if self.system {
            looked.push("the system library path (LD_LIBRARY_PATH, ld.so.cache)".to_owned());
            match open_system(names, probe) {
                Ok(opened) => return Ok(opened),
                Err(e) if e.is_empty() => {}
                Err(e) => failures.push(format!("the dynamic linker: {e}")),
            }
            for dir in &self.after {
                looked.push(dir.to_string());
                if let Some(opened) = open_in(dir, names, &mut failures) {
                    return Ok(opened);
                }
            }
        }
        Err(NotFound {
            names: names.join(" or "),
            looked,
            failures,
        })
    }

    /// Opens the driver: the system path only (never a toolkit's stub).
    pub(crate) fn open_driver(&self) -> Result<Opened, NotFound> {
        let system_only = LibrarySearch {
            system: self.system,
            ..Self::default()
        };
        system_only.open(&DRIVER, "cuInit")
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

fn open_in(dir: &SearchDir, names: &[&str], failures: &mut Vec<String>) -> Option<Opened> {
    for name in names {
        let path = dir.path.join(name);
        if !path.is_file() {
            continue;
        }
        // SAFETY: loading NVIDIA's library runs its initialisers, which is
        // how the library is meant to be used; nothing else is assumed.
        match unsafe { Library::new(&path) } {
            Ok(library) => return Some(Opened { library, path }),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    None
}

fn open_system(names: &[&str], probe: &str) -> Result<Opened, String> {
    let mut errors = Vec::new();
    for name in names {
        // SAFETY: as in `open_in`; the dynamic linker picks the file.
        match unsafe { Library::new(name) } {
            Ok(library) => {
                let path = dipu_vendorkit::bind::file_of(&library, probe)
                    .unwrap_or_else(|| PathBuf::from(name));
                return Ok(Opened { library, path });
            }
            // "Not on the path" is what "not found" already says; keep only
            // real failures (a wrong file, a missing dependency).
            Err(e)
                if e.to_string()
                    .contains(&format!("{name}: cannot open shared object file")) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(errors.join("; "))
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `prefix/{lib,lib64}/python3*/{site,dist}-packages` that exist.
fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                let dir = python.join(packages);
                if dir.is_dir() {
                    found.push(dir);
                }
            }
        }
    }
    found
}

/// The prefixes of the first `python3` on `PATH`: the folder above its
/// `bin/` as found (a venv) and as resolved through links (its base
/// installation).
fn python_on_path() -> Vec<PathBuf> {
    let Some(path) = std::env::var_os("PATH") else {
        return Vec::new();
    };
    let Some(exe) = std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|exe| exe.is_file())
    else {
        return Vec::new();
    };
    let mut prefixes = Vec::new();
    for exe in [Some(exe.clone()), exe.canonicalize().ok()]
        .into_iter()
        .flatten()
    {
        if let Some(prefix) = exe.parent().and_then(Path::parent) {
            if !prefixes.iter().any(|p: &PathBuf| p == prefix) {
                prefixes.push(prefix.to_path_buf());
            }
        }
    }
    prefixes
}
