//! The vendor, as a plugin, on the fake libraries: the whole conformance
//! suite, the traps the vendor absorbs (sticky errors, priorities, the
//! shared default queue, 136-byte clique ids, in-place broadcast, missing
//! types and operators), and the process group's collectives on 2 and 4
//! thread ranks.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dipu_comm::store::{HashStore, Store};
use dipu_comm::{Buffer, Options, ProcessGroup};
use dipu_deviceapi::{DataType, DeviceApi, ErrorKind, Loader, ReduceOp, StreamHandle, VendorSpec};
use dipu_runtime::{Runtime, RuntimeOptions};

/// The fake's directory, kept for the binary's life; 4 devices.
fn home() -> &'static std::path::Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        common::fake_neuware(dir.path());
        // SAFETY: set once, before the fake reads it, under the OnceLock.
        std::env::set_var("DIPU_FAKE_DEVICES", "4");
        std::env::set_var("NEUWARE_HOME", dir.path());
        dir
    })
    .path()
}

fn api() -> Arc<dyn DeviceApi> {
    static API: OnceLock<Arc<dyn DeviceApi>> = OnceLock::new();
    Arc::clone(API.get_or_init(|| {
        home();
        Loader::new()
            .load(&VendorSpec::Path(common::plugin_path()))
            .unwrap_or_else(|e| panic!("the vendor does not start on the fake: {e}"))
            .api
    }))
}

/// The fake's `cnrtPeekAtLastError`, called on this thread.
fn peek_last_error() -> i32 {
    let lib = home().join("lib64/libcnrt.so");
    // SAFETY: the fake, already loaded by the vendor; this opens it again.
    let lib = unsafe { libloading::Library::new(lib) }.unwrap();
    // SAFETY: `int cnrtPeekAtLastError(void)`.
    let peek =
        // SAFETY: live handles and buffers of this vendor, as the call needs.
        unsafe { lib.get::<unsafe extern "C" fn() -> i32>(b"cnrtPeekAtLastError\0") }.unwrap();
    // SAFETY: no arguments.
    unsafe { peek() }
}

/// The fake's devices are the process's: the conformance suite counts
/// free memory, so the tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn the_conformance_suite_passes_on_the_fake() {
    let _turn = serial();
    let report = dipu_tests::run(&api(), None);
    assert_eq!(report.failed(), 0, "{report}");
    assert_eq!(report.skipped(), 0, "{report}");
}

#[test]
fn a_pending_query_leaves_no_sticky_error() {
    let _turn = serial();
    let api = api();
    let stream = api.stream_create(0).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // SAFETY: a live stream; the callback only waits on a channel.
    unsafe {
        api.launch_host_func(
            stream,
            Box::new(move || {
                let _ = rx.recv();
            }),
        )
    }
    .unwrap();
    // SAFETY: a live stream.
    assert!(
        // SAFETY: live handles and buffers of this vendor, as the call needs.
        !unsafe { api.stream_query(stream) }.unwrap(),
        "the stream is blocked"
    );
    assert_eq!(
        peek_last_error(),
        0,
        "cnrtErrorNotReady was left as the thread's sticky error"
    );
    tx.send(()).unwrap();
    // SAFETY: a live stream, destroyed once.
    unsafe { api.stream_destroy(stream) }.unwrap();
}

#[test]
fn priorities_are_translated_to_cnrt_and_clamped() {
    let _turn = serial();
    let api = api();
    let range = api.stream_priority_range().unwrap();
    assert_eq!((range.least, range.greatest), (0, -7));
    // The fake refuses CNRT priorities outside 0..=7: each of these only
    // works because the vendor translates (and clamps) them.
    for p in [0, -3, -7, -100, 5] {
        let s = api
            .stream_create(p)
            .unwrap_or_else(|e| panic!("priority {p}: {e}"));
        // SAFETY: a live stream, destroyed once.
        unsafe { api.stream_destroy(s) }.unwrap();
    }
}

