//! The vendor decorator on the host vendor: host slices for every call,
//! device slices on stream tracks, flow arrows from a record to its waits,
//! host callbacks, and nothing while off.

use std::sync::Arc;

use dipu_deviceapi::CopyKind;
use dipu_vendor_host::HostVendor;
use serde_json::Value;

/// The tests share the process's trace: one at a time.
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn events() -> Vec<Value> {
    let doc: Value = serde_json::from_str(&dipu_profiler::to_json()).unwrap();
    doc["traceEvents"].as_array().unwrap().clone()
}

fn named<'a>(evs: &'a [Value], name: &str, cat: &str) -> Vec<&'a Value> {
    evs.iter()
        .filter(|e| e["name"] == name && e["cat"] == cat)
        .collect()
}

#[test]
fn records_host_and_device_times_flows_and_callbacks() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let api = dipu_profiler::wrap(Arc::new(HostVendor::from_env().unwrap()));
    // Off: calls go through and nothing is kept.
    dipu_profiler::clear();
    let p = api.malloc(64).unwrap();
    assert_eq!(dipu_profiler::events(), 0);

    dipu_profiler::start();
    let (s1, s2) = (api.stream_create(0).unwrap(), api.stream_create(0).unwrap());
    let ev = api.event_create(false).unwrap();
    let src = [7u8; 64];
    let (tx, rx) = std::sync::mpsc::channel();
    // SAFETY: `p` holds 64 bytes of this vendor; `src` outlives the
    // synchronize below; streams and event are live.
    unsafe {
        api.memcpy_async(p, src.as_ptr().cast(), 64, CopyKind::HostToDevice, s1)
            .unwrap();
        api.event_record(ev, s1).unwrap();
        api.stream_wait_event(s2, ev).unwrap();
        api.memset_async(p, 0, 64, s2).unwrap();
        api.launch_host_func(s2, Box::new(move || tx.send(()).unwrap()))
            .unwrap();
        api.event_synchronize(ev).unwrap();
        api.stream_synchronize(s2).unwrap();
    }
    rx.recv().unwrap();
    dipu_profiler::stop();
    let evs = events();

    // Host slices, on a thread of this process.
    let host = named(&evs, "memcpy_async", "vendor");
    let pid = i64::from(std::process::id());
    assert!(
        host.iter().any(|e| e["ph"] == "X" && e["pid"] == pid),
        "{host:?}"
    );
    assert_eq!(named(&evs, "stream_create", "vendor").len(), 2);
    // The same copy at device time, on stream s1's track (a device pid).
    let device_copy: Vec<_> = host.iter().filter(|e| e["pid"] != pid).collect();
    assert_eq!(device_copy.len(), 1, "{host:?}");
    assert_eq!(device_copy[0]["tid"], s1.as_raw());
    assert_eq!(device_copy[0]["args"]["bytes"], 64);
    // One flow arrow from the record on s1 to the wait on s2, and one to
    // the host's event_synchronize.
    let starts: Vec<_> = evs.iter().filter(|e| e["ph"] == "s").collect();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0]["tid"], s1.as_raw());
    let ends: Vec<_> = evs
        .iter()
        .filter(|e| e["ph"] == "f" && e["id"] == starts[0]["id"])
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(ends
        .iter()
        .any(|e| e["tid"] == s2.as_raw() && e["pid"] != pid));
    assert!(ends.iter().any(|e| e["pid"] == pid));
    // The host callback ran, on the thread that ran it.
    assert_eq!(named(&evs, "host_callback", "callback").len(), 1);
    // Stream tracks are named.
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "M"
            && e["args"]["name"] == format!("device 0 stream {:#x}", s1.as_raw())));

    // Failures are recorded with their error.
    dipu_profiler::clear();
    dipu_profiler::start();
    assert!(api.set_device(99).is_err());
    dipu_profiler::stop();
    let evs = events();
    let failed = named(&evs, "set_device", "vendor");
    assert_eq!(failed[0]["args"]["error"], "invalid device");

    // SAFETY: our own live allocation, streams and event.
    unsafe {
        api.free(p).unwrap();
        api.event_destroy(ev).unwrap();
        api.stream_destroy(s1).unwrap();
        api.stream_destroy(s2).unwrap();
    }
    dipu_profiler::clear();
}

