//! Injected faults on the fake: a failing call keeps CNRT's code, name and
//! message; out of memory; CNCL's asynchronous error; the call trace.
//!
//! The fake reads its configuration once per process, so this binary sets
//! it before anything loads the fake.

mod common;

use dipu_deviceapi::{ErrorKind, Loader, StreamHandle, VendorSpec};

#[test]
fn injected_faults_surface_with_the_vendor_code_and_are_traced() {
    let dir = tempfile::tempdir().unwrap();
    common::fake_neuware(dir.path());
    let trace = dir.path().join("trace.txt");
    std::env::set_var("NEUWARE_HOME", dir.path());
    std::env::set_var("DIPU_FAKE_MEMORY", (64u64 << 20).to_string());
    std::env::set_var("DIPU_FAKE_TRACE", &trace);
    std::env::set_var(
        "DIPU_FAKE_FAULTS",
        "fail:cnrtMalloc@2=999991,fail:cnclAllReduce@1=1,oom@4",
    );
    let api = Loader::new()
        .load(&VendorSpec::Path(common::plugin_path()))
        .unwrap()
        .api;

    // The first cnrtMalloc works, the second is the injected failure.
    let p = api.malloc(1024).unwrap();
    let err = api.malloc(1024).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::VendorError, "{err}");
    assert_eq!(err.vendor_code(), Some(999_991), "{err}");
    assert!(err.message().contains("cnrtErrorUnknown"), "{err}");
    assert!(
        err.message().contains("cnrtMalloc(1024 bytes) on device 0"),
        "{err}"
    );
    // The third works again: the failure did not stick.
    let q = api.malloc(1024).unwrap();

    // Out of memory: more than the fake's 64 MiB.
    let err = api.malloc(65 << 20).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    assert_eq!(err.vendor_code(), Some(100_100), "{err}");
    // The fourth allocation (cnMemCreate here) is the injected `oom@4`.
    let g = api.vmm_granularity().unwrap();
    let err = api.vmm_create(g).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    // Virtual memory counts against the device's memory too.
    let err = api.vmm_create(g * 64).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    let chunk = api.vmm_create(g).unwrap();
    // SAFETY: a live chunk, released once.
    unsafe { api.vmm_release(chunk) }.unwrap();

    // CNCL: the injected failure is synchronous; the communicator stays healthy.
    let id = api.comm_get_unique_id().unwrap();
    let comm = api.comm_init_rank(1, &id, 0).unwrap();
    // SAFETY: live buffers of 1024 bytes and a live communicator.
    let err = unsafe {
        api.all_reduce(
            p,
            q,
            16,
            dipu_deviceapi::DataType::F32,
            dipu_deviceapi::ReduceOp::Sum,
            comm,
            StreamHandle::DEFAULT,
        )
    }
    .unwrap_err();
    assert_eq!(err.vendor_code(), Some(0x01), "{err}");
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.comm_async_error(comm) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.comm_destroy(comm) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.free(p) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.free(q) }.unwrap();

    let trace = std::fs::read_to_string(&trace).unwrap();
    let mallocs = trace
        .lines()
        .filter(|l| l.starts_with("cnrtMalloc "))
        .count();
    assert_eq!(mallocs, 4, "{trace}");
    assert!(
        trace.contains("cnrtMalloc -> injected fault 999991"),
        "{trace}"
    );
    assert!(
        trace.contains("cnclAllReduce -> injected fault 1"),
        "{trace}"
    );
    assert!(
        trace.contains("cnrtGetLastError"),
        "errors were not cleared:\n{trace}"
    );
    for call in [
        "cnMemCreate",
        "cnMemRelease",
        "cnclInitComms",
        "cnclFreeComm",
    ] {
        assert!(
            trace.lines().any(|l| l.starts_with(&format!("{call} "))),
            "{call}:\n{trace}"
        );
    }
}
