//! The Ascend vendor on the fake CANN (new and old-CANN builds): the
//! conformance suite, then each ACL or HCCL difference the vendor absorbs,
//! then injected faults (in a child process, since the fake reads its
//! settings once per process).

mod common;

use std::ffi::c_void;
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::{fake_home, vendor_in, Build};
use dipu_deviceapi::{
    Capabilities, CopyKind, DataType, DeviceApi, ErrorKind, ReduceOp, StreamHandle,
};
use dipu_vendor_ascend::{AscendVendor, LibrarySearch};

/// The fake's devices are the process's: the conformance suite counts
/// free memory, so the tests that use the fake in this process take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn conformance(build: Build) -> Arc<dyn DeviceApi> {
    let home = fake_home(build);
    let api = vendor_in(home.path());
    let report = dipu_tests::run(&api, None);
    assert_eq!(report.failed(), 0, "{report}");
    assert_eq!(report.skipped(), 0, "{report}");
    assert!(api
        .capabilities()
        .contains(Capabilities::COLLECTIVES | Capabilities::VIRTUAL_MEMORY));
    api
}

#[test]
fn conformance_on_the_new_fake() {
    let _turn = serial();
    let api = conformance(Build::New);
    let version = api.version();
    assert!(
        version.contains("host callbacks: aclrtLaunchHostFunc"),
        "{version}"
    );
    assert!(!version.contains("without"), "{version}");
    assert_eq!(
        api.stream_priority_range().unwrap().greatest,
        -3,
        "the fake's range is 3..0"
    );
}

#[test]
fn conformance_on_the_old_cann_fake() {
    let _turn = serial();
    let api = conformance(Build::Old);
    let version = api.version();
    assert!(
        version.contains("aclrtLaunchCallback + a report thread"),
        "{version}"
    );
    for missing in [
        "aclrtLaunchHostFunc",
        "aclrtMemGetAllocationGranularity",
        "HcclGroupStart",
    ] {
        assert!(
            version.contains(missing),
            "{missing} not named in {version}"
        );
    }
    let range = api.stream_priority_range().unwrap();
    assert_eq!(
        (range.least, range.greatest),
        (0, 0),
        "no priority call: (0, 0)"
    );
    assert_eq!(api.vmm_granularity().unwrap(), 2 << 20, "the 2 MB default");
}

#[test]
fn a_thread_that_never_set_a_device_works_on_device_0() {
    let _turn = serial();
    let home = fake_home(Build::New);
    let api = vendor_in(home.path());
    // aclrtGetDevice fails on such a thread; the vendor sets device 0 lazily.
    std::thread::spawn(move || {
        assert_eq!(api.current_device().unwrap(), 0);
        let p = api.malloc(64).unwrap();
        assert!(!p.is_null());
        // SAFETY: just allocated.
        unsafe { api.free(p).unwrap() };
    })
    .join()
    .unwrap();
}

#[test]
fn an_async_host_to_host_copy_runs_in_order_on_the_stream() {
    let _turn = serial();
    for build in [Build::New, Build::Old] {
        let home = fake_home(build);
        let api = vendor_in(home.path());
        let stream = api.stream_create(0).unwrap();
        let src = vec![7u8; 4096];
        let mut dst = vec![0u8; 4096];
        // A callback ahead of the copy, held until the copy is queued (or
        // the test fails), looks at the destination: still all zeros.
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let flag = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&flag);
        let at = dst.as_ptr() as usize;
        // SAFETY: live buffers and stream, synchronised before they go; the
        // callback only reads `dst`, which nothing writes until the copy
        // queued after it runs.
        unsafe {
            api.launch_host_func(
                stream,
                Box::new(move || {
                    let _ = gate.recv();
                    let dst = std::slice::from_raw_parts(at as *const u8, 4096);
                    *seen.lock().unwrap() = Some(dst.iter().all(|&b| b == 0));
                }),
            )
            .unwrap();
            api.memcpy_async(
                dst.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                4096,
                CopyKind::HostToHost,
                stream,
            )
            .unwrap();
            drop(open);
            api.stream_synchronize(stream).unwrap();
            api.stream_destroy(stream).unwrap();
        }
        assert_eq!(
            *flag.lock().unwrap(),
            Some(true),
            "{build:?}: the copy ran before the callback queued ahead of it"
        );
        assert_eq!(dst, src, "{build:?}");
    }
}