#[test]
fn the_default_stream_is_shared_by_threads() {
    let _turn = serial();
    let api = api();
    let ptr = api.malloc(4).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    // SAFETY: the default stream; the callback waits on a channel.
    unsafe {
        api.launch_host_func(
            StreamHandle::DEFAULT,
            Box::new(move || {
                let _ = rx.recv();
            }),
        )
    }
    .unwrap();
    let other = Arc::clone(&api);
    // On another thread, the default stream is the same queue: still busy.
    // SAFETY: the default stream.
    let busy =
        // SAFETY: live handles and buffers of this vendor, as the call needs.
        std::thread::spawn(move || !unsafe { other.stream_query(StreamHandle::DEFAULT) }.unwrap())
            .join()
            .unwrap();
    tx.send(()).unwrap();
    // SAFETY: the default stream, and a live allocation freed once.
    unsafe { api.stream_synchronize(StreamHandle::DEFAULT) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.free(ptr) }.unwrap();
    assert!(
        busy,
        "another thread's DEFAULT was not the same queue (CNRT's NULL queue is per thread)"
    );
}

#[test]
fn clique_ids_carry_all_136_bytes_and_are_single_use() {
    let _turn = serial();
    let api = api();
    assert_eq!(api.comm_unique_id_size(), 136);
    let id = api.comm_get_unique_id().unwrap();
    assert_eq!(id.len(), 136);
    // Only the 128 data bytes (as DIPU and torch_mlu send): refused.
    let err = api.comm_init_rank(1, &id[..128], 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    // A changed hash: CNCL refuses it.
    let mut bad = id.clone();
    bad[130] ^= 0xff;
    let err = api.comm_init_rank(1, &bad, 0).unwrap_err();
    assert_eq!(err.vendor_code(), Some(0x07), "{err}");
    let comm = api.comm_init_rank(1, &id, 0).unwrap();
    // The same id a second time in this process.
    let err = api.comm_init_rank(1, &id, 0).unwrap_err();
    assert_eq!(err.vendor_code(), Some(0x07), "{err}");
    // SAFETY: a live communicator; healthy, then destroyed once.
    unsafe { api.comm_async_error(comm) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.comm_destroy(comm) }.unwrap();
}

fn runtime() -> Arc<Runtime> {
    static RT: OnceLock<Arc<Runtime>> = OnceLock::new();
    Arc::clone(RT.get_or_init(|| {
        home();
        Runtime::new(RuntimeOptions::default().with_vendor(VendorSpec::Path(common::plugin_path())))
            .expect("the runtime on the Cambricon vendor")
    }))
}

/// Runs `f` on `n` thread ranks, rank r on device r.
fn with_ranks<R: Send>(n: i32, f: impl Fn(&ProcessGroup) -> R + Sync) -> Vec<R> {
    let rt = runtime();
    let store: Arc<dyn Store> = Arc::new(HashStore::new());
    store.set_timeout(Duration::from_secs(30));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (rt, store, f) = (Arc::clone(&rt), Arc::clone(&store), &f);
                s.spawn(move || {
                    rt.set_device(rank).unwrap();
                    let stream = rt.context().new_stream(rank, 0).unwrap();
                    rt.context().set_current_stream(stream);
                    let options = Options::default().with_timeout(Duration::from_secs(30));
                    let pg = ProcessGroup::new(rt, store, rank, n, rank, options).unwrap();
                    f(&pg)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn upload(pg: &ProcessGroup, values: &[f32]) -> (dipu_runtime::DeviceBuffer, Buffer) {
    let rt = runtime();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let stream = rt.context().current_stream(pg.device()).unwrap();
    let dev = rt.allocate(bytes.len(), stream).unwrap();
    dev.copy_from_host(&bytes, None).unwrap();
    let buf = Buffer::from_device_buffer(&dev, DataType::F32).unwrap();
    (dev, buf)
}

fn download(dev: &dipu_runtime::DeviceBuffer) -> Vec<f32> {
    let mut bytes = vec![0u8; dev.len()];
    dev.copy_to_host(&mut bytes, None).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn process_group_collectives_on_2_and_4_ranks() {
    let _turn = serial();
    for n in [2, 4] {
        with_ranks(n, |pg| {
            let r = pg.rank() as f32;
            let count = 1001;
            for (op, want) in [
                (ReduceOp::Sum, (0..n).map(|k| k as f32 + 1.0).sum::<f32>()),
                (ReduceOp::Max, n as f32),
                (ReduceOp::Min, 1.0),
                (
                    ReduceOp::Avg,
                    (0..n).map(|k| k as f32 + 1.0).sum::<f32>() / n as f32,
                ),
            ] {
                let (dev, buf) = upload(pg, &vec![r + 1.0; count]);
                pg.all_reduce(&buf, op).unwrap().wait().unwrap();
                assert!(
                    download(&dev).iter().all(|&v| v == want),
                    "{n} ranks, {op:?}"
                );
            }
            // In-place broadcast (cnclBcast) from the last rank.
            let (dev, buf) = upload(pg, &vec![r * 10.0; count]);
            pg.broadcast(&buf, n - 1).unwrap().wait().unwrap();
            assert!(download(&dev).iter().all(|&v| v == (n - 1) as f32 * 10.0));
            // All-gather into one buffer.
            let (_input_dev, input) = upload(pg, &[r; 3]);
            let (out_dev, output) = upload(pg, &vec![-1.0; 3 * n as usize]);
            pg.all_gather_into(&output, &input).unwrap().wait().unwrap();
            let want: Vec<f32> = (0..n).flat_map(|k| [k as f32; 3]).collect();
            assert_eq!(download(&out_dev), want, "{n} ranks, all_gather");
            // A ring of sends and receives.
            let (_send_dev, send) = upload(pg, &[r; 5]);
            let (recv_dev, recv) = upload(pg, &[-1.0; 5]);
            let next = (pg.rank() + 1) % n;
            let prev = (pg.rank() + n - 1) % n;
            if pg.rank() % 2 == 0 {
                pg.send(&send, next, 0).unwrap().wait().unwrap();
                pg.recv(&recv, prev, 0).unwrap().wait().unwrap();
            } else {
                pg.recv(&recv, prev, 0).unwrap().wait().unwrap();
                pg.send(&send, next, 0).unwrap().wait().unwrap();
            }
            assert_eq!(download(&recv_dev), vec![prev as f32; 5]);
        });
    }
}

#[test]
fn cncl_lacks_fp64_reductions_and_average() {
    let _turn = serial();
    let api = api();
    let id = api.comm_get_unique_id().unwrap();
    let comm = api.comm_init_rank(1, &id, 0).unwrap();
    let p = api.malloc(64).unwrap();
    // SAFETY: live 64-byte device buffers and communicator.
    let err = unsafe {
        api.all_reduce(
            p,
            p,
            8,
            DataType::F64,
            ReduceOp::Sum,
            comm,
            StreamHandle::DEFAULT,
        )
    }
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    let err = unsafe {
        api.all_reduce(
            p,
            p,
            16,
            DataType::F32,
            ReduceOp::Avg,
            comm,
            StreamHandle::DEFAULT,
        )
    }
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    // Moving fp64 works: it travels as bytes.
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.broadcast(p, p, 8, DataType::F64, 0, comm, StreamHandle::DEFAULT) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.stream_synchronize(StreamHandle::DEFAULT) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.comm_destroy(comm) }.unwrap();
    // SAFETY: live handles and buffers of this vendor, as the call needs.
    unsafe { api.free(p) }.unwrap();
}

#[test]
fn a_peer_freed_early_fails_the_others_instead_of_hanging() {
    let _turn = serial();
    let api = api();
    let id = api.comm_get_unique_id().unwrap();
    let a = Arc::clone(&api);
    let id2 = id.clone();
    // Rank 1 joins on device 1, then leaves at once.
    let leaver = std::thread::spawn(move || {
        a.set_device(1).unwrap();
        let comm = a.comm_init_rank(2, &id2, 1).unwrap();
        // SAFETY: a live communicator, destroyed once.
        unsafe { a.comm_destroy(comm) }.unwrap();
    });
    let comm = api.comm_init_rank(2, &id, 0).unwrap();
    leaver.join().unwrap();
    let p = api.malloc(64).unwrap();
    let s = api.stream_create(0).unwrap();
    let started = std::time::Instant::now();
    // SAFETY: live buffers, stream and communicator.
    unsafe { api.all_reduce(p, p, 16, DataType::F32, ReduceOp::Sum, comm, s) }.unwrap();
    // SAFETY: a live stream.
    unsafe { api.stream_synchronize(s) }.unwrap();
    // SAFETY: a live communicator.
    let err = unsafe { api.comm_async_error(comm) }.unwrap_err();
    assert_eq!(err.vendor_code(), Some(0x16), "{err}");
    // The fake fails the same way when its 60 s timeout runs out, and says
    // nothing else about why: only the time tells the two apart. Only a
    // survivor that waited the timeout out takes that long.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the survivor waited for the fake's 60 s timeout"
    );
    // SAFETY: live handles, released once.
    unsafe { api.comm_destroy(comm) }.unwrap();
    // SAFETY: as above.
    unsafe { api.stream_destroy(s) }.unwrap();
    // SAFETY: as above.
    unsafe { api.free(p) }.unwrap();
}
