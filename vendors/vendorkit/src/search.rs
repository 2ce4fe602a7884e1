//! Looking for a vendor's libraries: folders in order around the dynamic
//! linker's path ([`Search`]), opening the first library found, and the
//! not-found error that names every place looked in ([`NotFound`]).

use std::fmt;
use std::path::{Path, PathBuf};

use libloading::os::unix::{Library as Unix, RTLD_GLOBAL, RTLD_LAZY, RTLD_LOCAL, RTLD_NOW};
use libloading::Library;

/// The plugin search path, also searched for the vendors' libraries.
pub const ENV_VENDOR_PATH: &str = "DIPU_VENDOR_PATH";

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

/// Directories searched in order before the dynamic linker's path, the
/// dynamic linker's path itself (unless left out), then directories after
/// it. The default value searches nothing at all.
#[derive(Debug, Clone, Default)]
pub struct Search {
    before: Vec<SearchDir>,
    system: bool,
    after: Vec<SearchDir>,
}

/// How a library is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load<'a> {
    /// A function of the library, used to report which file the dynamic
    /// linker chose (`None`: report the bare name).
    pub probe: Option<&'a str>,
    /// Open with `RTLD_GLOBAL` (for a library others expect already
    /// loaded), else `RTLD_LOCAL`.
    pub global: bool,
}

impl Search {
    /// Only `dirs`, in order, each from `"given"`; not the dynamic linker's
    /// path (tests use this to be independent of the machine).
    pub fn given(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut search = Self::default();
        for path in dirs {
            search.push_dir(path, "given");
        }
        search
    }

    /// Whether to also ask the dynamic linker.
    pub fn set_system_path(&mut self, system: bool) {
        self.system = system;
    }

    /// Whether the dynamic linker's path is searched.
    pub fn uses_system_path(&self) -> bool {
        self.system
    }

    /// Adds `path` to the directories searched before the system path,
    /// unless it is there already.
    pub fn push_dir(&mut self, path: PathBuf, source: &str) {
        if !self.before.iter().any(|d| d.path == path) {
            self.before.push(SearchDir {
                path,
                source: source.to_owned(),
            });
        }
    }

    /// Adds each directory of `DIPU_VENDOR_PATH` (see [`Search::push_dir`]).
    pub fn push_vendor_path(&mut self) {
        if let Some(paths) = std::env::var_os(ENV_VENDOR_PATH) {
            for dir in std::env::split_paths(&paths).filter(|d| !d.as_os_str().is_empty()) {
                self.push_dir(dir, ENV_VENDOR_PATH);
            }
        }
    }

    /// Adds `path` to the directories searched after the system path (only
    /// when the system path is searched).
    pub fn push_after(&mut self, path: PathBuf, source: &str) {
        self.after.push(SearchDir {
            path,
            source: source.to_owned(),
        });
    }

    /// Every directory searched before the system path, in order.
    pub fn directories(&self) -> &[SearchDir] {
        &self.before
    }

    /// Opens the first of `names` found, directory by directory (each
    /// directory tries every name), then on the system path, then in the
    /// directories after it.
    pub fn open(&self, names: &[&str], load: Load<'_>) -> Result<Opened, NotFound> {
        let mut looked = Vec::new();
        let mut failures = Vec::new();
        for dir in &self.before {
            looked.push(dir.to_string());
            if let Some(opened) = open_in(dir, names, load, &mut failures) {
                return Ok(opened);
            }
        }
        if self.system {
            looked.push("the system library path (LD_LIBRARY_PATH, ld.so.cache)".to_owned());
            match open_system(names, load) {
                Ok(opened) => return Ok(opened),
                Err(e) if e.is_empty() => {}
                Err(e) => failures.push(format!("the dynamic linker: {e}")),
            }
            for dir in &self.after {
                looked.push(dir.to_string());
                if let Some(opened) = open_in(dir, names, load, &mut failures) {
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
}

/// An opened library and the file it came from.
#[derive(Debug)]
pub struct Opened {
    /// The library (kept loaded for the vendor's life).
    pub library: Library,
    /// The file (or the bare name the dynamic linker resolved, without a
    /// probe).
    pub path: PathBuf,
}

/// Why a library was not opened: what was looked for, where, and the files
/// that existed but failed to load.
#[derive(Debug, Clone)]
pub struct NotFound {
    /// The names looked for, `a or b`.
    pub names: String,
    /// Every place looked in, in order.
    pub looked: Vec<String>,
    /// The files that existed but failed to load, and why.
    pub failures: Vec<String>,
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

fn load_library(path: &Path, load: Load<'_>) -> Result<Library, libloading::Error> {
    let scope = if load.global { RTLD_GLOBAL } else { RTLD_LOCAL };
    let when = if load.global { RTLD_NOW } else { RTLD_LAZY };
    // SAFETY: loading the vendor's library runs its initialisers, which is
    // how the library is meant to be used; nothing else is assumed.
    unsafe { Unix::open(Some(path), when | scope) }.map(Library::from)
}

fn open_in(
    dir: &SearchDir,
    names: &[&str],
    load: Load<'_>,
    failures: &mut Vec<String>,
) -> Option<Opened> {
    for name in names {
        let path = dir.path.join(name);
        if !path.is_file() {
            continue;
        }
        match load_library(&path, load) {
            Ok(library) => return Some(Opened { library, path }),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    None
}

fn open_system(names: &[&str], load: Load<'_>) -> Result<Opened, String> {
    let mut errors = Vec::new();
    for name in names {
        match load_library(Path::new(name), load) {
            Ok(library) => {
                let path = load
                    .probe
                    .and_then(|probe| crate::bind::file_of(&library, probe))
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

/// `deref_search!(LibrarySearch);` lets a vendor's `LibrarySearch(Search)`
/// newtype [`Deref`](std::ops::Deref) (and `DerefMut`) to its [`Search`]:
/// the directories and the system path, as every vendor has them.
#[macro_export]
macro_rules! deref_search {
    ($ty:ident) => {
        impl ::std::ops::Deref for $ty {
            type Target = $crate::search::Search;

            fn deref(&self) -> &$crate::search::Search {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $ty {
            fn deref_mut(&mut self) -> &mut $crate::search::Search {
                &mut self.0
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_every_place_in_order_once() {
        let mut search = Search::given([PathBuf::from("/nonexistent/a")]);
        search.push_dir(PathBuf::from("/nonexistent/b"), "B_HOME");
        search.push_dir(PathBuf::from("/nonexistent/a"), "again");
        search.push_after(PathBuf::from("/nonexistent/c"), "after");
        assert_eq!(search.directories().len(), 2);
        let err = search
            .open(&["libx.so.1", "libx.so"], Load::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "libx.so.1 or libx.so not found; looked in: /nonexistent/a (given), \
             /nonexistent/b (B_HOME)",
            "the directories after the system path count only with it"
        );
    }

    #[test]
    fn nothing_to_search_says_so() {
        let err = Search::default()
            .open(&["libx.so"], Load::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "libx.so not found; looked in: nowhere (no directory given and the system path not \
             searched)"
        );
    }
}
