//! The vendor's own behaviour on a real OpenCL driver (PoCL, installed by
//! `scripts/setup.sh`): errors that name the call and the status, a failed
//! command reported where it is waited for, the memory budget, host
//! functions in order on the vendor's thread, an event recorded again and
//! again, and `free` waiting for queued work. The conformance suite (`dipu
//! selftest --vendor opencl`) covers the rest of the trait.
//!
//! Without `POCL_DEVICES` set, the tests ask PoCL for two `pthread` devices
//! with two worker threads and a kernel cache under `target/` (what
//! `scripts/test.sh` sets). Each test has a vendor of its own (its own
//! context, queues and host-function thread).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::Duration;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind, EventHandle, StreamHandle};
use dipu_vendorkit::search::Search;

use crate::config::{Config, Svm};
use crate::handles::Ev;
use crate::status::CL_OUT_OF_RESOURCES;
use crate::OpenClVendor;

/// A vendor of its own on the system's ICD loader with `config`.
fn vendor_with(config: Config) -> OpenClVendor {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        if std::env::var_os("POCL_DEVICES").is_none() {
            let cache =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pocl-cache");
            std::env::set_var("POCL_DEVICES", "pthread pthread");
            std::env::set_var("POCL_MAX_PTHREAD_COUNT", "2");
            std::env::set_var("POCL_CACHE_DIR", cache);
        }
    });
    let mut search = Search::default();
    search.set_system_path(true);
    let v = OpenClVendor::with(search, config).unwrap_or_else(|e| {
        panic!("the OpenCL vendor does not open (scripts/setup.sh installs PoCL): {e}")
    });
    let count = v
        .device_count()
        .unwrap_or_else(|e| panic!("no OpenCL device (scripts/setup.sh installs PoCL): {e}"));
    assert!(count >= 1);
    v
}

fn vendor() -> OpenClVendor {
    vendor_with(Config::default())
}

/// A gate a host function waits at until it is opened (or, as a backstop
/// against a failed test leaving it shut, for 10 s).
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn wait(&self) {
        let (open, cv) = &*self.0;
        let guard = open.lock().unwrap();
        let _ = cv
            .wait_timeout_while(guard, Duration::from_secs(10), |o| !*o)
            .unwrap();
    }

    fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    /// Blocks `stream` behind this gate.
    fn block(&self, api: &OpenClVendor, stream: StreamHandle) {
        let gate = self.clone();
        // SAFETY: a live stream of `api`.
        unsafe { api.launch_host_func(stream, Box::new(move || gate.wait())) }.unwrap();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if Arc::strong_count(&self.0) == 1 {
            return;
        }
        self.open();
    }
}

