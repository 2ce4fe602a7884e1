//! Round trips through the plugin boundary, in one process: a Rust vendor
//! exported to a C table and imported back.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::export::create_vtable;
use super::import::PluginVendor;
use crate::{
    CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, Error, ErrorKind, EventHandle,
    HostCallback, MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result, StreamHandle,
};

/// A vendor with canned answers: device_count panics, malloc fails with a
/// vendor code, host callbacks run at once on stream 1 and fail elsewhere,
/// and every method [`Answers`] does not answer fails with [`nope`].
struct Mock;

fn nope<T>() -> Result<T> {
    Err(Error::invalid_argument("mock"))
}

/// One default of [`Answers`]: [`nope`].
macro_rules! nope_by_default {
    (vtable_only $($rest:tt)*) => {};
    ($kind:ident $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            let _ = ($($arg,)*);
            nope()
        }
    };
}

/// What the mock answers: every listed method, [`nope`] unless the mock
/// says otherwise (generated from the method list, so that these tests
/// spell out only the methods they give answers). Its collectives take as
/// many arguments as the trait's.
#[allow(clippy::too_many_arguments)]
trait Answers {
    crate::for_each_device_method!(each nope_by_default);
}

/// One method of `impl DeviceApi for Mock`: the mock's [`Answers`].
macro_rules! answered {
    (vtable_only $($rest:tt)*) => {};
    ($kind:ident $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            // SAFETY: the arguments are passed on unchanged, so the caller's
            // `DeviceApi` contract carries over.
            #[allow(unused_unsafe)]
            unsafe {
                Answers::$name(self, $($arg),*)
            }
        }
    };
}

impl DeviceApi for Mock {
    fn name(&self) -> &str {
        "mock"
    }
    fn version(&self) -> String {
        mock_version()
    }
    crate::for_each_device_method!(each answered);
}

impl Answers for Mock {
    fn device_count(&self) -> Result<i32> {
        panic!("device_count exploded")
    }
    fn current_device(&self) -> Result<i32> {
        Ok(0)
    }
    fn set_device(&self, device: i32) -> Result<()> {
        Err(Error::invalid_device(device, 1))
    }
    fn synchronize_device(&self) -> Result<()> {
        Ok(())
    }
    fn device_properties(&self, _: i32) -> Result<DeviceProperties> {
        Ok(DeviceProperties {
            name: "mock dev ✓".into(),
            total_memory: 7,
            major: 9,
            minor: 0,
            multiprocessor_count: 3,
        })
    }
    fn memory_info(&self) -> Result<MemoryInfo> {
        Ok(MemoryInfo { free: 5, total: 7 })
    }
    fn malloc(&self, bytes: usize) -> Result<*mut c_void> {
        Err(Error::vendor(
            ErrorKind::OutOfMemory,
            2,
            format!("cannot allocate {bytes} bytes"),
        ))
    }
    unsafe fn memcpy(
        &self,
        _: *mut c_void,
        _: *const c_void,
        _: usize,
        kind: CopyKind,
    ) -> Result<()> {
        assert_eq!(
            kind,
            CopyKind::DeviceToHost,
            "the kind crosses the boundary intact"
        );
        Ok(())
    }
    fn stream_priority_range(&self) -> Result<PriorityRange> {
        Ok(PriorityRange {
            least: 0,
            greatest: -3,
        })
    }
    fn stream_create(&self, priority: i32) -> Result<StreamHandle> {
        Ok(StreamHandle::from_raw(100 + priority.unsigned_abs() as u64))
    }
    unsafe fn stream_query(&self, stream: StreamHandle) -> Result<bool> {
        Ok(stream.as_raw() == 1)
    }
    unsafe fn launch_host_func(&self, stream: StreamHandle, callback: HostCallback) -> Result<()> {
        if stream.as_raw() != 1 {
            return Err(Error::invalid_argument("unknown stream"));
        }
        callback();
        Ok(())
    }
    unsafe fn event_elapsed_ms(&self, _: EventHandle, _: EventHandle) -> Result<f32> {
        Ok(1.5)
    }
    fn native_stream(&self, stream: StreamHandle) -> Result<u64> {
        match stream.as_raw() {
            0 => Ok(0xfeed),
            9 => Err(Error::invalid_argument("unknown stream")),
            raw => Ok(raw),
        }
    }
}

/// The mock's version: longer than the 255 bytes `DipuVendorInfo` holds,
/// as a CUDA version naming long library paths is, with its own version at
/// the end.
fn mock_version() -> String {
    let path =
        "/opt/a/very/long/toolkit/path/with/many/directories/lib64/libcudart.so.12".repeat(8);
    format!("mock 1.2 (runtime {path}, ✓ driver 12.4)")
}

/// Exports `Mock`, keeping only the first `keep` bytes of its table as an
/// older plugin would, and imports it back.
fn round_trip(keep: Option<usize>) -> PluginVendor {
    let table = create_vtable(std::ptr::null_mut(), || Ok(Mock));
    assert!(!table.is_null());
    // SAFETY: `create_vtable` returned a leaked, valid table.
    let mut copy = unsafe { (*table).clone() };
    if let Some(keep) = keep {
        copy.struct_size = keep as u32;
    }
    let copy = crate::loader::copy_table(&copy, &"mock").expect("table accepted");
    PluginVendor::new(copy).expect("mock describes itself")
}

