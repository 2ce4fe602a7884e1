//! The Rust API on private runtimes (no process-global state).

use std::ffi::c_void;
use std::sync::Arc;

use dipu_runtime::{Algorithm, CopyKind, ErrorKind, Runtime, RuntimeOptions, StreamGuard};

fn runtime() -> Arc<Runtime> {
    Runtime::new(RuntimeOptions::default()).unwrap()
}

#[test]
fn devices_and_properties() {
    let rt = runtime();
    assert!(rt.device_count() >= 2);
    rt.set_device(1).unwrap();
    assert_eq!(rt.current_device().unwrap(), 1);
    rt.set_device(0).unwrap();
    rt.synchronize_device(1).unwrap();
    assert!(rt.device_properties(0).unwrap().total_memory > 0);
    let info = rt.memory_info(1).unwrap();
    assert!(info.free <= info.total);
    for err in [
        rt.set_device(7).unwrap_err(),
        rt.device_properties(-1).unwrap_err(),
        rt.memory_info(99).unwrap_err(),
        rt.stats(rt.device_count()).unwrap_err(),
        rt.empty_cache(-3).unwrap_err(),
        rt.free_raw(9, std::ptr::null_mut()).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidDevice, "{err}");
        assert!(err.message().contains("out of range"), "{err}");
    }
    let seed = rt.default_generator(1).unwrap();
    rt.manual_seed_all(7);
    assert_eq!(seed.initial_seed(), 7);
    assert!(rt.default_generator(5).is_err());
}

