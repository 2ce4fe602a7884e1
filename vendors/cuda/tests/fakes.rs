//! The CUDA vendor on the fake libraries (`dipu-fake-cuda`), one process per
//! test: the test re-runs itself with the fakes laid out under their real
//! names and found through the vendor's normal search (`DIPU_CUDA_HOME`, and
//! `LD_LIBRARY_PATH` for the driver, set before the process starts). Each
//! test fails on the vendor as it was before the fix it names.

mod common;

use std::ffi::c_void;
use std::path::PathBuf;

use dipu_deviceapi::{CopyKind, DataType, DeviceApi, ErrorKind, ReduceOp};

const CHILD: &str = "DIPU_FAKE_TEST_CHILD";

/// Runs `body` in a fresh process on the fakes, with `env` (and a copy
/// named `libcudart.so.12` when `cuda12`).
fn on_fakes(name: &str, env: &[(&str, &str)], cuda12: bool, body: impl FnOnce()) {
    let fake = || common::FakeBuild {
        library: dipu_fake_cuda::layout::built_library()
            .expect("libdipu_fake_cuda.so next to the test (a dev-dependency builds it)"),
        label: "cuda",
        cuda12,
    };
    common::run_on_fake(CHILD, name, fake, env, body);
}

fn vendor() -> dipu_vendor_cuda::CudaVendor {
    dipu_vendor_cuda::CudaVendor::new().unwrap_or_else(|e| panic!("the vendor on the fakes: {e}"))
}

fn trace_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dipu-fake-trace-{name}-{}", std::process::id()))
}

/// Reads `n` bytes at a fake device pointer (fake device memory is host
/// memory, so the test can look without a copy).
fn peek(ptr: *const c_void, n: usize) -> Vec<u8> {
    // SAFETY: a live fake allocation of at least `n` bytes.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), n) }.to_vec()
}

#[test]
fn synchronous_fills_and_copies_are_done_on_return() {
    // A long latency: work still queued when the call returns shows.
    on_fakes(
        "synchronous_fills_and_copies_are_done_on_return",
        &[("DIPU_FAKE_LATENCY_US", "100000")],
        false,
        || {
            let v = vendor();
            v.set_device(0).unwrap();
            let a = v.malloc(4096).unwrap();
            let b = v.malloc(4096).unwrap();
            // SAFETY: live allocations of 4096 bytes, freed once.
            unsafe {
                v.memset(a, 0x5A, 4096).unwrap();
                assert!(
                    peek(a, 4096).iter().all(|&x| x == 0x5A),
                    "memset returned before the fill"
                );
                v.memcpy(b, a, 4096, CopyKind::DeviceToDevice).unwrap();
                assert!(
                    peek(b, 4096).iter().all(|&x| x == 0x5A),
                    "memcpy returned before the copy"
                );
                let data = vec![7u8; 4096];
                v.memcpy(a, data.as_ptr().cast(), 4096, CopyKind::HostToDevice)
                    .unwrap();
                assert_eq!(
                    peek(a, 4096),
                    data,
                    "a pageable host-to-device copy returned when staged"
                );
                v.memcpy_peer(b, 0, a, 0, 4096).unwrap();
                assert_eq!(peek(b, 4096), data, "memcpy_peer returned before the copy");
                v.free(a).unwrap();
                v.free(b).unwrap();
            }
        },
    );
}

#[test]
fn a_cuda12_driver_gets_the_cuda12_runtime() {
    on_fakes(
        "a_cuda12_driver_gets_the_cuda12_runtime",
        &[("DIPU_FAKE_CUDA_DRIVER_VERSION", "12.8")],
        true,
        || {
            let v = vendor();
            let version = v.version();
            assert!(version.starts_with("CUDA runtime 12.8 "), "{version}");
            assert!(version.contains("libcudart.so.12"), "{version}");
            assert!(v.device_count().unwrap() >= 1);
            assert!(!v.malloc(64).unwrap().is_null());
        },
    );
}

#[test]
fn a_runtime_too_new_for_the_driver_is_named() {
    on_fakes(
        "a_runtime_too_new_for_the_driver_is_named",
        &[("DIPU_FAKE_CUDA_DRIVER_VERSION", "12.8")],
        false,
        || {
            let e = vendor().device_count().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NoDevice);
            let m = e.message();
            assert!(
                m.contains(
                    "libcudart.so.13 needs a newer NVIDIA driver than this machine's (CUDA 12.8)"
                ),
                "{m}"
            );
            assert!(m.contains("-cu12"), "{m}");
        },
    );
}

