//! Where the Cambricon libraries are looked for ([`LibrarySearch`]), and
//! opening them.

use std::path::PathBuf;

use dipu_vendorkit::search::{Load, NotFound, Opened, Search};

pub use dipu_vendorkit::search::SearchDir;

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

/// Where [`CambriconVendor`](crate::CambriconVendor) looks for `libcnrt`,
/// `libcncl` and `libcndrv` (see [`LibrarySearch::from_env`] for the order).
/// It [`Deref`](std::ops::Deref)s to the shared [`Search`] (directories,
/// the system path).
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch(Search);

impl LibrarySearch {
    /// The search from the environment, in order: `$NEUWARE_HOME/lib64` and
    /// `$NEUWARE_HOME/lib`; `/usr/local/neuware/lib64`; each directory of
    /// `DIPU_VENDOR_PATH`; then the dynamic linker's path
    /// (`LD_LIBRARY_PATH`, `ld.so.cache`).
    pub fn from_env() -> Self {
        let mut search = Search::default();
        search.set_system_path(true);
        if let Some(home) = std::env::var_os(ENV_NEUWARE_HOME).filter(|v| !v.is_empty()) {
            let home = PathBuf::from(home);
            search.push_dir(home.join("lib64"), ENV_NEUWARE_HOME);
            search.push_dir(home.join("lib"), ENV_NEUWARE_HOME);
        }
        search.push_dir(
            PathBuf::from(DEFAULT_NEUWARE_LIB),
            "Neuware's default location",
        );
        search.push_vendor_path();
        LibrarySearch(search)
    }

    /// Only `dirs`, in order, never the dynamic linker's path (tests use
    /// this to be independent of the machine).
    pub fn dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        LibrarySearch(Search::given(dirs))
    }

    /// Whether to also ask the dynamic linker.
    pub fn with_system_path(mut self, system: bool) -> Self {
        self.0.set_system_path(system);
        self
    }

    /// Opens the first of `names` found, directory by directory, then on
    /// the system path. CNRT is opened with `RTLD_GLOBAL`, as CNCL expects
    /// to find it already loaded.
    pub(crate) fn open(&self, names: &[&str]) -> Result<Opened, NotFound> {
        let load = Load {
            probe: None,
            global: true,
        };
        self.0.open(names, load)
    }
}

dipu_vendorkit::deref_search!(LibrarySearch);