#[test]
fn collectives_are_timed_on_their_stream() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let api = dipu_profiler::wrap(Arc::new(HostVendor::from_env().unwrap()));
    let id = api.comm_get_unique_id().unwrap();
    let comm = api.comm_init_rank(1, &id, 0).unwrap();
    let s = api.stream_create(0).unwrap();
    let buf = api.malloc(16).unwrap();
    dipu_profiler::clear();
    dipu_profiler::start();
    // SAFETY: `buf` holds 16 bytes (4 f32) of this vendor; comm and
    // stream are live.
    unsafe {
        api.all_reduce(
            buf,
            buf,
            4,
            dipu_deviceapi::DataType::F32,
            dipu_deviceapi::ReduceOp::Sum,
            comm,
            s,
        )
        .unwrap();
        api.stream_synchronize(s).unwrap();
    }
    dipu_profiler::stop();
    let evs = events();
    let ar = named(&evs, "all_reduce", "comm");
    let pid = i64::from(std::process::id());
    // Queued (host) and run (device, on the stream's track).
    assert!(ar.iter().any(|e| e["pid"] == pid), "{ar:?}");
    let dev: Vec<_> = ar.iter().filter(|e| e["pid"] != pid).collect();
    assert_eq!(dev.len(), 1, "{ar:?}");
    assert_eq!(dev[0]["tid"], s.as_raw());
    assert_eq!(dev[0]["args"]["bytes"], 16);
    // SAFETY: our own live allocation, communicator and stream.
    unsafe {
        api.free(buf).unwrap();
        api.comm_destroy(comm).unwrap();
        api.stream_destroy(s).unwrap();
    }
    dipu_profiler::clear();
}

/// A dump does not hang on a stream that does not finish: it waits at
/// most `dump_wait`, writes what completed, and says in the trace which
/// work was still pending; once the stream finishes, a later dump has it.
#[test]
fn a_dump_waits_a_bounded_time_and_marks_what_is_pending() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let api = dipu_profiler::wrap(Arc::new(HostVendor::from_env().unwrap()));
    let p = api.malloc(64).unwrap();
    let s = api.stream_create(0).unwrap();
    dipu_profiler::clear();
    dipu_profiler::start();
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    // SAFETY: `p` holds 64 bytes of this vendor; the stream is live.
    unsafe {
        api.memset_async(p, 1, 64, s).unwrap();
        api.stream_synchronize(s).unwrap();
        // The stream is stuck behind this callback until `release` sends.
        // (A failed test drops `release`, which lets the stream go on.)
        api.launch_host_func(s, Box::new(move || blocked.recv().unwrap_or_default()))
            .unwrap();
        api.memset_async(p, 2, 64, s).unwrap();
    }
    dipu_profiler::stop();
    dipu_profiler::set_dump_wait(std::time::Duration::from_millis(300));
    let t = std::time::Instant::now();
    let evs = events();
    let took = t.elapsed();
    // It waited, and then gave up (the marks below) instead of hanging.
    assert!(
        took >= std::time::Duration::from_millis(250),
        "it waited: {took:?}"
    );
    let marks = named(&evs, "still pending at dump", "vendor");
    assert_eq!(marks.len(), 1, "{evs:?}");
    assert_eq!(marks[0]["args"]["work"], "memset_async", "{:?}", marks[0]);
    assert_eq!(marks[0]["args"]["waited_ms"], 300, "{:?}", marks[0]);
    let summary = named(&evs, "device work still pending at dump", "stream");
    assert_eq!(summary.len(), 1, "{evs:?}");
    assert_eq!(summary[0]["args"]["slices"], 1);
    // The first memset completed: on its stream's track at device time.
    let done: Vec<_> = named(&evs, "memset_async", "vendor")
        .into_iter()
        .filter(|e| e["pid"] != i64::from(std::process::id()))
        .collect();
    assert_eq!(done.len(), 1, "the completed one only: {done:?}");

    // Unblocked, the next dump collects it and marks nothing.
    release.send(()).unwrap();
    // SAFETY: the stream is live.
    unsafe { api.stream_synchronize(s).unwrap() };
    dipu_profiler::clear();
    let evs = events();
    assert!(
        named(&evs, "still pending at dump", "vendor").is_empty(),
        "{evs:?}"
    );
    assert_eq!(named(&evs, "memset_async", "vendor").len(), 1, "{evs:?}");
    dipu_profiler::set_dump_wait(dipu_profiler::DEFAULT_DUMP_WAIT);
    dipu_profiler::clear();
    // SAFETY: `p` is this vendor's and nothing uses it any more.
    unsafe { api.free(p).unwrap() };
}