#[test]
fn synchronous_copies_follow_the_default_streams_work() {
    let _turn = serial();
    // aclrtMemcpy does not wait for any stream; the trait's memcpy is
    // ordered after the default stream, as cudaMemcpy is.
    let home = fake_home(Build::New);
    let api = vendor_in(home.path());
    let dev = api.malloc(4096).unwrap();
    let mut back = vec![0u8; 4096];
    // SAFETY: live buffers; the default stream is synchronised by memcpy.
    unsafe {
        api.memset(dev, 1, 4096).unwrap();
        // Keeps the default stream busy while `memcpy` is called (it would
        // deadlock on a gate only this thread could open).
        api.launch_host_func(
            StreamHandle::DEFAULT,
            Box::new(|| std::thread::sleep(std::time::Duration::from_millis(50))),
        )
        .unwrap();
        api.memset_async(dev, 9, 4096, StreamHandle::DEFAULT)
            .unwrap();
        api.memcpy(back.as_mut_ptr().cast(), dev, 4096, CopyKind::DeviceToHost)
            .unwrap();
        api.free(dev).unwrap();
    }
    assert_eq!(
        back,
        vec![9u8; 4096],
        "the copy ran before the queued memset"
    );
}

#[test]
fn unmap_takes_every_mapping_of_the_range_and_refuses_cuts() {
    let _turn = serial();
    let home = fake_home(Build::New);
    let api = vendor_in(home.path());
    let g = api.vmm_granularity().unwrap();
    let base = api.vmm_reserve(4 * g).unwrap();
    let a = api.vmm_create(g).unwrap();
    let b = api.vmm_create(2 * g).unwrap();
    // SAFETY: inside the reservation, aligned, chunks of the sizes given.
    unsafe {
        api.vmm_map(base, g, a).unwrap();
        let second = base.cast::<u8>().add(g).cast::<c_void>();
        api.vmm_map(second, 2 * g, b).unwrap();
        api.memset(base, 3, 3 * g).unwrap();
        let cut = api.vmm_unmap(base, 2 * g).unwrap_err();
        assert_eq!(cut.kind(), ErrorKind::InvalidArgument, "{cut}");
        api.vmm_unmap(base, 3 * g).unwrap();
        api.vmm_release(a).unwrap();
        api.vmm_release(b).unwrap();
        api.vmm_free_reservation(base, 4 * g).unwrap();
    }
}

#[test]
fn a_callback_that_calls_acl_is_refused_by_the_fake() {
    let _turn = serial();
    let home = fake_home(Build::New);
    let api = vendor_in(home.path());
    let inner = Arc::clone(&api);
    let result = Arc::new(Mutex::new(None));
    let out = Arc::clone(&result);
    // SAFETY: the default stream; synchronised below.
    unsafe {
        api.launch_host_func(
            StreamHandle::DEFAULT,
            Box::new(move || {
                // A new thread for the vendor: it calls aclrtSetDevice first.
                *out.lock().unwrap() = Some(inner.malloc(16).map(|_| ()));
            }),
        )
        .unwrap();
        api.stream_synchronize(StreamHandle::DEFAULT).unwrap();
    }
    let r = result.lock().unwrap().take().expect("the callback ran");
    let e = r.unwrap_err();
    assert!(e.message().contains("host callback"), "{e}");
}

#[test]
fn hccl_broadcast_out_of_place_no_average_and_abort() {
    let _turn = serial();
    for build in [Build::New, Build::Old] {
        let home = fake_home(build);
        let api = vendor_in(home.path());
        let id = api.comm_get_unique_id().unwrap();
        assert_eq!(id.len(), 4108);
        std::thread::scope(|s| {
            for rank in 0..2 {
                let (api, id) = (Arc::clone(&api), id.clone());
                s.spawn(move || {
                    api.set_device(rank).unwrap();
                    let comm = api.comm_init_rank(2, &id, rank).unwrap();
                    let n = 256;
                    let send = api.malloc(n * 4).unwrap();
                    let recv = api.malloc(n * 4).unwrap();
                    let host: Vec<f32> = (0..n).map(|i| (rank * 1000) as f32 + i as f32).collect();
                    let mut back = vec![0f32; n];
                    // SAFETY: live buffers of n floats, synchronised below.
                    unsafe {
                        api.memcpy(send, host.as_ptr().cast(), n * 4, CopyKind::HostToDevice)
                            .unwrap();
                        api.memset(recv, 0, n * 4).unwrap();
                        api.broadcast(send, recv, n, DataType::F32, 1, comm, StreamHandle::DEFAULT)
                            .unwrap();
                        api.stream_synchronize(StreamHandle::DEFAULT).unwrap();
                        api.memcpy(
                            back.as_mut_ptr().cast(),
                            recv,
                            n * 4,
                            CopyKind::DeviceToHost,
                        )
                        .unwrap();
                        let avg = api.all_reduce(
                            send,
                            recv,
                            n,
                            DataType::F32,
                            ReduceOp::Avg,
                            comm,
                            StreamHandle::DEFAULT,
                        );
                        assert_eq!(avg.unwrap_err().kind(), ErrorKind::Unsupported);
                        api.comm_async_error(comm).unwrap();
                        api.comm_abort(comm).unwrap();
                        assert!(
                            api.comm_async_error(comm).is_err(),
                            "an aborted communicator reports it"
                        );
                        let after = api.all_reduce(
                            send,
                            recv,
                            n,
                            DataType::F32,
                            ReduceOp::Sum,
                            comm,
                            StreamHandle::DEFAULT,
                        );
                        assert!(after.is_err(), "no work on an aborted communicator");
                        api.free(send).unwrap();
                        api.free(recv).unwrap();
                    }
                    let expected: Vec<f32> = (0..n).map(|i| 1000.0 + i as f32).collect();
                    assert_eq!(back, expected, "rank {rank} ({build:?})");
                });
            }
        });
    }
}

