//! Optional libraries and symbols: without CNCL there are no collectives,
//! and a CNDrv that lacks the virtual memory functions (a stub compiled
//! here) gives no virtual memory; each missing piece is named in the
//! `Unsupported` error, and nothing else is lost.

mod common;

use std::process::Command;

use dipu_deviceapi::{Capabilities, DeviceApi, ErrorKind};
use dipu_vendor_cambricon::{CambriconVendor, LibrarySearch};

/// A `libcndrv.so` exporting only the device functions (no `cnMem*`).
const OLD_CNDRV: &str = r#"
#include <stdint.h>
int cnGetErrorName(int e, const char **s) { (void)e; *s = "CN_X"; return 0; }
int cnGetErrorString(int e, const char **s) { (void)e; *s = "x"; return 0; }
int cnDeviceGet(uint64_t *d, int o) { *d = (uint64_t)o; return 0; }
int cnDeviceGetAttribute(int *v, int a, uint64_t d) { (void)a; (void)d; *v = 1; return 0; }
"#;

#[test]
fn a_cndrv_without_the_vmm_functions_gives_no_virtual_memory() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    common::fake_neuware(&full);
    let lib = dir.path().join("old/lib64");
    std::fs::create_dir_all(&lib).unwrap();
    for name in ["libcnrt.so", "libcncl.so"] {
        std::os::unix::fs::symlink(full.join("lib64").join(name), lib.join(name)).unwrap();
    }
    let src = dir.path().join("old_cndrv.c");
    std::fs::write(&src, OLD_CNDRV).unwrap();
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(lib.join("libcndrv.so"))
        .arg(&src)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let vendor = CambriconVendor::with_search(LibrarySearch::dirs([lib.clone()])).unwrap();
    let caps = vendor.capabilities();
    assert!(!caps.contains(Capabilities::VIRTUAL_MEMORY), "{caps:?}");
    assert!(caps.contains(Capabilities::COLLECTIVES), "{caps:?}");
    let err = vendor.vmm_granularity().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(
        err.message()
            .contains("lacks cnMemGetAllocationGranularity"),
        "{err}"
    );
    assert!(err.message().contains("cnMemSetAccess"), "{err}");
    // The rest still works.
    let p = vendor.malloc(64).unwrap();
    // SAFETY: a live allocation of this vendor, freed once.
    unsafe { vendor.free(p) }.unwrap();
}

#[test]
fn without_cncl_there_are_no_collectives() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    common::fake_neuware(&full);
    let lib = dir.path().join("nocncl");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(full.join("lib64/libcnrt.so"), lib.join("libcnrt.so")).unwrap();
    let vendor = CambriconVendor::with_search(LibrarySearch::dirs([lib.clone()])).unwrap();
    assert!(!vendor.capabilities().contains(Capabilities::COLLECTIVES));
    assert!(!vendor.capabilities().contains(Capabilities::VIRTUAL_MEMORY));
    assert_eq!(vendor.comm_unique_id_size(), 0);
    let err = vendor.comm_get_unique_id().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.message().contains("libcncl.so not found"), "{err}");
    assert!(
        vendor.version().contains("cncl: not found"),
        "{}",
        vendor.version()
    );
}
