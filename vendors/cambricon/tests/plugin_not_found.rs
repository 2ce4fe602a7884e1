//! The plugin through the loader with no Neuware anywhere: creation fails
//! with `VendorLibraryNotFound`, naming every place it looked.
//!
//! This binary changes its environment, so it has exactly one test.

mod common;

use dipu_deviceapi::{ErrorKind, Loader, VendorSpec};

#[test]
fn without_neuware_the_plugin_names_every_place_it_looked() {
    let empty = tempfile::tempdir().unwrap();
    let home = empty.path().join("neuware");
    let extra = empty.path().join("vendors");
    std::env::set_var("NEUWARE_HOME", &home);
    std::env::set_var("DIPU_VENDOR_PATH", &extra);
    let plugin = common::plugin_path();
    let result = Loader::new().load(&VendorSpec::Path(plugin.clone()));
    let system_has_cnrt = std::path::Path::new("/usr/local/neuware/lib64/libcnrt.so").is_file()
        // SAFETY: loading Cambricon's runtime only runs its initialisers.
        || unsafe { libloading::Library::new("libcnrt.so") }.is_ok();
    if system_has_cnrt {
        let loaded = result.unwrap_or_else(|e| panic!("the installed Neuware is not used: {e}"));
        assert!(
            loaded.api.version().contains("libcnrt.so"),
            "{}",
            loaded.api.version()
        );
        return;
    }
    let err = result.expect_err("no CNRT anywhere, yet the vendor started");
    assert_eq!(err.kind(), ErrorKind::VendorLibraryNotFound, "{err}");
    let msg = err.message();
    for needle in [
        format!("vendor plugin {} failed to initialise", plugin.display()),
        "libcnrt.so not found".to_owned(),
        format!("{}/lib64 (NEUWARE_HOME)", home.display()),
        format!("{}/lib (NEUWARE_HOME)", home.display()),
        "/usr/local/neuware/lib64 (Neuware's default location)".to_owned(),
        format!("{} (DIPU_VENDOR_PATH)", extra.display()),
        "the system library path".to_owned(),
        "set NEUWARE_HOME".to_owned(),
    ] {
        assert!(msg.contains(&needle), "{needle:?} missing from:\n{msg}");
    }
}
