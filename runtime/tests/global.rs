//! The process-global runtime: init, lazy get, shutdown. These tests share
//! the global (and environment variables), so each holds `SERIAL`.

use std::sync::{Arc, Barrier};

use dipu_runtime::{Algorithm, ErrorKind, HostAlgorithm, Runtime, RuntimeOptions};
use parking_lot::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// Starts from no global runtime.
fn fresh() {
    dipu_runtime::shutdown().unwrap();
    assert!(!dipu_runtime::is_initialized());
}

#[test]
fn init_options_override_env_and_double_init_fails() {
    let _serial = SERIAL.lock();
    fresh();
    std::env::set_var("DIPU_DEVICE_MEMCACHING_ALGORITHM", "BS");
    std::env::set_var("DIPU_HOST_MEMCACHING_ALGORITHM", "RAW");
    let rt = dipu_runtime::init(RuntimeOptions::default().with_algorithm(Algorithm::Raw)).unwrap();
    assert_eq!(
        rt.algorithm(),
        Algorithm::Raw,
        "the option wins over the env"
    );
    assert_eq!(rt.allocator(0).unwrap().algorithm(), Algorithm::Raw);
    assert_eq!(
        rt.host_algorithm(),
        HostAlgorithm::Raw,
        "unset: from the env"
    );
    assert_eq!(rt.vendor_name(), "host");
    assert_eq!(Runtime::version(), env!("CARGO_PKG_VERSION"));

    let err = dipu_runtime::init(RuntimeOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("already initialised"), "{err}");
    assert!(err.message().contains("shutdown() first"), "{err}");
    assert!(Arc::ptr_eq(&rt, &dipu_runtime::get().unwrap()));

    // A bad environment value is a clear error, and nothing is initialised.
    dipu_runtime::shutdown().unwrap();
    std::env::set_var("DIPU_DEVICE_MEMCACHING_ALGORITHM", "NOPE");
    let err = dipu_runtime::get().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(
        err.message().contains("DIPU_DEVICE_MEMCACHING_ALGORITHM"),
        "{err}"
    );
    assert!(!dipu_runtime::is_initialized());

    std::env::set_var("DIPU_DEVICE_MEMCACHING_ALGORITHM", "BS");
    let rt = dipu_runtime::get().unwrap();
    assert_eq!(rt.algorithm(), Algorithm::BinSize, "lazy get reads the env");
    std::env::remove_var("DIPU_DEVICE_MEMCACHING_ALGORITHM");
    std::env::remove_var("DIPU_HOST_MEMCACHING_ALGORITHM");
    fresh();
}

#[test]
fn racing_lazy_gets_share_one_runtime() {
    let _serial = SERIAL.lock();
    fresh();
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                dipu_runtime::get().unwrap()
            })
        })
        .collect();
    let rts: Vec<Arc<Runtime>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for rt in &rts[1..] {
        assert!(
            Arc::ptr_eq(&rts[0], rt),
            "every thread got the same runtime"
        );
    }
    drop(rts);
    fresh();
}

#[test]
fn shutdown_reports_a_leak_then_get_initialises_anew() {
    let _serial = SERIAL.lock();
    fresh();
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().stream_from_pool(1, false).unwrap();
    let kept = rt.allocate(4096, stream).unwrap();
    drop(kept); // freed: cached, then released by shutdown, not a leak
    let leaked = rt.allocate(1000, stream).unwrap().into_raw();
    let pinned = rt.allocate_host(64).unwrap().into_raw();

    let report = dipu_runtime::shutdown().unwrap();
    assert!(report.was_initialized);
    assert!(!report.is_clean());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.live.len(), 1, "{report:?}");
    assert_eq!(report.live[0].as_ptr(), leaked);
    assert_eq!(report.live[0].len, 1000);
    assert_eq!(report.live[0].device, 1);
    assert_eq!(report.devices.len(), 1, "{report:?}");
    let d = report.devices[0];
    // With the checker's guards (`DIPU_MEM_CHECK_GUARD_BYTES`) the allocator
    // holds them too, and its statistics count them.
    let guards = rt.guard_bytes().map_or(0, |(front, back)| front + back) as u64;
    assert_eq!(
        (d.device, d.allocated_blocks, d.requested_bytes),
        (1, 1, 1000 + guards)
    );
    assert!(d.allocated_bytes >= 1000);
    assert_eq!(report.pinned_blocks, 1);
    assert!(report.pinned_bytes >= 64);
    assert!(!dipu_runtime::is_initialized());

    // A new runtime: the old one's streams and pointers are foreign to it.
    let rt2 = dipu_runtime::get().unwrap();
    assert!(!Arc::ptr_eq(&rt, &rt2));
    let err = rt2.allocate(8, stream).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("another runtime"), "{err}");
    assert_eq!(
        rt2.free_raw(1, leaked).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // The old runtime still frees what it handed out.
    rt.free_raw(1, leaked).unwrap();
    rt.free_host_raw(pinned).unwrap();
    assert!(rt.release_and_report().is_clean());
    let report = dipu_runtime::shutdown().unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(!dipu_runtime::shutdown().unwrap().was_initialized);
}

#[test]
fn with_lends_the_current_global_runtime_to_every_thread() {
    let _serial = SERIAL.lock();
    fresh();
    let same = |rt: &Arc<Runtime>| {
        dipu_runtime::with(|lent| Ok(std::ptr::eq(lent, Arc::as_ptr(rt)))).unwrap()
    };
    // The first `with` makes the runtime, as `get` does.
    let made = dipu_runtime::with(|rt| Ok(rt as *const Runtime)).unwrap();
    let rt = dipu_runtime::get().unwrap();
    assert_eq!(made, Arc::as_ptr(&rt));
    assert!(same(&rt), "the thread's view is the global runtime");
    std::thread::scope(|s| {
        s.spawn(|| assert!(same(&rt), "another thread's first call"));
    });
    // After a shutdown and a new init every thread sees the new runtime.
    dipu_runtime::shutdown().unwrap();
    let rt2 = dipu_runtime::init(RuntimeOptions::default()).unwrap();
    assert!(!Arc::ptr_eq(&rt, &rt2));
    assert!(same(&rt2), "the thread's old view is dropped");
    // Errors from the closure come back as they are; nested calls work.
    let err = dipu_runtime::with(|_| -> dipu_runtime::Result<()> {
        dipu_runtime::with(|inner| {
            assert!(std::ptr::eq(inner, Arc::as_ptr(&rt2)));
            Err(dipu_runtime::Error::invalid_argument("from inside"))
        })
    })
    .unwrap_err();
    assert!(err.message().contains("from inside"), "{err}");
    drop(rt);
    fresh();
}
