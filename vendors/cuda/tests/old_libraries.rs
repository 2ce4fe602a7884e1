//! The CUDA vendor on older libraries: the fake built without what the vendor
//! resolves optionally (`dipu-fake-cuda-old`: no virtual-memory driver calls,
//! no peer access, no `ncclCommInitRankConfig`). As in `fakes.rs`, each test
//! re-runs itself in a fresh process with the fake laid out under the real
//! names and found through the vendor's normal search. The vendor must start,
//! run everything the older libraries can do, and report what they lack.

mod common;

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;

use dipu_deviceapi::{Capabilities, CopyKind, DataType, DeviceApi, ErrorKind, ReduceOp};

const CHILD: &str = "DIPU_FAKE_OLD_TEST_CHILD";

/// Runs `body` in a fresh process on the older fake libraries, with `env`.
fn on_old_fakes(name: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    let fake = || common::FakeBuild {
        library: dipu_fake_cuda::layout::built("libdipu_fake_cuda_old.so")
            .expect("libdipu_fake_cuda_old.so next to the test (a dev-dependency builds it)"),
        label: "cuda-old",
        cuda12: false,
    };
    common::run_on_fake(CHILD, name, fake, env, body);
}

fn vendor() -> dipu_vendor_cuda::CudaVendor {
    dipu_vendor_cuda::CudaVendor::new()
        .unwrap_or_else(|e| panic!("the vendor on the older fakes: {e}"))
}

fn trace_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dipu-fake-old-trace-{name}-{}", std::process::id()))
}

fn read_trace() -> String {
    std::fs::read_to_string(std::env::var("DIPU_FAKE_TRACE").unwrap()).unwrap()
}

/// Reads `n` bytes at a fake device pointer (fake device memory is host
/// memory).
fn peek(ptr: *const c_void, n: usize) -> Vec<u8> {
    // SAFETY: a live fake allocation of at least `n` bytes.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), n) }.to_vec()
}

/// Without the driver's virtual-memory calls the vendor still starts and
/// allocates, reports no VIRTUAL_MEMORY, names the missing functions, and
/// expandable segments are refused with an error saying what to do.
#[test]
fn without_virtual_memory_expandable_segments_are_refused_clearly() {
    on_old_fakes(
        "without_virtual_memory_expandable_segments_are_refused_clearly",
        &[],
        || {
            use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig};
            let v = Arc::new(vendor());
            let caps = v.capabilities();
            assert!(!caps.contains(Capabilities::VIRTUAL_MEMORY), "{caps:?}");
            assert!(caps.contains(Capabilities::COLLECTIVES), "{caps:?}");
            let e = v.vmm_granularity().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(
                e.message().contains("virtual memory") && e.message().contains("cuMemCreate"),
                "the error does not name what is missing: {e}"
            );
            let ctx = dipu_stream::DeviceContext::new(v.clone()).unwrap();
            let stream = ctx.new_stream(0, 0).unwrap();
            let expandable = AllocatorConfig::parse("expandable_segments:True").unwrap();
            let refused = new_device_allocator(ctx, 0, Algorithm::Torch, &expandable)
                .and_then(|a| a.allocate(4096, stream).map(|_| ()))
                .unwrap_err();
            assert_eq!(refused.kind(), ErrorKind::Unsupported, "{refused}");
            assert!(
                refused.message().contains("expandable_segments")
                    && refused.message().contains("DIPU_ALLOC_CONF"),
                "{refused}"
            );
            // Plain segments work on the same vendor.
            let a = new_device_allocator(ctx, 0, Algorithm::Torch, &AllocatorConfig::default())
                .unwrap();
            let block = a.allocate(1 << 20, stream).unwrap();
            let data: Vec<u8> = (0..1 << 20).map(|i| (i * 7) as u8).collect();
            // SAFETY: a live block of 1 MiB.
            unsafe {
                v.memcpy(
                    block.ptr,
                    data.as_ptr().cast(),
                    1 << 20,
                    CopyKind::HostToDevice,
                )
            }
            .unwrap();
            assert_eq!(peek(block.ptr, 1 << 20), data);
            a.free(block.ptr).unwrap();
        },
    );
}

