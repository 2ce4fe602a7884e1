//! The memory checker wired into the runtime: leaks, double and interior
//! frees, bad copies, off means nothing recorded, and a concurrent stress.
//! The checker is process-global: every test holds `LOCK`.

use std::ffi::c_void;
use std::sync::Arc;

use dipu_runtime::memcheck::{self, Location, MemCheck};
use dipu_runtime::{Algorithm, CopyKind, ErrorKind, HostAlgorithm, Runtime, RuntimeOptions};
use parking_lot::{Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::Torch,
    Algorithm::BestFit,
    Algorithm::BinSize,
    Algorithm::Raw,
];
const HOST_ALGORITHMS: [HostAlgorithm; 2] = [HostAlgorithm::BinSize, HostAlgorithm::Raw];

/// Holds the lock with the checker cleared and set as asked; off and
/// cleared again when dropped.
struct Checked(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Checked {
    fn new(on: bool, backtraces: bool) -> Checked {
        let g = LOCK.lock();
        // These tests set the checker themselves: the variables the suite
        // may run under (`DIPU_MEM_CHECK=1` with guards and poison, as
        // scripts/test.sh runs it) must not switch it on again (or change
        // its backtraces) when a runtime is created. Every test here holds
        // `LOCK`, so nothing reads the environment meanwhile.
        for var in [
            memcheck::ENV_MEM_CHECK,
            memcheck::ENV_BACKTRACE,
            memcheck::ENV_GUARD_BYTES,
            memcheck::ENV_POISON,
        ] {
            std::env::remove_var(var);
        }
        memcheck::set_options(0, false);
        memcheck::set_poison(false, memcheck::DEFAULT_QUARANTINE_BYTES);
        MemCheck::disable();
        MemCheck::clear();
        if on {
            MemCheck::enable(backtraces);
        }
        Checked(g)
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        MemCheck::disable();
        MemCheck::clear();
    }
}

fn runtime(algorithm: Algorithm, host: HostAlgorithm) -> Arc<Runtime> {
    Runtime::new(
        RuntimeOptions::default()
            .with_algorithm(algorithm)
            .with_host_algorithm(host),
    )
    .unwrap()
}

fn find(ptr: *mut c_void) -> Option<memcheck::Block> {
    memcheck::report()
        .groups
        .into_iter()
        .flat_map(|g| g.blocks)
        .find(|b| b.ptr == ptr as usize)
}

#[test]
fn leaks_are_reported_with_size_and_device_for_every_algorithm() {
    let _c = Checked::new(true, false);
    for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
        let rt = runtime(algorithm, HOST_ALGORITHMS[i % 2]);
        let stream = rt.context().stream_from_pool(1, false).unwrap();
        let dev = rt.allocate(1000, stream).unwrap().into_raw();
        let host = rt.allocate_host(300).unwrap().into_raw();
        let b = find(dev).unwrap_or_else(|| panic!("{algorithm}: device leak not reported"));
        assert_eq!(
            (b.size, b.location),
            (1000, Location::Device(1)),
            "{algorithm}"
        );
        assert!(b.stream.is_some());
        let h = find(host).unwrap_or_else(|| panic!("{algorithm}: host leak not reported"));
        assert_eq!((h.size, h.location), (300, Location::Host), "{algorithm}");
        let r = memcheck::report();
        assert_eq!(r.blocks, 2, "{r}");
        assert_eq!(r.bytes, 1300);
        assert!(r.to_string().contains("2 blocks, "), "{r}");
        assert!(r.to_json().starts_with("{\"blocks\":2,\"bytes\":1300"));
        let shut = rt.release_and_report();
        assert_eq!(shut.memcheck.as_ref().map(|m| m.blocks), Some(2));
        rt.free_raw(1, dev).unwrap();
        rt.free_host_raw(host).unwrap();
        assert_eq!(memcheck::records_count(), 0, "{algorithm}");
        assert!(memcheck::report().is_clean());
    }
}

#[test]
fn double_frees_show_both_backtraces_for_every_algorithm() {
    let _c = Checked::new(true, true);
    for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
        let rt = runtime(algorithm, HOST_ALGORITHMS[i % 2]);
        let stream = rt.context().stream_from_pool(0, false).unwrap();
        let dev = rt.allocate(512, stream).unwrap().into_raw();
        rt.free_raw(0, dev).unwrap();
        let e = rt.free_raw(0, dev).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let m = e.message();
        for part in [
            "already freed",
            "first freed at:",
            "allocated at:",
            "this call at:",
        ] {
            assert!(m.contains(part), "{algorithm}: no `{part}` in {m}");
        }
        // The caller's frame in each of the three backtraces.
        assert!(
            m.matches("double_frees_show_both_backtraces").count() >= 3,
            "{algorithm}: {m}"
        );
        let host = rt.allocate_host(64).unwrap().into_raw();
        rt.free_host_raw(host).unwrap();
        let e = rt.free_host_raw(host).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("first freed at:"), "{e}");
        assert!(e.message().contains("pinned host"), "{e}");
    }
    let r = memcheck::report();
    assert_eq!(r.violations.len(), 8);
    assert!(r.violations.iter().all(|v| v.kind == "double free"));
}