#[test]
fn creating_the_vendor_does_not_initialise_cuda() {
    on_fakes(
        "creating_the_vendor_does_not_initialise_cuda",
        &[],
        false,
        || {
            let v = vendor();
            // SAFETY: fork in a single-purpose test process; the child only
            // uses the vendor and leaves with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let ok = (|| -> dipu_deviceapi::Result<()> {
                    v.set_device(0)?;
                    let p = v.malloc(64)?;
                    // SAFETY: a live allocation of 64 bytes, freed once.
                    unsafe {
                        v.memset(p, 1, 64)?;
                        v.free(p)
                    }
                })();
                if let Err(e) = &ok {
                    eprintln!("in the child: {e}");
                }
                // SAFETY: leaves the forked child without running the parent's
                // destructors or test harness.
                unsafe { libc::_exit(i32::from(ok.is_err())) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child forked before any device use failed"
            );
        },
    );
}

#[test]
fn a_child_forked_after_initialisation_is_told_why() {
    on_fakes(
        "a_child_forked_after_initialisation_is_told_why",
        &[],
        false,
        || {
            let v = vendor();
            assert!(v.device_count().unwrap() >= 1);
            // SAFETY: as in the test above.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let e = v.malloc(64).unwrap_err();
                let good = e.kind() == ErrorKind::NoDevice && e.message().contains("forked");
                if !good {
                    eprintln!("in the child: {e}");
                }
                // SAFETY: as in the test above.
                unsafe { libc::_exit(i32::from(!good)) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        },
    );
}

#[test]
fn a_failed_cuinit_is_not_a_missing_driver() {
    on_fakes(
        "a_failed_cuinit_is_not_a_missing_driver",
        &[(
            "DIPU_FAKE_FAULTS",
            "fail:cuInit=100,fail:cudaGetDeviceCount=100",
        )],
        false,
        || {
            let e = vendor().device_count().unwrap_err();
            let m = e.message();
            assert!(!m.contains("was not found"), "{m}");
            assert!(
                m.contains("libcuda.so.1) was found but cuInit(0): CUDA_ERROR"),
                "{m}"
            );
        },
    );
}

#[test]
fn peers_get_access_to_virtual_memory_and_copy_directly() {
    let trace = trace_file("peers");
    let t = trace.to_string_lossy().into_owned();
    on_fakes(
        "peers_get_access_to_virtual_memory_and_copy_directly",
        &[("DIPU_FAKE_TRACE", &t)],
        false,
        || {
            let v = vendor();
            v.set_device(0).unwrap();
            let g = v.vmm_granularity().unwrap();
            let base = v.vmm_reserve(g).unwrap();
            let chunk = v.vmm_create(g).unwrap();
            // SAFETY: an aligned, reserved range and a live chunk of `g` bytes;
            // everything is returned below.
            unsafe {
                v.vmm_map(base, g, chunk).unwrap();
                v.memset(base, 0x33, g).unwrap();
                v.set_device(1).unwrap();
                let dst = v.malloc(g).unwrap();
                v.memcpy_peer(dst, 1, base, 0, g).unwrap();
                assert!(peek(dst, g).iter().all(|&b| b == 0x33));
                v.free(dst).unwrap();
                v.set_device(0).unwrap();
                v.vmm_unmap(base, g).unwrap();
                v.vmm_release(chunk).unwrap();
                v.vmm_free_reservation(base, g).unwrap();
            }
            let text = std::fs::read_to_string(std::env::var("DIPU_FAKE_TRACE").unwrap()).unwrap();
            assert!(
                text.contains("access device=1 flags=3"),
                "device 1 was given no access:\n{text}"
            );
            assert!(
                text.contains("cudaDeviceEnablePeerAccess 0 0"),
                "peer access never enabled:\n{text}"
            );
        },
    );
    let _ = std::fs::remove_file(trace);
}

#[test]
fn a_fresh_thread_makes_the_context_current_before_creating_memory() {
    let trace = trace_file("context");
    let t = trace.to_string_lossy().into_owned();
    on_fakes(
        "a_fresh_thread_makes_the_context_current_before_creating_memory",
        &[("DIPU_FAKE_TRACE", &t)],
        false,
        || {
            let v = vendor();
            let g = v.vmm_granularity().unwrap();
            std::thread::Builder::new()
                .name("fresh".into())
                .spawn(move || {
                    let chunk = v.vmm_create(g).unwrap();
                    // SAFETY: a live chunk, released once.
                    unsafe { v.vmm_release(chunk) }.unwrap();
                })
                .unwrap()
                .join()
                .unwrap();
            let text = std::fs::read_to_string(std::env::var("DIPU_FAKE_TRACE").unwrap()).unwrap();
            let fresh: Vec<&str> = text
                .lines()
                .filter(|l| l.ends_with("[fresh]"))
                .map(|l| l.split_whitespace().next().unwrap())
                .collect();
            let set = fresh
                .iter()
                .position(|&c| c == "cuCtxSetCurrent")
                .expect("cuCtxSetCurrent on the fresh thread");
            let create = fresh
                .iter()
                .position(|&c| c == "cuMemCreate")
                .expect("cuMemCreate");
            assert!(set < create, "{fresh:?}");
        },
    );
    let _ = std::fs::remove_file(trace);
}

#[test]
fn a_copy_the_wrong_way_is_refused() {
    on_fakes("a_copy_the_wrong_way_is_refused", &[], false, || {
        let v = vendor();
        let d = v.malloc(64).unwrap();
        let mut host = vec![0u8; 64];
        // SAFETY: both ranges hold 64 bytes; the copy is refused first.
        let e = unsafe { v.memcpy(host.as_mut_ptr().cast(), d, 64, CopyKind::HostToDevice) }
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("cudaPointerGetAttributes"), "{e}");
        // SAFETY: a live allocation, freed once.
        unsafe { v.free(d) }.unwrap();
    });
}