/// An ordered log written by host functions and the test.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }

    fn get(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

#[test]
fn errors_name_the_opencl_call_and_its_status() {
    let v = vendor();
    let buf = v.malloc(4096).unwrap();
    // SAFETY: an overlapping copy inside one live allocation: OpenCL
    // refuses it before running anything.
    let e = unsafe {
        v.memcpy(
            buf.cast::<u8>().add(16).cast(),
            buf,
            64,
            CopyKind::DeviceToDevice,
        )
    }
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(e.vendor_code(), Some(-8), "{e}");
    assert!(
        e.message().contains("clEnqueueSVMMemcpy(")
            && e.message().contains("CL_MEM_COPY_OVERLAP (-8)"),
        "{e}"
    );
    // What the vendor refuses itself says what the pointer or handle is.
    // SAFETY: the pointer is checked against the vendor's record, never used.
    let e = unsafe { v.memset(buf.cast::<u8>().add(4000).cast(), 0, 200) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.message()
            .contains("runs past the end of the device allocation"),
        "{e}"
    );
    // SAFETY: a made-up handle, looked up and refused.
    let e = unsafe { v.stream_synchronize(StreamHandle::from_raw(0x1234)) }.unwrap_err();
    assert!(
        e.message()
            .contains("not a live stream of the OpenCL vendor"),
        "{e}"
    );
    // SAFETY: as above.
    let e = unsafe { v.event_query(EventHandle::from_raw(0x1234)) }.unwrap_err();
    assert!(
        e.message()
            .contains("not a live event of the OpenCL vendor"),
        "{e}"
    );
    // SAFETY: `buf` is live; freed once.
    unsafe { v.free(buf) }.unwrap();
}

/// A failed command on the device, simulated: a marker that waits for a
/// user event which the test sets to an error. PoCL 3.1 aborts the process
/// when a command fails whose event was released or never asked for, so
/// nothing but the failing marker (held here until it has failed) and the
/// event's record (held by the vendor's event) may be queued before the
/// failure.
#[test]
fn a_failed_command_is_reported_where_it_is_waited_for() {
    let v = vendor();
    let s = v.stream_create(0).unwrap();
    let event = v.event_create(false).unwrap();
    let p = v.platform().unwrap();
    let (q, _) = p.queue(s).unwrap();
    let mut code = 0;
    // SAFETY: a live context and a valid out-pointer.
    let user = unsafe { (p.cl.clCreateUserEvent().unwrap())(p.context.0, &mut code) };
    assert_eq!(code, 0);
    let list = [user];
    let mut failing = std::ptr::null_mut();
    // SAFETY: a live queue, a one-event wait list of its context, and an
    // out-event, held until the marker has failed.
    let code = unsafe {
        (p.cl.clEnqueueMarkerWithWaitList().unwrap())(q.0, 1, list.as_ptr(), &mut failing)
    };
    assert_eq!(code, 0);
    // SAFETY: live handles.
    unsafe {
        v.event_record(event, s).unwrap();
        assert!(!v.event_query(event).unwrap(), "pending before the failure");
    }
    // SAFETY: a user event of this context, set once.
    let code = unsafe { (p.cl.clSetUserEventStatus().unwrap())(user, CL_OUT_OF_RESOURCES) };
    assert_eq!(code, 0);
    // SAFETY: live handles.
    unsafe {
        let e = v.event_synchronize(event).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::VendorError, "{e}");
        assert!(
            e.message().starts_with("event_synchronize(")
                && e.message().contains("failed on the device with status -1"),
            "{e}"
        );
        let e = v.event_query(event).unwrap_err();
        assert!(e.message().contains("failed on the device"), "{e}");
        // The failed marker itself: PoCL gives it -1 too, not the user
        // event's -5.
        assert_eq!(p.cl.event_status(Ev(failing)).unwrap(), -1);
    }
    crate::handles::release_event(&p.cl, Ev(failing));
    crate::handles::release_event(&p.cl, Ev(user));
    // Nothing is sticky: waits queued after the failure succeed, and new
    // work runs.
    let buf = v.malloc(64).unwrap();
    let mut back = [0u8; 64];
    // SAFETY: live handles and memory.
    unsafe {
        v.stream_synchronize(s).unwrap();
        v.memset_async(buf, 7, 64, s).unwrap();
        v.event_record(event, s).unwrap();
        v.event_synchronize(event).unwrap();
        v.memcpy(back.as_mut_ptr().cast(), buf, 64, CopyKind::DeviceToHost)
            .unwrap();
        v.free(buf).unwrap();
        v.event_destroy(event).unwrap();
        v.stream_destroy(s).unwrap();
    }
    assert_eq!(back, [7; 64]);
}