#[test]
fn round_trip_on_a_pooled_stream_and_drop_returns_memory() {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(1, false).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let buf = rt.allocate(data.len(), stream).unwrap();
    assert_eq!((buf.len(), buf.device(), buf.stream()), (10_000, 1, stream));
    buf.copy_from_host(&data, None).unwrap();
    let mut back = vec![0u8; data.len()];
    buf.copy_to_host(&mut back, Some(stream)).unwrap();
    assert_eq!(back, data);

    // Device to device through the raw API, then a memset.
    let other = rt.allocate(data.len(), stream).unwrap();
    // SAFETY: both ranges are live device allocations of this runtime.
    unsafe {
        rt.memcpy_async(
            other.as_ptr(),
            buf.as_ptr(),
            data.len(),
            CopyKind::DeviceToDevice,
            stream,
        )
        .unwrap();
    }
    other.copy_to_host(&mut back, None).unwrap();
    assert_eq!(back, data);
    other.fill(0xAB, None).unwrap();
    other.copy_to_host(&mut back[..16], None).unwrap();
    assert_eq!(&back[..16], &[0xAB; 16]);

    // A pinned buffer as the host side.
    let mut pinned = rt.allocate_host(16).unwrap();
    assert_eq!(pinned.as_slice(), &[0; 16]);
    pinned.as_mut_slice().copy_from_slice(&data[..16]);
    // SAFETY: the pinned block is 16 bytes and not touched until the sync.
    unsafe {
        rt.memcpy(other.as_ptr(), pinned.as_ptr(), 16, CopyKind::HostToDevice)
            .unwrap();
    }
    other.copy_to_host(&mut back[..16], None).unwrap();
    assert_eq!(&back[..16], &data[..16]);
    pinned.record_event(stream).unwrap();
    drop(pinned);

    let stats = rt.stats(1).unwrap();
    assert_eq!(stats.allocation.current, 2);
    assert!(stats.allocated_bytes.current >= 20_000);
    drop(buf);
    drop(other);
    let stats = rt.stats(1).unwrap();
    assert_eq!(
        stats.allocated_bytes.current, 0,
        "dropping returns the memory"
    );
    assert_eq!(stats.allocation.current, 0);
    assert!(rt.live_allocations().is_empty());
    assert!(rt.snapshot_json(1).unwrap().starts_with('{'));
    rt.empty_cache(1).unwrap();
    assert_eq!(rt.stats(1).unwrap().reserved_bytes.current, 0);
    rt.reset_peak_stats(1).unwrap();
    assert_eq!(rt.stats(1).unwrap().allocated_bytes.peak, 0);
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn bad_pointers_are_clear_errors() {
    let rt = runtime();
    let stream = rt.context().current_stream(0).unwrap();
    let buf = rt.allocate(256, stream).unwrap();
    let mut host = [0u8; 512];

    // free_raw of a pointer never allocated here.
    let err = rt.free_raw(0, host.as_mut_ptr().cast()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().contains("not a live device allocation"),
        "{err}"
    );

    // Inside an allocation, and on the wrong device.
    // SAFETY: only the address is computed, within the allocation.
    let inner = unsafe { buf.as_ptr().cast::<u8>().add(8) }.cast::<c_void>();
    let err = rt.free_raw(0, inner).unwrap_err();
    assert!(
        err.message().contains("8 bytes into the allocation"),
        "{err}"
    );
    let err = rt.free_raw(1, buf.as_ptr()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message()
            .contains("allocated on device 0, not on device 1"),
        "{err}"
    );

    // Copies with a device side outside any allocation, or past its end.
    // SAFETY: every call below is rejected before any memory is touched.
    unsafe {
        let err = rt
            .memcpy(
                host.as_mut_ptr().cast(),
                host.as_ptr().cast(),
                4,
                CopyKind::DeviceToHost,
            )
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("the source"), "{err}");
        assert!(
            err.message()
                .contains("not inside a live device allocation"),
            "{err}"
        );
        let err = rt
            .memcpy_async(
                buf.as_ptr(),
                host.as_ptr().cast(),
                257,
                CopyKind::HostToDevice,
                stream,
            )
            .unwrap_err();
        assert!(err.message().contains("runs past the end"), "{err}");
        let err = rt
            .memcpy(buf.as_ptr(), std::ptr::null(), 4, CopyKind::HostToDevice)
            .unwrap_err();
        assert!(err.message().contains("null host pointer"), "{err}");
        let err = rt.memset(inner, 0, 249).unwrap_err();
        assert!(err.message().contains("runs past the end"), "{err}");
        rt.memset(inner, 0, 248).unwrap();
        rt.memcpy(
            std::ptr::null_mut(),
            std::ptr::null(),
            0,
            CopyKind::DeviceToHost,
        )
        .unwrap();
    }
    let err = buf.copy_from_host(&host, None).unwrap_err();
    assert!(err.message().contains("do not fit"), "{err}");

    // Double free_raw.
    let raw = buf.into_raw();
    rt.free_raw(0, raw).unwrap();
    let err = rt.free_raw(0, raw).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("already freed"), "{err}");
    rt.free_raw(0, std::ptr::null_mut()).unwrap();

    // Pinned: unknown and double frees.
    let pinned = rt.allocate_host(8).unwrap().into_raw();
    rt.free_host_raw(pinned).unwrap();
    assert_eq!(
        rt.free_host_raw(pinned).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert!(rt.set_memory_fraction(0, 1.5).is_err());
    assert!(rt.set_memory_fraction(0, f64::NAN).is_err());
    rt.set_memory_fraction(0, 0.5).unwrap();

    // A stream of another runtime.
    let other = runtime();
    let foreign = other.context().stream_from_pool(0, false).unwrap();
    let err = rt.allocate(8, foreign).unwrap_err();
    assert!(err.message().contains("another runtime"), "{err}");
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn threads_with_their_own_pooled_streams() {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::Torch)).unwrap();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let rt = Arc::clone(&rt);
            std::thread::spawn(move || {
                let device = t % rt.device_count();
                let stream = rt.context().stream_from_pool(device, t % 3 == 0).unwrap();
                let _guard = StreamGuard::new(stream).unwrap();
                for round in 0..50usize {
                    let len = 1 + (round * 977 + t as usize * 131) % 70_000;
                    let data: Vec<u8> = (0..len).map(|i| (i + round + t as usize) as u8).collect();
                    let buf = rt.allocate(len, stream).unwrap();
                    buf.copy_from_host(&data, None).unwrap();
                    let mut back = vec![0u8; len];
                    buf.copy_to_host(&mut back, None).unwrap();
                    assert_eq!(back, data, "thread {t} round {round}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for d in 0..rt.device_count() {
        assert_eq!(rt.stats(d).unwrap().allocated_bytes.current, 0);
    }
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn cross_device_copy_uses_the_peer_path() {
    let rt = runtime();
    let s0 = rt.context().stream_from_pool(0, false).unwrap();
    let s1 = rt.context().stream_from_pool(1, false).unwrap();
    let a = rt.allocate(64, s0).unwrap();
    let b = rt.allocate(64, s1).unwrap();
    a.copy_from_host(&[5; 64], None).unwrap();
    // SAFETY: both are live 64-byte device allocations.
    unsafe {
        rt.memcpy(b.as_ptr(), a.as_ptr(), 64, CopyKind::DeviceToDevice)
            .unwrap();
    }
    let mut back = [0u8; 64];
    b.copy_to_host(&mut back, None).unwrap();
    assert_eq!(back, [5; 64]);
    assert_eq!(rt.find_allocation(b.as_ptr()).map(|a| a.device), Some(1));
}

#[test]
fn pointer_lookups_answer_interior_pointers_on_every_device() {
    for algorithm in Algorithm::ALL {
        let rt = Runtime::new(RuntimeOptions::default().with_algorithm(algorithm)).unwrap();
        let s1 = rt.context().stream_from_pool(1, false).unwrap();
        let buf = rt.allocate(300, s1).unwrap();
        let base = buf.as_ptr() as usize;
        // SAFETY: only the address is computed, within the allocation.
        let inner = unsafe { buf.as_ptr().cast::<u8>().add(299) }.cast::<c_void>();
        let found = rt.find_allocation(inner).unwrap();
        assert_eq!(
            (found.addr, found.len, found.device),
            (base, 300, 1),
            "{algorithm}"
        );
        assert_eq!(rt.device_of(inner), Some(1), "{algorithm}");
        // SAFETY: as above, one past the bytes requested.
        let past = unsafe { inner.cast::<u8>().add(1) }.cast::<c_void>();
        assert_eq!(rt.find_allocation(past), None, "{algorithm}");
        let s0 = rt.context().stream_from_pool(0, false).unwrap();
        let err = rt.record_stream_raw(inner, s0).unwrap_err();
        assert!(
            err.message().contains("299 bytes into the allocation"),
            "{algorithm}: {err}"
        );
        rt.record_stream_raw(buf.as_ptr(), s0).unwrap();
        let raw = buf.into_raw();
        rt.free_raw(1, raw).unwrap();
        assert_eq!(rt.find_allocation(raw), None, "{algorithm}: freed");
        let err = rt.record_stream_raw(raw, s0).unwrap_err();
        assert!(
            err.message().contains("already freed"),
            "{algorithm}: {err}"
        );
        assert!(rt.live_allocations().is_empty(), "{algorithm}");
    }
}

/// With the memory checker on (`DIPU_MEM_CHECK=1` in the environment the
/// suite runs under) the hit paths step aside, as for every observer:
/// checks that of the live `p` on `stream`, frees it through the full path
/// and returns true (the hit-path test has nothing more to check).
fn steps_aside_for_the_checker(rt: &Runtime, p: *mut c_void, stream: dipu_runtime::Stream) -> bool {
    if !dipu_runtime::memcheck::enabled() {
        return false;
    }
    assert!(!rt.free_cached(p), "the checker is on: no hit path");
    rt.free_raw(0, p).unwrap();
    assert_eq!(rt.allocate_cached(256, stream), None, "the checker is on");
    assert!(rt.release_and_report().is_clean());
    true
}

/// `allocate_cached` and `free_cached` (what `dipu_malloc` and `dipu_free`
/// try first) hand out and take back only this thread's cached blocks of
/// this runtime; every bad pointer falls through to the full path's checks.
#[test]
fn hit_path_blocks_keep_every_check() {
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let s0 = rt.context().stream_from_pool(0, false).unwrap();
    let s1 = rt.context().stream_from_pool(1, false).unwrap();
    assert_eq!(rt.allocate_cached(256, s0), None, "nothing cached yet");
    let p = rt.allocate_raw(256, s0).unwrap();
    if steps_aside_for_the_checker(&rt, p, s0) {
        return;
    }
    assert!(rt.free_cached(p));
    assert!(!rt.free_cached(p), "a second free is not a hit");
    let err = rt.free_raw(0, p).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let hit = rt.allocate_cached(256, s0).expect("the cached block");
    assert_eq!(hit, p);
    assert_eq!(
        rt.find_allocation(hit).map(|a| (a.len, a.device)),
        Some((256, 0))
    );

    // SAFETY: only the address is computed, within the allocation.
    let inner = unsafe { hit.cast::<u8>().add(8) }.cast::<c_void>();
    assert!(!rt.free_cached(inner));
    let err = rt.free_raw(0, inner).unwrap_err();
    assert!(
        err.message().contains("8 bytes into the allocation"),
        "{err}"
    );
    let err = rt.free_raw(1, hit).unwrap_err();
    assert!(
        err.message()
            .contains("allocated on device 0, not on device 1"),
        "{err}"
    );
    let err = rt.allocator(0).unwrap().allocate(256, s1).unwrap_err();
    assert!(err.message().contains("a stream of device 1"), "{err}");
    assert_eq!(
        rt.allocate_cached(256, s1),
        None,
        "device 1 has nothing cached"
    );

    // Another runtime neither hands out nor takes back this one's blocks.
    let other = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    assert!(!other.free_cached(hit));
    assert_eq!(
        other.allocate_cached(256, s0),
        None,
        "a stream of another runtime"
    );

    // Used on another stream: the device takes the block from the cache,
    // and the free goes through the full path.
    rt.record_stream_raw(hit, s1).unwrap();
    assert!(!rt.free_cached(hit));
    rt.free_raw(0, hit).unwrap();
    assert!(rt.free_raw(0, hit).is_err(), "freed once");
    rt.synchronize_device(1).unwrap();
    assert!(rt.release_and_report().is_clean());
    assert!(other.release_and_report().is_clean());
}

/// While the memory history records, the hit paths step aside (they would
/// bypass its wrapper): every allocate and free of `dipu_malloc`'s pattern
/// reaches the history, and the hit paths serve again once it stops.
#[test]
fn hit_paths_step_aside_while_the_memory_history_records() {
    use dipu_allocator::history::Action;
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let s0 = rt.context().stream_from_pool(0, false).unwrap();
    let p = rt.allocate_raw(256, s0).unwrap();
    if steps_aside_for_the_checker(&rt, p, s0) {
        return;
    }
    assert!(rt.free_cached(p), "history off: the hit path serves");
    rt.record_memory_history(100, false);
    assert_eq!(rt.allocate_cached(256, s0), None, "history on");
    let q = rt.allocate_raw(256, s0).unwrap();
    assert!(!rt.free_cached(q), "history on");
    rt.free_raw(0, q).unwrap();
    let snap = rt.memory_snapshot();
    let actions: Vec<Action> = snap.device_traces[0]
        .iter()
        .filter(|e| e.size == 256)
        .map(|e| e.action)
        .collect();
    assert!(actions.contains(&Action::Alloc), "{actions:?}");
    assert!(actions.contains(&Action::FreeRequested), "{actions:?}");
    rt.record_memory_history(0, false);
    let r = rt.allocate_raw(256, s0).unwrap();
    assert!(rt.free_cached(r), "history off again");
    assert!(rt.allocate_cached(256, s0).is_some());
}
