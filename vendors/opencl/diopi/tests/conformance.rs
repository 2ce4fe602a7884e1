//! The OpenCL kernel library against the DIOPI conformance suite on PoCL
//! (installed by `scripts/setup.sh`), run as `dipu diopi-test --library`
//! runs it: every operator the library exports must pass every case, on
//! strided and aliased tensors, on another stream and on a busy one. The
//! test executable is linked `-rdynamic` (build.rs) so the library's
//! diopirt references resolve against it, and the runtime takes the OpenCL
//! plugin built beside it (`DIPU_VENDOR=opencl`).

use std::path::PathBuf;

use dipu_diopi_conformance::{Outcome, Selection};

/// `name` as cargo built it (target/<profile>/deps/ or target/<profile>/).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    [
        deps.to_path_buf(),
        deps.parent().expect("target directory").to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join(name))
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("{name} next to the test executable"))
}

#[test]
fn the_opencl_kernel_library_passes_every_operator_it_has() {
    let plugin = built("libdipu_vendor_opencl.so");
    std::env::set_var("DIPU_VENDOR", &plugin);
    if std::env::var_os("POCL_DEVICES").is_none() {
        let cache =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../target/pocl-cache");
        std::env::set_var("POCL_DEVICES", "pthread pthread");
        std::env::set_var("POCL_MAX_PTHREAD_COUNT", "2");
        std::env::set_var("POCL_CACHE_DIR", cache);
    }
    dipu_diopi::keep_exports();
    let lib =
        dipu_diopi::open(&built("libdiopi_impl_opencl.so")).expect("open libdiopi_impl_opencl.so");
    let report = dipu_diopi_conformance::run(&lib, &Selection::all())
        .expect("the suite runs on PoCL (scripts/setup.sh installs it)");
    println!("{}", report.table());
    println!("{}", report.summary());
    assert!(report.success(), "{}\n{}", report.table(), report.summary());
    let (passed, _, _) = report.counts();
    let missing = report
        .ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Missing))
        .count();
    assert!(
        passed >= 100,
        "{} passed, {missing} missing\n{}",
        passed,
        report.table()
    );
}
