//! Where the CANN libraries are looked for ([`LibrarySearch`]), and
//! opening them.

use std::path::PathBuf;

use dipu_vendorkit::search::{Load, NotFound, Opened, Search};

pub use dipu_vendorkit::search::SearchDir;

/// The ACL runtime's file name.
pub(crate) const ACL: &str = "libascendcl.so";
/// HCCL's file name.
pub(crate) const HCCL: &str = "libhccl.so";

/// CANN's default installation (its `lib64/`).
pub const DEFAULT_TOOLKIT: &str = "/usr/local/Ascend/ascend-toolkit/latest";

/// Where [`AscendVendor`](crate::AscendVendor) looks for `libascendcl.so`
/// and `libhccl.so` (see [`LibrarySearch::from_env`] for the order). It
/// [`Deref`](std::ops::Deref)s to the shared [`Search`] (directories, the
/// system path).
///
/// The default value searches nothing at all (not even the system path).
#[derive(Debug, Clone, Default)]
pub struct LibrarySearch(Search);

impl LibrarySearch {
    /// The search from the environment, in order:
    ///
    /// 1. `$ASCEND_HOME_PATH/lib64` (set by CANN's `set_env.sh`);
    /// 2. `$ASCEND_TOOLKIT_HOME/lib64`;
    /// 3. `/usr/local/Ascend/ascend-toolkit/latest/lib64`, CANN's default;
    /// 4. each directory of `DIPU_VENDOR_PATH`;
    /// 5. the dynamic linker's search path (`LD_LIBRARY_PATH`, `ld.so.cache`).
    pub fn from_env() -> Self {
        let mut search = Search::default();
        search.set_system_path(true);
        for var in ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"] {
            if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                search.push_dir(PathBuf::from(root).join("lib64"), var);
            }
        }
        search.push_dir(
            PathBuf::from(DEFAULT_TOOLKIT).join("lib64"),
            "CANN's default location",
        );
        search.push_vendor_path();
        LibrarySearch(search)
    }

    /// Only `dirs`, in order, and not the dynamic linker's path (tests use
    /// this to be independent of the machine).
    pub fn dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        LibrarySearch(Search::given(dirs))
    }

    /// Whether to also ask the dynamic linker.
    pub fn with_system_path(mut self, system: bool) -> Self {
        self.0.set_system_path(system);
        self
    }

    /// Opens `name` from the first directory that has it, else from the
    /// system path. `probe` is a function of the library, used to report
    /// which file the dynamic linker chose.
    pub(crate) fn open(&self, name: &str, probe: &str) -> Result<Opened, NotFound> {
        let load = Load {
            probe: Some(probe),
            global: false,
        };
        self.0.open(&[name], load)
    }
}

dipu_vendorkit::deref_search!(LibrarySearch);