#[test]
fn the_memory_budget_gives_out_of_memory() {
    const MIB: usize = 1 << 20;
    let v = vendor_with(Config {
        memory: Some(64 << 20),
        ..Config::default()
    });
    let info = v.memory_info().unwrap();
    assert_eq!(info.total, 64 << 20);
    assert_eq!(info.free, 64 << 20);
    assert_eq!(v.device_properties(0).unwrap().total_memory, 64 << 20);
    let a = v.malloc(40 * MIB).unwrap();
    assert_eq!(v.memory_info().unwrap().free, 24 << 20);
    let e = v.malloc(40 * MIB).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(
        e.message().contains(
            "malloc(41943040 bytes) on device 0: 40.00 MiB of the device's 64.00 MiB are in use"
        ) && e.message().contains("DIPU_OPENCL_MEMORY"),
        "{e}"
    );
    let max = v.platform().unwrap().devices[0].max_alloc as usize;
    let e = v.malloc(max).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(e.message().contains("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), "{e}");
    if v.device_count().unwrap() > 1 {
        // Each device has its own budget.
        v.set_device(1).unwrap();
        let b = v.malloc(40 * MIB).unwrap();
        assert_eq!(v.memory_info().unwrap().free, 24 << 20);
        // SAFETY: live, freed once.
        unsafe { v.free(b) }.unwrap();
        v.set_device(0).unwrap();
    }
    // SAFETY: live, freed once.
    unsafe { v.free(a) }.unwrap();
    assert_eq!(v.memory_info().unwrap().free, 64 << 20);
    let again = v.malloc(60 * MIB).unwrap();
    assert_eq!(again as usize % 256, 0, "256-byte aligned");
    // SAFETY: live, freed once.
    unsafe { v.free(again) }.unwrap();
}

#[test]
fn host_functions_run_in_order_on_the_vendors_thread() {
    let v = vendor();
    let log = Log::default();
    let streams = [v.stream_create(0).unwrap(), v.stream_create(0).unwrap()];
    let gate = Gate::default();
    for &s in &streams {
        gate.block(&v, s);
    }
    let threads = Arc::new(Mutex::new(Vec::new()));
    for i in 0..100 {
        let (log, threads) = (log.clone(), Arc::clone(&threads));
        let s = i % 2;
        let f = Box::new(move || {
            log.push(format!("{s}:{i}"));
            threads
                .lock()
                .unwrap()
                .push(std::thread::current().name().map(str::to_owned));
        });
        // SAFETY: a live stream.
        unsafe { v.launch_host_func(streams[s], f) }.unwrap();
    }
    // A panicking host function is caught; the thread goes on.
    // SAFETY: a live stream.
    unsafe { v.launch_host_func(streams[0], Box::new(|| panic!("a test panic"))) }.unwrap();
    let after = log.clone();
    // SAFETY: a live stream.
    unsafe { v.launch_host_func(streams[0], Box::new(move || after.push("after the panic"))) }
        .unwrap();
    assert!(
        log.get().is_empty(),
        "host functions ran before the gate opened"
    );
    gate.open();
    for &s in &streams {
        // SAFETY: live streams.
        unsafe { v.stream_synchronize(s) }.unwrap();
    }
    let got = log.get();
    assert_eq!(
        got.len(),
        101,
        "each host function ran exactly once: {got:?}"
    );
    for s in 0..2 {
        let mine: Vec<&String> = got
            .iter()
            .filter(|l| l.starts_with(&format!("{s}:")))
            .collect();
        let want: Vec<String> = (0..100)
            .filter(|i| i % 2 == s)
            .map(|i| format!("{s}:{i}"))
            .collect();
        assert_eq!(mine, want.iter().collect::<Vec<_>>(), "stream {s} in order");
    }
    assert_eq!(got.last().unwrap(), "after the panic");
    let names = threads.lock().unwrap();
    assert!(
        names
            .iter()
            .all(|n| n.as_deref() == Some("dipu-opencl-host")),
        "host functions ran on {names:?}"
    );
    for s in streams {
        // SAFETY: live streams, destroyed once.
        unsafe { v.stream_destroy(s) }.unwrap();
    }
}

#[test]
fn host_functions_are_ordered_with_copies() {
    let v = vendor();
    let stream = v.stream_create(0).unwrap();
    let dev = v.malloc(4096).unwrap();
    let pinned = v.malloc_host(4096).unwrap() as usize;
    let seen = Arc::new(AtomicUsize::new(0));
    let gate = Gate::default();
    gate.block(&v, stream);
    // SAFETY: live memory, kept until the stream is synchronised.
    unsafe {
        v.memset_async(dev, 0x5A, 4096, stream).unwrap();
        v.memcpy_async(
            pinned as *mut c_void,
            dev,
            4096,
            CopyKind::DeviceToHost,
            stream,
        )
        .unwrap();
    }
    let s = Arc::clone(&seen);
    let read_then_write = Box::new(move || {
        // SAFETY: pinned memory that the stream's earlier copy filled and
        // later copy reads: the host function runs between the two.
        let bytes = unsafe { std::slice::from_raw_parts_mut(pinned as *mut u8, 4096) };
        s.store(
            bytes.iter().filter(|&&b| b == 0x5A).count(),
            Ordering::SeqCst,
        );
        bytes.fill(0xC3);
    });
    // SAFETY: as above.
    unsafe {
        v.launch_host_func(stream, read_then_write).unwrap();
        v.memcpy_async(
            dev,
            pinned as *const c_void,
            4096,
            CopyKind::HostToDevice,
            stream,
        )
        .unwrap();
    }
    gate.open();
    // SAFETY: a live stream.
    unsafe { v.stream_synchronize(stream) }.unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        4096,
        "the host function saw the copy before it"
    );
    let mut back = vec![0u8; 4096];
    // SAFETY: live memory.
    unsafe {
        v.memcpy(back.as_mut_ptr().cast(), dev, 4096, CopyKind::DeviceToHost)
            .unwrap();
    }
    assert!(
        back.iter().all(|&b| b == 0xC3),
        "the copy after it saw what it wrote"
    );
    // SAFETY: live, freed once.
    unsafe {
        v.stream_destroy(stream).unwrap();
        v.free(dev).unwrap();
        v.free_host(pinned as *mut c_void).unwrap();
    }
}

#[test]
fn an_event_is_recorded_again_and_again() {
    let v = vendor();
    let [a, b, c] = [0; 3].map(|_| v.stream_create(0).unwrap());
    let event = v.event_create(true).unwrap();
    let buf = v.malloc(1 << 16).unwrap();
    // Many records, each replacing the last; waits see the latest.
    for i in 0..50u8 {
        let s = if i % 2 == 0 { a } else { b };
        // SAFETY: live handles and memory.
        unsafe {
            v.memset_async(buf, i, 1 << 16, s).unwrap();
            v.event_record(event, s).unwrap();
            v.stream_wait_event(c, event).unwrap();
            v.event_synchronize(event).unwrap();
            assert!(v.event_query(event).unwrap());
        }
    }
    // A record behind a shut gate on A, then again on idle B: C waits for
    // the latest record only, so its work runs while A is still blocked.
    let gate = Gate::default();
    gate.block(&v, a);
    // SAFETY: live handles.
    unsafe {
        v.event_record(event, a).unwrap();
        assert!(
            !v.event_query(event).unwrap(),
            "a record behind a shut gate is pending"
        );
        v.event_record(event, b).unwrap();
        v.stream_wait_event(c, event).unwrap();
        v.memset_async(buf, 0xEE, 1 << 16, c).unwrap();
        v.stream_synchronize(c).unwrap();
        assert!(!v.stream_query(a).unwrap(), "A is still blocked");
        v.event_synchronize(event).unwrap();
    }
    gate.open();
    // Timing across records: the latest of each.
    let start = v.event_create(true).unwrap();
    // SAFETY: live handles.
    unsafe {
        v.event_record(start, a).unwrap();
        v.launch_host_func(
            a,
            Box::new(|| std::thread::sleep(Duration::from_millis(20))),
        )
        .unwrap();
        v.event_record(event, a).unwrap();
        v.event_synchronize(event).unwrap();
        let ms = v.event_elapsed_ms(start, event).unwrap();
        assert!(ms >= 19.0, "{ms} ms around a 20 ms host function");
        v.event_destroy(start).unwrap();
        v.event_destroy(event).unwrap();
        for s in [a, b, c] {
            v.stream_destroy(s).unwrap();
        }
        v.free(buf).unwrap();
    }
}

#[test]
fn free_waits_for_the_work_queued_before_it() {
    let v = Arc::new(vendor());
    let stream = v.stream_create(0).unwrap();
    let buf = v.malloc(1 << 20).unwrap() as usize;
    let log = Log::default();
    let gate = Gate::default();
    gate.block(&v, stream);
    let l = log.clone();
    // SAFETY: live handles and memory.
    unsafe {
        v.memset_async(buf as *mut c_void, 1, 1 << 20, stream)
            .unwrap();
        v.launch_host_func(stream, Box::new(move || l.push("queued work done")))
            .unwrap();
    }
    let calling = Gate::default();
    let freer = {
        let (v, log, calling) = (Arc::clone(&v), log.clone(), calling.clone());
        std::thread::spawn(move || {
            calling.open();
            // SAFETY: live memory, freed once, while the stream still uses it.
            unsafe { v.free(buf as *mut c_void) }.unwrap();
            log.push("freed");
        })
    };
    calling.wait();
    gate.open();
    freer.join().unwrap();
    assert_eq!(log.get(), ["queued work done", "freed"]);
    // SAFETY: a live stream.
    unsafe { v.stream_destroy(stream) }.unwrap();
}

#[test]
fn coarse_grained_memory_is_not_host_accessible() {
    let v = vendor_with(Config {
        svm: Svm::Coarse,
        ..Config::default()
    });
    assert!(v.capabilities().is_empty());
    let dev = v.malloc(100).unwrap();
    let host = v.malloc_host(100).unwrap();
    // SAFETY: live memory; `host` is pinned host memory of 100 bytes.
    unsafe {
        assert!(std::slice::from_raw_parts(host.cast::<u8>(), 100)
            .iter()
            .all(|&b| b == 0));
        v.memset(dev, 9, 100).unwrap();
        v.memcpy(host, dev, 100, CopyKind::DeviceToHost).unwrap();
        assert!(std::slice::from_raw_parts(host.cast::<u8>(), 100)
            .iter()
            .all(|&b| b == 9));
        v.free_host(host).unwrap();
        v.free(dev).unwrap();
    }
    let fine = vendor();
    let all_fine = fine.platform().unwrap().fine_grain;
    assert_eq!(
        fine.capabilities()
            .contains(dipu_deviceapi::Capabilities::HOST_ACCESSIBLE_MEMORY),
        all_fine
    );
}

#[test]
fn a_missing_loader_or_platform_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = OpenClVendor::with(Search::given([dir.path().to_path_buf()]), Config::default())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::VendorLibraryNotFound);
    let looked = format!(
        "libOpenCL.so.1 not found; looked in: {} (given)",
        dir.path().display()
    );
    assert!(e.message().contains(&looked), "{e}");
    assert!(e.message().contains("ocl-icd-libopencl1"), "{e}");
    vendor(); // the environment, set once
    let mut search = Search::default();
    search.set_system_path(true);
    let config = Config {
        platform: Some("no such platform".into()),
        ..Config::default()
    };
    let v = OpenClVendor::with(search, config).unwrap();
    let e = v.device_count().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert!(
        e.message().contains(
            "DIPU_OPENCL_PLATFORM=\"no such platform\" names none of the OpenCL platforms: "
        ),
        "{e}"
    );
    assert!(
        v.version().contains("names none of the OpenCL platforms"),
        "{}",
        v.version()
    );
}

