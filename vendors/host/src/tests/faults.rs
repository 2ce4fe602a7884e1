//! Injected malloc failures, from the environment and from code.

use dipu_deviceapi::{DeviceApi, ErrorKind};

use super::{err, host, MIB};
use crate::{Fault, HostConfig, HostVendor, ENV_FAIL_MALLOC_AFTER_BYTES, ENV_FAIL_MALLOC_AT};

fn from_vars(vars: &[(&str, &str)]) -> dipu_deviceapi::Result<HostVendor> {
    HostVendor::new(HostConfig::from_lookup(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    })?)
}

fn free_all(h: &HostVendor, ptrs: &[*mut std::ffi::c_void]) {
    for p in ptrs {
        // SAFETY: every pointer came from `h.malloc` and is freed once.
        unsafe { h.free(*p).unwrap() };
    }
}

#[test]
fn malloc_at_from_the_environment_fails_once() {
    let h = from_vars(&[(ENV_FAIL_MALLOC_AT, "2")]).unwrap();
    let first = h.malloc(64).unwrap();
    assert!(h.malloc(0).unwrap().is_null(), "zero bytes is not counted");
    let (kind, message) = err(h.malloc(128));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(message.contains("injected"), "{message}");
    assert!(message.contains("DIPU_HOST_FAIL_MALLOC_AT=2"), "{message}");
    let third = h.malloc(128).expect("only once");
    assert_eq!(
        h.memory_used(0).unwrap(),
        64 + 128,
        "the failure cost nothing"
    );
    free_all(&h, &[first, third]);
}

#[test]
fn after_bytes_from_the_environment() {
    let h = from_vars(&[(ENV_FAIL_MALLOC_AFTER_BYTES, "1K")]).unwrap();
    let a = h.malloc(600).unwrap();
    let (kind, message) = err(h.malloc(600));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(
        message.contains("DIPU_HOST_FAIL_MALLOC_AFTER_BYTES=1024"),
        "{message}"
    );
    free_all(&h, &[a]);
    assert!(
        h.malloc(600).is_err(),
        "freeing does not lower the total ever allocated"
    );
    let b = h.malloc(424).expect("exactly at the limit");
    assert!(h.malloc(1).is_err());
    free_all(&h, &[b]);
}

#[test]
fn bad_fault_variables_are_config_errors() {
    for (var, value) in [
        (ENV_FAIL_MALLOC_AT, "0"),
        (ENV_FAIL_MALLOC_AT, "soon"),
        (ENV_FAIL_MALLOC_AFTER_BYTES, "-5"),
        (ENV_FAIL_MALLOC_AFTER_BYTES, "3Q"),
    ] {
        let (kind, message) = err(from_vars(&[(var, value)]));
        assert_eq!(kind, ErrorKind::InvalidConfig);
        assert!(
            message.contains(var) && message.contains(value),
            "{message}"
        );
    }
}

#[test]
fn programmatic_faults() {
    let h = host(1, MIB);
    let a = h.malloc(16).unwrap();
    h.set_fault(Fault::MallocAt(2));
    let b = h.malloc(16).unwrap();
    let (kind, message) = err(h.malloc(16));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(
        message.contains("set_fault(Fault::MallocAt(2))"),
        "{message}"
    );
    let c = h.malloc(16).unwrap();

    h.set_fault(Fault::AfterBytes(100));
    let d = h.malloc(100).unwrap();
    let (kind, message) = err(h.malloc(1));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(
        message.contains("set_fault(Fault::AfterBytes(100))"),
        "{message}"
    );

    h.set_fault(Fault::None);
    let e = h.malloc(1000).unwrap();
    free_all(&h, &[a, b, c, d, e]);
}

#[test]
fn capacity_failures_do_not_count_as_allocated() {
    let h = host(1, 1024);
    h.set_fault(Fault::AfterBytes(2048));
    assert_eq!(err(h.malloc(2048)).0, ErrorKind::OutOfMemory);
    let a = h.malloc(1024).expect("the failed malloc was taken back");
    free_all(&h, &[a]);
}

#[test]
fn vmm_create_and_unmap_faults_fail_once_and_change_nothing() {
    let h = host(1, 64 * MIB);
    let gran = h.vmm_granularity().unwrap();
    let base = h.vmm_reserve(2 * gran).unwrap();
    h.set_fault(Fault::VmmCreateAt(2));
    let c0 = h.vmm_create(gran).unwrap();
    let (kind, message) = err(h.vmm_create(gran));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(message.contains("Fault::VmmCreateAt(2)"), "{message}");
    assert_eq!(
        h.memory_used(0).unwrap(),
        gran as u64,
        "the failure cost nothing"
    );
    let c1 = h.vmm_create(gran).expect("only once");

    h.set_fault(Fault::VmmUnmapAt(1));
    // SAFETY: both granules are inside the reservation, mapped once each,
    // and unmapped before their chunks are released.
    unsafe {
        h.vmm_map(base, gran, c0).unwrap();
        h.vmm_map(base.cast::<u8>().add(gran).cast(), gran, c1)
            .unwrap();
        let (kind, message) = err(h.vmm_unmap(base, gran));
        assert_eq!(kind, ErrorKind::VendorError);
        assert!(message.contains("Fault::VmmUnmapAt(1)"), "{message}");
        h.memset(base, 5, 16)
            .expect("still mapped after the failed unmap");
        h.vmm_unmap(base, 2 * gran).expect("only once");
        h.vmm_release(c0).unwrap();
        h.vmm_release(c1).unwrap();
        h.vmm_free_reservation(base, 2 * gran).unwrap();
    }
    assert_eq!(h.memory_used(0).unwrap(), 0);
    assert!(h.take_async_error().is_none());
}
