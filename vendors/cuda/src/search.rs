//! Where the CUDA libraries are looked for ([`LibrarySearch`]), and
//! opening them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use dipu_vendorkit::search::{Load, NotFound, Opened, Search};

pub use dipu_vendorkit::search::SearchDir;

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

/// Where [`CudaVendor`](crate::CudaVendor) looks for `libcudart`,
/// `libnccl` and `libcuda` (see [`LibrarySearch::from_env`] for the order).
///
/// [`LibrarySearch::from_env`] is what the plugin uses; the default value
/// searches nothing at all (not even the system path).
///
/// It [`Deref`](std::ops::Deref)s to the shared [`Search`] (directories,
/// the system path).
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch(Search);

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
        let mut search = LibrarySearch::default();
        search.set_system_path(true);
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
        search.push_after(
            PathBuf::from("/usr/local/cuda/lib64"),
            "the toolkit's default location",
        );
        search
    }

    /// Only `dirs`, in order: not the dynamic linker's path, so the driver
    /// is never found (tests use this to be independent of the machine).
    pub fn dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        LibrarySearch(Search::given(dirs))
    }

    /// Whether to also ask the dynamic linker (and look for the driver).
    pub fn with_system_path(mut self, system: bool) -> Self {
        self.0.set_system_path(system);
        self
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

    /// Opens the first of `names` found, directory by directory (each
    /// directory tries every name), then on the system path. `probe` is a
    /// function of the library, used to report which file the dynamic
    /// linker chose.
    pub(crate) fn open(&self, names: &[&str], probe: &str) -> Result<Opened, NotFound> {
        let load = Load {
            probe: Some(probe),
            global: false,
        };
        self.0.open(names, load)
    }

    /// Opens the driver: the system path only (never a toolkit's stub).
    pub(crate) fn open_driver(&self) -> Result<Opened, NotFound> {
        let mut system_only = LibrarySearch::default();
        system_only.set_system_path(self.uses_system_path());
        system_only.open(&DRIVER, "cuInit")
    }
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

dipu_vendorkit::deref_search!(LibrarySearch);
