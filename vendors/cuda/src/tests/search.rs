//! Library lookup: where it looks, and the error when nothing is found.

use std::path::Path;

use dipu_deviceapi::ErrorKind;

use crate::{CudaVendor, LibrarySearch};

fn wheel_prefix(root: &Path, python: &str) -> std::path::PathBuf {
    let lib = root
        .join("lib")
        .join(python)
        .join("site-packages/nvidia/cu13/lib");
    std::fs::create_dir_all(&lib).unwrap();
    lib
}

#[test]
fn a_home_is_its_lib_dirs_then_its_wheels() {
    let root = tempfile::tempdir().unwrap();
    let wheel = wheel_prefix(root.path(), "python3.12");
    let mut search = LibrarySearch::default();
    search.push_home(root.path(), "DIPU_CUDA_HOME");
    let dirs: Vec<_> = search
        .directories()
        .iter()
        .map(|d| d.path.clone())
        .collect();
    assert_eq!(dirs[0], root.path().join("lib64"));
    assert_eq!(dirs[1], root.path().join("lib"));
    assert!(dirs.contains(&wheel), "{dirs:?} lacks {}", wheel.display());
    let sp = wheel.parent().unwrap().parent().unwrap().parent().unwrap();
    assert!(dirs.contains(&sp.join("nvidia/nccl/lib")), "{dirs:?}");
    assert!(search
        .directories()
        .iter()
        .all(|d| d.source == "DIPU_CUDA_HOME"));
    assert!(!search.uses_system_path());
}

#[test]
fn a_prefix_without_site_packages_adds_nothing() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("lib/python3.11")).unwrap();
    let mut search = LibrarySearch::default();
    search.push_python_prefix(root.path(), "VIRTUAL_ENV");
    assert!(
        search.directories().is_empty(),
        "{:?}",
        search.directories()
    );
}

#[test]
fn directories_are_not_repeated() {
    let root = tempfile::tempdir().unwrap();
    wheel_prefix(root.path(), "python3.11");
    let mut search = LibrarySearch::default();
    search.push_python_prefix(root.path(), "VIRTUAL_ENV");
    let once = search.directories().len();
    search.push_python_prefix(root.path(), "python3 on PATH");
    assert_eq!(search.directories().len(), once);
}

#[test]
fn no_runtime_is_library_not_found_listing_every_place() {
    let empty = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let search = LibrarySearch::dirs([empty.path().to_path_buf(), other.path().join("lib64")]);
    let err = CudaVendor::with_search(search).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::VendorLibraryNotFound, "{err}");
    let msg = err.message();
    for needle in [
        "libcudart.so.13 or libcudart.so.12",
        &empty.path().display().to_string(),
        &other.path().join("lib64").display().to_string(),
        "DIPU_CUDA_HOME",
        "pip install nvidia-cuda-runtime",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
}

#[test]
fn a_broken_runtime_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libcudart.so.13");
    std::fs::write(&fake, b"not a shared library").unwrap();
    let err = CudaVendor::with_search(LibrarySearch::dirs([dir.path().to_path_buf()])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::VendorLibraryNotFound);
    assert!(
        err.message()
            .contains(&format!("could not load: {}", fake.display())),
        "{}",
        err.message()
    );
}

#[test]
fn nothing_to_search_says_so() {
    let err = CudaVendor::with_search(LibrarySearch::default()).unwrap_err();
    assert!(err.message().contains("nowhere"), "{}", err.message());
}