#[test]
fn a_rank_that_never_joins_times_out() {
    on_fakes(
        "a_rank_that_never_joins_times_out",
        &[("DIPU_COMM_TIMEOUT", "0.3")],
        false,
        || {
            let v = vendor();
            let id = v.comm_get_unique_id().unwrap();
            let e = v.comm_init_rank(2, &id, 0).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
            assert!(e.message().contains("DIPU_COMM_TIMEOUT"), "{e}");
        },
    );
}

#[test]
fn an_earlier_nccl_error_is_not_blamed_on_a_later_call() {
    on_fakes(
        "an_earlier_nccl_error_is_not_blamed_on_a_later_call",
        &[("DIPU_FAKE_FAULTS", "fail:ncclGroupStart=3")],
        false,
        || {
            let v = vendor();
            let id = v.comm_get_unique_id().unwrap();
            let first = v.comm_init_rank(1, &id, 5).unwrap_err();
            assert!(first.message().contains("rank 5 of 1"), "{first}");
            let second = v.group_start().unwrap_err();
            assert!(!second.message().contains("rank 5"), "{second}");
        },
    );
}

/// Every collective on `n` ranks as threads of this process.
fn collectives_on(n: usize) {
    let v = std::sync::Arc::new(vendor());
    let id = v.comm_get_unique_id().unwrap();
    std::thread::scope(|s| {
        for rank in 0..n {
            let (v, id) = (std::sync::Arc::clone(&v), id.clone());
            s.spawn(move || {
                v.set_device((rank % 2) as i32).unwrap();
                let comm = v.comm_init_rank(n as i32, &id, rank as i32).unwrap();
                let stream = v.stream_create(0).unwrap();
                let count = 8;
                let mine: Vec<f32> = (0..n * count).map(|i| (rank * 100 + i) as f32).collect();
                let bytes = |x: &[f32]| x.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
                let send = v.malloc(n * count * 4).unwrap();
                let recv = v.malloc(n * count * 4).unwrap();
                // SAFETY: buffers of n * count f32s, a live communicator and
                // stream, synchronised before reading; all released once.
                unsafe {
                    v.memcpy(
                        send,
                        bytes(&mine).as_ptr().cast(),
                        n * count * 4,
                        CopyKind::HostToDevice,
                    )
                    .unwrap();
                    v.all_reduce(
                        send,
                        recv,
                        count,
                        DataType::F32,
                        ReduceOp::Sum,
                        comm,
                        stream,
                    )
                    .unwrap();
                    v.stream_synchronize(stream).unwrap();
                    let want: Vec<f32> = (0..count)
                        .map(|i| (0..n).map(|r| (r * 100 + i) as f32).sum())
                        .collect();
                    assert_eq!(
                        peek(recv, count * 4),
                        bytes(&want),
                        "all_reduce on rank {rank}"
                    );
                    v.all_gather(send, recv, count, DataType::F32, comm, stream)
                        .unwrap();
                    v.stream_synchronize(stream).unwrap();
                    let want: Vec<f32> = (0..n)
                        .flat_map(|r| (0..count).map(move |i| (r * 100 + i) as f32))
                        .collect();
                    assert_eq!(
                        peek(recv, n * count * 4),
                        bytes(&want),
                        "all_gather on rank {rank}"
                    );
                    v.reduce_scatter(
                        send,
                        recv,
                        count,
                        DataType::F32,
                        ReduceOp::Max,
                        comm,
                        stream,
                    )
                    .unwrap();
                    v.broadcast(send, send, count, DataType::F32, 1, comm, stream)
                        .unwrap();
                    v.stream_synchronize(stream).unwrap();
                    let want: Vec<f32> = (0..count)
                        .map(|i| ((n - 1) * 100 + rank * count + i) as f32)
                        .collect();
                    assert_eq!(
                        peek(recv, count * 4),
                        bytes(&want),
                        "reduce_scatter on rank {rank}"
                    );
                    let want: Vec<f32> = (0..count).map(|i| (100 + i) as f32).collect();
                    assert_eq!(
                        peek(send, count * 4),
                        bytes(&want),
                        "broadcast on rank {rank}"
                    );
                    // A ring: send to the next rank, receive from the previous.
                    v.group_start().unwrap();
                    v.send(
                        send,
                        count,
                        DataType::F32,
                        ((rank + 1) % n) as i32,
                        comm,
                        stream,
                    )
                    .unwrap();
                    v.recv(
                        recv,
                        count,
                        DataType::F32,
                        ((rank + n - 1) % n) as i32,
                        comm,
                        stream,
                    )
                    .unwrap();
                    v.group_end().unwrap();
                    v.stream_synchronize(stream).unwrap();
                    assert_eq!(
                        peek(recv, count * 4),
                        bytes(&want),
                        "send/recv on rank {rank}"
                    );
                    v.comm_async_error(comm).unwrap();
                    v.comm_destroy(comm).unwrap();
                    v.stream_destroy(stream).unwrap();
                    v.free(send).unwrap();
                    v.free(recv).unwrap();
                }
            });
        }
    });
}

