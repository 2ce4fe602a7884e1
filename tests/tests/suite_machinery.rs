//! The suite's own machinery, against stub vendors: a machine without
//! devices skips everything but `device::count`, a panicking vendor fails
//! checks instead of crashing the suite, and the filter selects by name.

use std::ffi::c_void;
use std::sync::Arc;

use dipu_deviceapi::{
    DeviceApi, DeviceProperties, Error, ErrorKind, EventHandle, HostCallback, MemoryInfo,
    PriorityRange, Result, StreamHandle,
};
use dipu_tests::Outcome;

/// A vendor whose `device_count` answers `count` and whose every other
/// device call panics.
struct Stub {
    count: Result<i32>,
}

macro_rules! panics {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(fn $name(&self, $($arg: $ty),*) -> $ret {
            let _ = ($($arg,)*);
            panic!(concat!("stub vendor: ", stringify!($name), " called"))
        })*
    };
}

macro_rules! panics_unsafe {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(unsafe fn $name(&self, $($arg: $ty),*) -> $ret {
            let _ = ($($arg,)*);
            panic!(concat!("stub vendor: ", stringify!($name), " called"))
        })*
    };
}

impl DeviceApi for Stub {
    fn name(&self) -> &str {
        "stub"
    }
    fn version(&self) -> String {
        "stub 0".into()
    }
    fn device_count(&self) -> Result<i32> {
        self.count.clone()
    }
    fn current_device(&self) -> Result<i32> {
        Ok(0)
    }
    fn set_device(&self, device: i32) -> Result<()> {
        match device {
            0 => Ok(()),
            _ => Err(Error::invalid_device(device, 1)),
        }
    }
    panics! {
        synchronize_device() -> Result<()>;
        device_properties(device: i32) -> Result<DeviceProperties>;
        memory_info() -> Result<MemoryInfo>;
        malloc(bytes: usize) -> Result<*mut c_void>;
        malloc_host(bytes: usize) -> Result<*mut c_void>;
        stream_priority_range() -> Result<PriorityRange>;
        stream_create(priority: i32) -> Result<StreamHandle>;
        event_create(timing: bool) -> Result<EventHandle>;
    }
    panics_unsafe! {
        free(ptr: *mut c_void) -> Result<()>;
        free_host(ptr: *mut c_void) -> Result<()>;
        memset(ptr: *mut c_void, value: u8, bytes: usize) -> Result<()>;
        memset_async(ptr: *mut c_void, value: u8, bytes: usize, stream: StreamHandle) -> Result<()>;
        memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: dipu_deviceapi::CopyKind) -> Result<()>;
        memcpy_async(dst: *mut c_void, src: *const c_void, bytes: usize, kind: dipu_deviceapi::CopyKind, stream: StreamHandle) -> Result<()>;
        memcpy_peer(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize) -> Result<()>;
        memcpy_peer_async(dst: *mut c_void, dst_device: i32, src: *const c_void, src_device: i32, bytes: usize, stream: StreamHandle) -> Result<()>;
        stream_destroy(stream: StreamHandle) -> Result<()>;
        stream_synchronize(stream: StreamHandle) -> Result<()>;
        stream_query(stream: StreamHandle) -> Result<bool>;
        stream_wait_event(stream: StreamHandle, event: EventHandle) -> Result<()>;
        launch_host_func(stream: StreamHandle, callback: HostCallback) -> Result<()>;
        event_destroy(event: EventHandle) -> Result<()>;
        event_record(event: EventHandle, stream: StreamHandle) -> Result<()>;
        event_query(event: EventHandle) -> Result<bool>;
        event_synchronize(event: EventHandle) -> Result<()>;
        event_elapsed_ms(start: EventHandle, end: EventHandle) -> Result<f32>;
    }
}

fn stub(count: Result<i32>) -> Arc<dyn DeviceApi> {
    Arc::new(Stub { count })
}

#[test]
fn no_device_skips_every_device_check() {
    let api = stub(Err(Error::new(
        ErrorKind::NoDevice,
        "no accelerator in this machine",
    )));
    let report = dipu_tests::run(&api, None);
    assert_eq!(report.results.len(), dipu_tests::checks().len());
    assert_eq!(report.passed(), 1, "{report}");
    assert_eq!(report.failed(), 0, "{report}");
    assert_eq!(report.skipped(), dipu_tests::checks().len() - 1);
    let count = &report.results[0];
    assert_eq!(count.name, "device::count");
    assert_eq!(count.outcome, Outcome::Passed);
    assert_eq!(count.notes, ["no device: no accelerator in this machine"]);
    for r in &report.results[1..] {
        assert_eq!(
            r.outcome,
            Outcome::Skipped("no device: no accelerator in this machine".into()),
            "{}",
            r.name
        );
    }
    assert!(report.success());
    assert!(report.to_string().contains("skipped:\n"), "{report}");
}

#[test]
fn another_device_count_error_fails_everything() {
    let api = stub(Err(Error::new(ErrorKind::VendorError, "driver exploded")));
    let report = dipu_tests::run(&api, None);
    assert_eq!(report.failed(), report.results.len(), "{report}");
    assert!(
        matches!(&report.results[0].outcome, Outcome::Failed(m) if m.contains("expected NoDevice") && m.contains("driver exploded")),
        "{report}"
    );
    assert!(
        matches!(&report.results[1].outcome, Outcome::Failed(m) if m.contains("device_count failed")),
        "{report}"
    );
}

#[test]
fn a_panicking_vendor_fails_checks_with_the_panic_message() {
    let api = stub(Ok(1));
    let report = dipu_tests::run(&api, Some("memory::malloc_and_free"));
    assert_eq!(report.results.len(), 1, "{report}");
    match &report.results[0].outcome {
        Outcome::Failed(m) => assert!(
            m.contains("panicked") && m.contains("stub vendor: malloc called"),
            "{m}"
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(!report.success());
    assert_eq!(report.summary().split(',').nth(1), Some(" 1 failed"));
}

#[test]
fn a_wrong_device_count_fails() {
    let api = stub(Ok(0));
    let report = dipu_tests::run(&api, Some("device::count"));
    assert!(
        matches!(&report.results[0].outcome, Outcome::Failed(m) if m.contains("at least 1")),
        "{report}"
    );
}

#[test]
fn the_filter_selects_by_substring() {
    let api = stub(Err(Error::new(ErrorKind::NoDevice, "none")));
    let report = dipu_tests::run(&api, Some("events::"));
    assert!(!report.results.is_empty());
    assert!(report
        .results
        .iter()
        .all(|r| r.name.starts_with("events::")));
    assert!(dipu_tests::run(&api, Some("no such check"))
        .results
        .is_empty());
}