#[test]
fn native_stream_names_each_devices_default_queue() {
    let v = vendor();
    v.set_device(0).unwrap();
    let q0 = v.native_stream(StreamHandle::DEFAULT).unwrap();
    assert_ne!(q0, 0, "the default stream is a real queue");
    let s = v.stream_create(0).unwrap();
    assert_eq!(
        v.native_stream(s).unwrap(),
        s.as_raw(),
        "a created stream is its queue"
    );
    assert_ne!(s.as_raw(), q0);
    if v.device_count().unwrap() > 1 {
        v.set_device(1).unwrap();
        let q1 = v.native_stream(StreamHandle::DEFAULT).unwrap();
        assert!(q1 != 0 && q1 != q0, "each device has its own default queue");
        v.set_device(0).unwrap();
    }
    assert_eq!(v.native_stream(StreamHandle::DEFAULT).unwrap(), q0);
    // The named default queue is accepted back as a stream (a kernel
    // library queues host functions on what diopiGetStream gave it).
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let named = StreamHandle::from_raw(q0);
    // SAFETY: device 0's default queue, by its handle.
    unsafe {
        v.launch_host_func(
            named,
            Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
            }),
        )
    }
    .unwrap();
    // SAFETY: as above.
    unsafe { v.stream_synchronize(named) }.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // SAFETY: a live stream of `v`, destroyed once.
    unsafe { v.stream_destroy(s) }.unwrap();
    let err = v.native_stream(s).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}

/// A child forked after initialisation is refused with `NoDevice` naming
/// the fork (the fork handler's flag, without a `getpid` per call), and
/// the parent goes on.
#[test]
fn a_child_forked_after_initialisation_is_refused() {
    let v = vendor();
    let p = v.malloc(256).unwrap();
    // SAFETY: the child only takes the vendor's refusal path (no OpenCL
    // call; glibc's malloc is usable after fork) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match v.malloc(256) {
            Err(e) if e.kind() == ErrorKind::NoDevice && e.to_string().contains("forked") => 0,
            _ => 1,
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked, through a valid pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child was not refused with NoDevice (wait status {status})"
    );
    // SAFETY: `p` came from `v.malloc` and nothing uses it.
    unsafe { v.free(p) }.unwrap();
    let q = v.malloc(256).unwrap();
    // SAFETY: `q` came from `v.malloc` and nothing uses it.
    unsafe { v.free(q) }.unwrap();
}