/// Without `cudaDeviceCanAccessPeer` the vendor asks for no peer access
/// and a copy between devices still arrives (staged by the runtime).
#[test]
fn without_peer_access_copies_between_devices_still_arrive() {
    let trace = trace_file("peers");
    let t = trace.to_string_lossy().into_owned();
    on_old_fakes(
        "without_peer_access_copies_between_devices_still_arrive",
        &[("DIPU_FAKE_TRACE", &t)],
        || {
            let v = vendor();
            v.set_device(0).unwrap();
            let src = v.malloc(4096).unwrap();
            v.set_device(1).unwrap();
            let dst = v.malloc(4096).unwrap();
            // SAFETY: two live 4096-byte allocations on devices 0 and 1,
            // freed once below.
            unsafe {
                v.memset(src, 0x5a, 4096).unwrap();
                v.memcpy_peer(dst, 1, src, 0, 4096).unwrap();
                assert!(peek(dst, 4096).iter().all(|&b| b == 0x5a));
                v.free(dst).unwrap();
                v.set_device(0).unwrap();
                v.free(src).unwrap();
            }
            let text = read_trace();
            assert!(text.contains("cudaMemcpyPeer"), "no peer copy:\n{text}");
            assert!(
                !text.contains("cudaDeviceEnablePeerAccess"),
                "peer access asked of a runtime without it:\n{text}"
            );
        },
    );
    let _ = std::fs::remove_file(trace);
}

/// An NCCL before 2.14 (no `ncclCommInitRankConfig`): communicators are
/// made with the blocking `ncclCommInitRank` and collectives work.
#[test]
fn an_nccl_without_init_rank_config_uses_the_blocking_init() {
    let trace = trace_file("nccl");
    let t = trace.to_string_lossy().into_owned();
    on_old_fakes(
        "an_nccl_without_init_rank_config_uses_the_blocking_init",
        &[("DIPU_FAKE_TRACE", &t)],
        || {
            let v = Arc::new(vendor());
            assert!(v.version().contains("2.13.4"), "{}", v.version());
            let id = v.comm_get_unique_id().unwrap();
            std::thread::scope(|s| {
                for rank in 0..2usize {
                    let (v, id) = (Arc::clone(&v), id.clone());
                    s.spawn(move || {
                        v.set_device(rank as i32).unwrap();
                        let comm = v.comm_init_rank(2, &id, rank as i32).unwrap();
                        let stream = v.stream_create(0).unwrap();
                        let mine = [(rank + 1) as f32; 4];
                        let bytes: Vec<u8> = mine.iter().flat_map(|f| f.to_ne_bytes()).collect();
                        let buf = v.malloc(16).unwrap();
                        // SAFETY: a 16-byte buffer of four f32s, a live
                        // communicator and stream, synchronised before
                        // reading; everything released once.
                        unsafe {
                            v.memcpy(buf, bytes.as_ptr().cast(), 16, CopyKind::HostToDevice)
                                .unwrap();
                            v.all_reduce(buf, buf, 4, DataType::F32, ReduceOp::Sum, comm, stream)
                                .unwrap();
                            v.stream_synchronize(stream).unwrap();
                            let sum: Vec<f32> = peek(buf, 16)
                                .chunks(4)
                                .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
                                .collect();
                            assert_eq!(sum, [3.0; 4], "rank {rank}");
                            v.free(buf).unwrap();
                            v.stream_destroy(stream).unwrap();
                            v.comm_destroy(comm).unwrap();
                        }
                    });
                }
            });
            let text = read_trace();
            assert!(
                text.contains("ncclCommInitRank 2 0") && text.contains("ncclCommInitRank 2 1"),
                "the blocking init was not used:\n{text}"
            );
        },
    );
    let _ = std::fs::remove_file(trace);
}

/// The conformance suite (`dipu selftest`) on the older libraries: every
/// check runs (none skipped) and passes, the virtual-memory one by finding
/// each of its methods `Unsupported`.
#[test]
fn the_conformance_suite_runs_every_check_and_passes() {
    on_old_fakes(
        "the_conformance_suite_runs_every_check_and_passes",
        &[],
        || {
            let api: Arc<dyn DeviceApi> = Arc::new(vendor());
            let report = dipu_tests::run(&api, None);
            assert_eq!(
                (report.failed(), report.skipped()),
                (0, 0),
                "{report}\n{}",
                report.summary()
            );
            assert!(report.passed() > 0, "{report}");
            assert_eq!(api.capabilities().names(), ["collectives"]);
        },
    );
}
