//! Each way of failing to load a vendor gives its own clear error.

mod common;

use std::path::Path;

use common::build_c_plugin;
use dipu_deviceapi::{ErrorKind, Loader, VendorOrigin, VendorSpec};

fn load_err(path: &Path) -> dipu_deviceapi::Error {
    Loader::new()
        .load(&VendorSpec::Path(path.to_path_buf()))
        .expect_err("loading must fail")
}

#[test]
fn missing_file_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_err(&dir.path().join("libdipu_vendor_gone.so"));
    assert_eq!(e.kind(), ErrorKind::VendorLibraryNotFound, "{e}");
    assert!(
        e.message().contains("libdipu_vendor_gone.so") && e.message().contains("does not exist"),
        "{e}"
    );
}

#[test]
fn missing_name_lists_the_directories_searched() {
    let dir = tempfile::tempdir().unwrap();
    let e = Loader::new()
        .with_search_dirs(vec![dir.path().to_path_buf()])
        .load(&VendorSpec::parse("gone").unwrap())
        .expect_err("no such vendor");
    assert_eq!(e.kind(), ErrorKind::VendorLibraryNotFound, "{e}");
    assert!(
        e.message().contains(&dir.path().display().to_string()),
        "{e}"
    );
    assert!(e.message().contains("libdipu_vendor_gone.so"), "{e}");
}

#[test]
fn a_file_that_is_no_shared_library_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libdipu_vendor_text.so");
    std::fs::write(&path, "this is not an ELF file").unwrap();
    let e = load_err(&path);
    assert_eq!(e.kind(), ErrorKind::NotAVendor, "{e}");
    assert!(
        e.message().contains("cannot be loaded as a shared library"),
        "{e}"
    );
}

#[test]
fn a_library_without_entry_symbol_is_not_a_vendor() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_c_plugin(dir.path(), "bad_plugins.c", &["NO_ENTRY"], "libno_entry.so");
    let e = load_err(&path);
    assert_eq!(e.kind(), ErrorKind::NotAVendor, "{e}");
    assert!(e.message().contains("dipu_vendor_abi_version"), "{e}");
}

#[test]
fn another_abi_version_is_a_mismatch_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_c_plugin(dir.path(), "bad_plugins.c", &["ABI_MISMATCH"], "libabi.so");
    let e = load_err(&path);
    assert_eq!(e.kind(), ErrorKind::AbiMismatch, "{e}");
    let ours = dipu_deviceapi::plugin::DIPU_VENDOR_ABI_MAJOR;
    assert!(
        e.message().contains(&format!("version {}", ours + 98)),
        "{e}"
    );
    assert!(e.message().contains(&format!("version {ours}")), "{e}");
}

#[test]
fn a_vendor_init_failure_carries_its_message_and_code() {
    let dir = tempfile::tempdir().unwrap();
    let path = build_c_plugin(dir.path(), "bad_plugins.c", &["INIT_FAILS"], "libinit.so");
    let e = load_err(&path);
    assert_eq!(e.kind(), ErrorKind::VendorInitFailed, "{e}");
    assert!(e.message().contains("licence server unreachable"), "{e}");
    assert!(e.message().contains("failed to initialise"), "{e}");
    assert_eq!(e.vendor_code(), Some(100));
}

#[test]
fn a_vendor_found_by_name_in_the_search_dirs_loads() {
    let dir = tempfile::tempdir().unwrap();
    build_c_plugin(
        dir.path(),
        "minimal_vendor.c",
        &[],
        "libdipu_vendor_cmin.so",
    );
    let loaded = Loader::new()
        .with_search_dirs(vec![dir.path().to_path_buf()])
        .load(&VendorSpec::parse("cmin").unwrap())
        .expect("the C vendor loads by name");
    assert_eq!(loaded.api.name(), "c-minimal");
    assert_eq!(
        loaded.origin,
        VendorOrigin::File(dir.path().join("libdipu_vendor_cmin.so"))
    );
}

#[test]
fn a_bare_file_name_loads_that_file_from_the_current_directory() {
    // The dynamic linker would search its own path for a name without a
    // slash; the loader must load the file the user named instead.
    let cwd = std::env::current_dir().unwrap();
    let name = format!("libdipu_vendor_bare{}.so", std::process::id());
    let path = build_c_plugin(&cwd, "minimal_vendor.c", &[], &name);
    let loaded = Loader::new().load(&VendorSpec::parse(&name).unwrap());
    std::fs::remove_file(&path).unwrap();
    let loaded = loaded.expect("a bare file name in the current directory loads");
    assert_eq!(loaded.api.name(), "c-minimal");
}
