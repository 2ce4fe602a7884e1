//! The conformance suite against the host vendor loaded as a plugin, so
//! every call crosses the C ABI.

mod common;

use dipu_deviceapi::{Loader, VendorOrigin, VendorSpec};

#[test]
fn the_host_plugin_passes_every_check() {
    let path = common::host_plugin_path();
    let loaded = Loader::new()
        .load(&VendorSpec::Path(path.clone()))
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
    assert_eq!(loaded.origin, VendorOrigin::File(path));
    assert_eq!(loaded.api.name(), "host");
    let report = dipu_tests::run(&loaded.api, None);
    assert!(report.success(), "\n{report}\n{}", report.summary());
    assert_eq!(report.skipped(), 0, "\n{report}");
    println!("{report}\n{}", report.summary());
}