#[test]
fn collectives_on_two_ranks() {
    on_fakes("collectives_on_two_ranks", &[], false, || collectives_on(2));
}

#[test]
fn collectives_on_four_ranks() {
    on_fakes("collectives_on_four_ranks", &[], false, || {
        collectives_on(4)
    });
}

/// Every allocator algorithm, and expandable segments where they apply,
/// over the CUDA vendor: data survives, freed blocks are reused by the
/// caching algorithms, and emptying the cache gives the memory back.
#[test]
fn every_allocator_algorithm_and_expandable_segments() {
    on_fakes(
        "every_allocator_algorithm_and_expandable_segments",
        &[],
        false,
        || {
            use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig};
            let v = std::sync::Arc::new(vendor());
            let ctx = dipu_stream::DeviceContext::new(v.clone()).unwrap();
            let stream = ctx.new_stream(0, 0).unwrap();
            v.set_device(0).unwrap();
            let before = v.memory_info().unwrap().free;
            let plain = AllocatorConfig::default();
            let expandable = AllocatorConfig::parse("expandable_segments:True").unwrap();
            let mut configs = Vec::new();
            for algorithm in Algorithm::ALL {
                configs.push((algorithm, &plain, "plain"));
                if matches!(algorithm, Algorithm::Torch | Algorithm::BestFit) {
                    configs.push((algorithm, &expandable, "expandable"));
                }
            }
            for (algorithm, config, what) in configs {
                let a = new_device_allocator(ctx, 0, algorithm, config).unwrap();
                let sizes = [1usize, 512, 4096, 1 << 20, (3 << 20) + 7, 6 << 20];
                let mut blocks = Vec::new();
                for (i, &n) in sizes.iter().enumerate() {
                    let block = a.allocate(n, stream).unwrap();
                    let data: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
                    // SAFETY: a live block of at least `n` bytes.
                    unsafe { v.memcpy(block.ptr, data.as_ptr().cast(), n, CopyKind::HostToDevice) }
                        .unwrap();
                    blocks.push((block.ptr, data));
                }
                for (ptr, data) in &blocks {
                    assert_eq!(
                        &peek(*ptr, data.len()),
                        data,
                        "{algorithm:?} {what}: data of a block"
                    );
                }
                let first: Vec<usize> = blocks.iter().map(|b| b.0 as usize).collect();
                for (ptr, _) in &blocks {
                    a.free(*ptr).unwrap();
                }
                ctx.synchronize_device(0).ok();
                let again: Vec<usize> = sizes
                    .iter()
                    .map(|&n| a.allocate(n, stream).unwrap().ptr as usize)
                    .collect();
                if algorithm != Algorithm::Raw {
                    let reused = again.iter().filter(|p| first.contains(p)).count();
                    assert!(
                        reused > 0,
                        "{algorithm:?} {what}: no freed block was reused"
                    );
                }
                for p in again {
                    a.free(p as *mut c_void).unwrap();
                }
                v.synchronize_device().unwrap();
                a.empty_cache().unwrap();
                let after = v.memory_info().unwrap().free;
                assert_eq!(
                    after, before,
                    "{algorithm:?} {what}: memory not given back by empty_cache"
                );
            }
        },
    );
}