#[test]
fn no_library_names_every_place_searched() {
    let empty = tempfile::tempdir().unwrap();
    let e =
        AscendVendor::with_search(LibrarySearch::dirs([empty.path().to_path_buf()])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::VendorLibraryNotFound);
    assert!(e.message().contains("libascendcl.so not found"), "{e}");
    assert!(
        e.message().contains(&empty.path().display().to_string()),
        "{e}"
    );
    assert!(e.message().contains("ASCEND_HOME_PATH"), "{e}");
}

/// The faults child: runs only with `DIPU_ASCEND_FAULTS_CHILD` set.
fn faults_child() {
    let home = fake_home(Build::New);
    let api = vendor_in(home.path());
    let first = api.malloc(64).unwrap();
    let oom = api.malloc(64).unwrap_err();
    assert_eq!(oom.kind(), ErrorKind::OutOfMemory, "{oom}");
    assert!(
        oom.message().contains("injected"),
        "ACL's message is kept: {oom}"
    );
    let stream = api.stream_create(0).unwrap();
    let mut host = [0u8; 64];
    // SAFETY: live buffers and stream.
    unsafe {
        assert!(
            !api.stream_query(stream).unwrap(),
            "the injected 507004 is `not ready`"
        );
        let failed = api
            .memcpy(host.as_mut_ptr().cast(), first, 64, CopyKind::DeviceToHost)
            .unwrap_err();
        assert_eq!(failed.kind(), ErrorKind::VendorError, "{failed}");
        assert_eq!(failed.vendor_code(), Some(507_000), "{failed}");
        api.memcpy(host.as_mut_ptr().cast(), first, 64, CopyKind::DeviceToHost)
            .unwrap();
    }
    let events: Vec<_> = (0..3).map(|_| api.event_create(false).unwrap()).collect();
    let none_left = api.event_create(false).unwrap_err();
    assert!(
        none_left
            .message()
            .contains("every event of the device is in use"),
        "{none_left}"
    );
    // Peer copies without peer access go through the host.
    api.set_device(1).unwrap();
    let on1 = api.malloc(64).unwrap();
    api.set_device(0).unwrap();
    // SAFETY: live buffers of 64 bytes on devices 0 and 1.
    unsafe {
        api.memset(first, 0x5a, 64).unwrap();
        api.memcpy_peer(on1, 1, first, 0, 64).unwrap();
        api.memcpy(host.as_mut_ptr().cast(), on1, 64, CopyKind::DeviceToHost)
            .unwrap();
        for e in events {
            api.event_destroy(e).unwrap();
        }
    }
    assert_eq!(host, [0x5a; 64]);
    let trace = std::fs::read_to_string(std::env::var("DIPU_FAKE_TRACE").unwrap()).unwrap();
    assert!(
        trace.contains("aclrtMallocAlign32 -> 207001 (injected)"),
        "{trace}"
    );
    assert!(
        trace.contains("aclrtDeviceCanAccessPeer -> 207000 (injected)"),
        "{trace}"
    );
}

#[test]
fn injected_faults_and_the_trace() {
    if std::env::var_os("DIPU_ASCEND_FAULTS_CHILD").is_some() {
        return faults_child();
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.log");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["injected_faults_and_the_trace", "--exact", "--nocapture", "--test-threads=1"])
        .env("DIPU_ASCEND_FAULTS_CHILD", "1")
        .env(
            "DIPU_FAKE_FAULTS",
            "fail:aclrtMallocAlign32@2=207001,fail:aclrtStreamQuery=507004,fail:aclrtMemcpy@1=507000,\
             fail:aclrtCreateEventWithFlag@4=207007,fail:aclrtDeviceCanAccessPeer=207000",
        )
        .env("DIPU_FAKE_TRACE", &trace)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the faults child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

#[test]
fn a_bad_fault_list_fails_aclinit_with_its_reason() {
    if std::env::var_os("DIPU_ASCEND_FAULTS_CHILD").is_some() {
        let home = fake_home(Build::New);
        let e = AscendVendor::with_search(LibrarySearch::dirs([home.path().join("lib64")]))
            .unwrap_err();
        assert!(e.message().contains("DIPU_FAKE_FAULTS"), "{e}");
        assert!(e.message().contains("fail:NAME=CODE"), "{e}");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_bad_fault_list_fails_aclinit_with_its_reason",
            "--exact",
            "--nocapture",
        ])
        .env("DIPU_ASCEND_FAULTS_CHILD", "1")
        .env("DIPU_FAKE_FAULTS", "fail:")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}
