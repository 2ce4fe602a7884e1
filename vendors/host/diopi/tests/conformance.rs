//! The host vendor's kernel library against the DIOPI conformance suite,
//! run from a cargo test as a vendor's own CI runs it (`dipu diopi-test`
//! runs the same suite from the command line). The test executable is
//! linked `-rdynamic` (build.rs) so the library's diopirt references
//! resolve against it.

use std::path::PathBuf;

use dipu_diopi_conformance::{Outcome, Selection};

/// The library cargo built for this package (target/<profile>/ or its deps/).
fn library_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    [
        deps.to_path_buf(),
        deps.parent().expect("target directory").to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join("libdiopi_impl_host.so"))
    .find(|p| p.exists())
    .expect("libdiopi_impl_host.so next to the test executable")
}

#[test]
fn the_host_kernel_library_passes_every_operator_of_the_suite() {
    dipu_diopi::keep_exports();
    let lib = dipu_diopi::open(&library_path()).expect("open libdiopi_impl_host.so");
    let report = dipu_diopi_conformance::run(&lib, &Selection::all()).expect("the suite runs");
    println!("{}", report.summary());
    assert!(report.success(), "{}\n{}", report.table(), report.summary());
    let missing: Vec<&str> = report
        .ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Missing))
        .map(|op| op.name)
        .collect();
    assert!(
        missing.is_empty(),
        "the host library lacks operators of the suite: {missing:?}"
    );
    let (passed, _, _) = report.counts();
    assert!(passed >= 150, "{}", report.table());
}