#[test]
fn interior_and_unknown_frees_name_the_allocation() {
    let _c = Checked::new(true, false);
    for algorithm in ALGORITHMS {
        let rt = runtime(algorithm, HostAlgorithm::BinSize);
        let stream = rt.context().stream_from_pool(0, false).unwrap();
        let dev = rt.allocate(1024, stream).unwrap().into_raw();
        // SAFETY: only the address is computed, it is never dereferenced.
        let inner = unsafe { dev.cast::<u8>().add(100) }.cast::<c_void>();
        let e = rt.free_raw(0, inner).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let want = format!(
            "100 bytes inside the live allocation {:#x} (1024 bytes",
            dev as usize
        );
        assert!(e.message().contains(&want), "{algorithm}: {e}");
        let e = rt.free_raw(0, 0x10 as *mut c_void).unwrap_err();
        assert!(e.message().contains("never allocated"), "{e}");
        assert!(find(dev).is_some(), "a bad free changes nothing");
        rt.free_raw(0, dev).unwrap();
    }
}

#[test]
fn copies_outside_live_allocations_are_explained() {
    let _c = Checked::new(true, true);
    let rt = runtime(Algorithm::BestFit, HostAlgorithm::BinSize);
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    let dev = rt.allocate(256, stream).unwrap().into_raw();
    let host = [0u8; 512];
    // SAFETY: the host side is valid for 512 bytes; the device side is checked.
    let e =
        unsafe { rt.memcpy(dev, host.as_ptr().cast(), 512, CopyKind::HostToDevice) }.unwrap_err();
    assert!(
        e.message().contains("0 bytes inside the live allocation"),
        "{e}"
    );
    assert!(e.message().contains("allocated at:"), "{e}");
    rt.free_raw(0, dev).unwrap();
    // SAFETY: as above.
    let e =
        unsafe { rt.memcpy(dev, host.as_ptr().cast(), 16, CopyKind::HostToDevice) }.unwrap_err();
    assert!(e.message().contains("already freed"), "{e}");
    assert!(e.message().contains("first freed at:"), "{e}");
    assert_eq!(memcheck::report().violations[0].kind, "invalid access");
}

#[test]
fn off_records_nothing() {
    let _c = Checked::new(false, false);
    assert!(!memcheck::enabled());
    for algorithm in ALGORITHMS {
        let rt = runtime(algorithm, HostAlgorithm::Raw);
        let stream = rt.context().stream_from_pool(0, false).unwrap();
        let dev = rt.allocate(100, stream).unwrap().into_raw();
        let host = rt.allocate_host(100).unwrap().into_raw();
        assert_eq!(memcheck::records_count(), 0);
        assert_eq!(memcheck::report().blocks, 0);
        assert!(rt.release_and_report().memcheck.is_none());
        rt.free_raw(0, dev).unwrap();
        assert!(rt.free_raw(0, dev).is_err());
        rt.free_host_raw(host).unwrap();
        assert!(memcheck::report().is_clean());
    }
}

#[test]
fn eight_threads_keep_the_counts_consistent() {
    let _c = Checked::new(true, false);
    let rt = runtime(Algorithm::BestFit, HostAlgorithm::BinSize);
    let kept: Vec<Vec<(i32, usize)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t: usize| {
                let rt = Arc::clone(&rt);
                s.spawn(move || {
                    let device = (t % 2) as i32;
                    let stream = rt.context().stream_from_pool(device, false).unwrap();
                    let mut held = Vec::new();
                    let mut kept = Vec::new();
                    for i in 0..2000usize {
                        if i % 7 == 3 {
                            let p = rt.allocate_host(64 + i % 100).unwrap().into_raw();
                            rt.free_host_raw(p).unwrap();
                        }
                        let p = rt
                            .allocate(256 + (i * 37) % 4096, stream)
                            .unwrap()
                            .into_raw();
                        held.push(p as usize);
                        if i % 3 != 0 {
                            let q = held.swap_remove((i * 13) % held.len());
                            rt.free_raw(device, q as *mut c_void).unwrap();
                        }
                    }
                    kept.extend(held.into_iter().map(|p| (device, p)));
                    kept
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: usize = kept.iter().map(Vec::len).sum();
    assert_eq!(memcheck::records_count(), total);
    assert_eq!(memcheck::report().blocks, total);
    assert_eq!(rt.live_allocations().len(), total);
    for (device, p) in kept.into_iter().flatten() {
        rt.free_raw(device, p as *mut c_void).unwrap();
    }
    assert_eq!(memcheck::records_count(), 0);
    assert!(memcheck::report().is_clean());
}