#[test]
fn values_errors_and_codes_cross_intact() {
    let v = round_trip(None);
    assert_eq!((v.name(), v.version()), ("mock", mock_version()));
    let p = v.device_properties(0).unwrap();
    assert_eq!(
        (
            p.name.as_str(),
            p.total_memory,
            p.major,
            p.multiprocessor_count
        ),
        ("mock dev ✓", 7, 9, 3)
    );
    assert_eq!(v.memory_info().unwrap(), MemoryInfo { free: 5, total: 7 });
    assert_eq!(
        v.stream_priority_range().unwrap(),
        PriorityRange {
            least: 0,
            greatest: -3
        }
    );
    assert_eq!(v.stream_create(-2).unwrap().as_raw(), 102);
    let e = v.malloc(64).unwrap_err();
    assert_eq!(
        (e.kind(), e.vendor_code(), e.message()),
        (ErrorKind::OutOfMemory, Some(2), "cannot allocate 64 bytes")
    );
    let e = v.set_device(4).unwrap_err();
    assert_eq!(
        (e.kind(), e.vendor_code()),
        (ErrorKind::InvalidDevice, None)
    );
    // SAFETY: the mock ignores pointers and handles.
    unsafe {
        v.memcpy(
            std::ptr::null_mut(),
            std::ptr::null(),
            0,
            CopyKind::DeviceToHost,
        )
        .unwrap();
        assert!(v.stream_query(StreamHandle::from_raw(1)).unwrap());
        assert!(!v.stream_query(StreamHandle::from_raw(2)).unwrap());
        assert_eq!(
            v.event_elapsed_ms(EventHandle::from_raw(1), EventHandle::from_raw(2))
                .unwrap(),
            1.5
        );
    }
}

#[test]
fn a_vendor_panic_becomes_an_internal_error() {
    let v = round_trip(None);
    let e = v.device_count().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert!(
        e.message()
            .contains("vendor panicked: device_count exploded"),
        "{e}"
    );
}

#[test]
fn a_failing_constructor_is_reported() {
    let mut err = super::DipuVendorError::empty();
    let table = create_vtable::<Mock>(&mut err, || {
        Err(Error::new(ErrorKind::NoDevice, "no mock card"))
    });
    assert!(table.is_null());
    assert_eq!(err.kind, ErrorKind::NoDevice.code());
    assert_eq!(super::abi::read_c_str(&err.message), "no mock card");
    let table = create_vtable::<Mock>(&mut err, || panic!("ctor blew up"));
    assert!(table.is_null());
    assert!(super::abi::read_c_str(&err.message).contains("ctor blew up"));
}

#[test]
fn host_callbacks_run_once_or_are_freed_on_failure() {
    let v = round_trip(None);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    // SAFETY: the mock accepts any stream handle value.
    unsafe {
        v.launch_host_func(
            StreamHandle::from_raw(1),
            Box::new(move || _ = r.fetch_add(1, Ordering::SeqCst)),
        )
    }
    .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let r = runs.clone();
    // SAFETY: as above.
    let e = unsafe {
        v.launch_host_func(
            StreamHandle::from_raw(9),
            Box::new(move || _ = r.fetch_add(1, Ordering::SeqCst)),
        )
    };
    assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a refused callback never runs"
    );
    assert_eq!(
        Arc::strong_count(&runs),
        1,
        "the refused callback was freed"
    );
}

#[test]
fn an_older_shorter_table_reports_later_functions_unsupported() {
    let keep = std::mem::offset_of!(super::DipuVendorVTable, stream_priority_range);
    let v = round_trip(Some(keep));
    assert_eq!(
        v.memory_info().unwrap().total,
        7,
        "functions inside the old table work"
    );
    let e = v.stream_priority_range().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.message().contains("stream_priority_range"), "{e}");
}

#[test]
fn a_table_without_its_header_is_refused() {
    let table = create_vtable(std::ptr::null_mut(), || Ok(Mock));
    // SAFETY: a leaked, valid table.
    let mut copy = unsafe { (*table).clone() };
    copy.struct_size = 8;
    let e = crate::loader::copy_table(&copy, &"tiny").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAVendor);
    copy.struct_size = std::mem::size_of::<super::DipuVendorVTable>() as u32;
    copy.abi_major += 1;
    assert_eq!(
        crate::loader::copy_table(&copy, &"future")
            .unwrap_err()
            .kind(),
        ErrorKind::AbiMismatch
    );
}

#[test]
fn a_long_version_crosses_whole() {
    let long = mock_version();
    assert!(long.len() > 600, "longer than the 256-byte field");
    let v = round_trip(None);
    assert_eq!(v.version(), long);
    assert!(v.version().ends_with("✓ driver 12.4)"), "the end survives");
    // An older plugin without `version_full`: the 255 bytes of `describe`.
    let keep = std::mem::offset_of!(super::DipuVendorVTable, version_full);
    let old = round_trip(Some(keep));
    assert_eq!(old.version().len(), 255);
    assert!(long.starts_with(&old.version()));
}

#[test]
fn native_streams_cross_and_an_older_table_answers_the_raw_value() {
    let v = round_trip(None);
    assert_eq!(
        v.native_stream(StreamHandle::DEFAULT).unwrap(),
        0xfeed,
        "the vendor names its default queue"
    );
    assert_eq!(v.native_stream(StreamHandle::from_raw(7)).unwrap(), 7);
    let err = v.native_stream(StreamHandle::from_raw(9)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let keep = std::mem::offset_of!(super::DipuVendorVTable, native_stream);
    let old = round_trip(Some(keep));
    assert_eq!(
        old.native_stream(StreamHandle::DEFAULT).unwrap(),
        0,
        "a plugin without the entry keeps the raw value"
    );
    assert_eq!(old.native_stream(StreamHandle::from_raw(9)).unwrap(), 9);
}
