//! On a machine with an NVIDIA GPU (`cargo test -p dipu-vendor-cuda --test
//! gpu -- --ignored`): the whole conformance suite, NCCL collectives on a
//! one-rank communicator, and the virtual-memory sequence. The libraries
//! come from the environment (`DIPU_CUDA_HOME`, `CUDA_HOME`, the active
//! Python, the system), then from the repository's `.venv`.

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use dipu_deviceapi::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceApi, ErrorKind, ReduceOp, StreamHandle,
};

const GPU: &str = "needs an NVIDIA GPU: run with --ignored on a GPU machine";

fn api() -> Arc<dyn DeviceApi> {
    let api: Arc<dyn DeviceApi> = Arc::new(common::gpu_vendor());
    let count = api
        .device_count()
        .unwrap_or_else(|e| panic!("no usable GPU: {e}"));
    assert!(count >= 1);
    api.set_device(0).unwrap();
    api
}

fn upload(api: &dyn DeviceApi, bytes: &[u8]) -> *mut c_void {
    let ptr = api.malloc(bytes.len()).unwrap();
    // SAFETY: a fresh allocation of `bytes.len()` bytes.
    unsafe {
        api.memcpy(
            ptr,
            bytes.as_ptr().cast(),
            bytes.len(),
            CopyKind::HostToDevice,
        )
    }
    .unwrap();
    ptr
}

fn download(api: &dyn DeviceApi, ptr: *const c_void, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `ptr` holds at least `len` device bytes.
    unsafe { api.memcpy(out.as_mut_ptr().cast(), ptr, len, CopyKind::DeviceToHost) }.unwrap();
    out
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on a GPU machine"]
fn the_conformance_suite_passes_in_full() {
    let api = api();
    let report = dipu_tests::run(&api, None);
    println!("{report}\n{}", report.summary());
    assert!(report.success(), "\n{report}");
    assert_eq!(
        report.skipped(),
        0,
        "{GPU}; nothing may be skipped:\n{report}"
    );
    assert!(
        api.capabilities().contains(Capabilities::COLLECTIVES),
        "{}",
        api.version()
    );
}

/// Runs `op` on a fresh one-rank communicator and returns `count` f32 of `recv`.
fn one_rank(
    api: &dyn DeviceApi,
    input: &[f32],
    out_len: usize,
    op: impl FnOnce(*const c_void, *mut c_void, CommHandle, StreamHandle),
) -> Vec<u8> {
    let id = api.comm_get_unique_id().unwrap();
    let comm = api.comm_init_rank(1, &id, 0).unwrap();
    let stream = api.stream_create(0).unwrap();
    let send = upload(api, &f32s(input));
    let recv = api.malloc(out_len * 4).unwrap();
    // SAFETY: `recv` holds `out_len` f32s.
    unsafe { api.memset(recv, 0, out_len * 4) }.unwrap();
    op(send, recv, comm, stream);
    // SAFETY: live stream, buffers and communicator, each released once.
    unsafe {
        api.stream_synchronize(stream).unwrap();
        api.comm_async_error(comm).unwrap();
        let out = download(api, recv, out_len * 4);
        api.comm_destroy(comm).unwrap();
        api.stream_destroy(stream).unwrap();
        api.free(send).unwrap();
        api.free(recv).unwrap();
        out
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on a GPU machine"]
fn nccl_collectives_on_one_rank() {
    let api = api();
    let api = api.as_ref();
    let input: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
    let n = input.len();
    // Every closure below gets live buffers of `n` f32s (4n bytes), a live
    // one-rank communicator and a live stream, synchronized before reading.
    for op in ReduceOp::ALL {
        let out = one_rank(api, &input, n, |s, r, c, st| {
            // SAFETY: as said above.
            unsafe { api.all_reduce(s, r, n, DataType::F32, op, c, st) }.unwrap()
        });
        assert_eq!(out, f32s(&input), "one-rank all_reduce({op:?}) is a copy");
    }
    let out = one_rank(api, &input, n, |s, r, c, st| {
        // SAFETY: as said above.
        unsafe { api.broadcast(s, r, n, DataType::F32, 0, c, st) }.unwrap()
    });
    assert_eq!(out, f32s(&input), "broadcast");
    let out = one_rank(api, &input, n, |s, r, c, st| {
        // SAFETY: as said above.
        unsafe { api.all_gather(s, r, n, DataType::F32, c, st) }.unwrap()
    });
    assert_eq!(out, f32s(&input), "all_gather");
    let out = one_rank(api, &input, n, |s, r, c, st| {
        // SAFETY: as said above.
        unsafe { api.reduce_scatter(s, r, n, DataType::F32, ReduceOp::Sum, c, st) }.unwrap()
    });
    assert_eq!(out, f32s(&input), "reduce_scatter");
    let out = one_rank(api, &input, n, |s, r, c, st| {
        // SAFETY: as said above.
        unsafe { api.reduce(s, r, n, DataType::F32, ReduceOp::Max, 0, c, st) }.unwrap()
    });
    assert_eq!(out, f32s(&input), "reduce");
    // I16 moves as bytes: 1000 f32s are 2000 i16s.
    let out = one_rank(api, &input, n, |s, r, c, st| {
        // SAFETY: as said above.
        unsafe { api.broadcast(s, r, 2 * n, DataType::I16, 0, c, st) }.unwrap()
    });
    assert_eq!(out, f32s(&input), "broadcast of I16 as bytes");
    let out = one_rank(api, &input, n, |s, r, c, st| {
        // SAFETY: as said above (the reduction is refused before NCCL runs).
        let e = unsafe { api.all_reduce(s, r, 2 * n, DataType::I16, ReduceOp::Sum, c, st) };
        assert_eq!(e.unwrap_err().kind(), ErrorKind::Unsupported);
        api.group_start().unwrap();
        // SAFETY: as said above.
        unsafe { api.send(s, n, DataType::F32, 0, c, st) }.unwrap();
        // SAFETY: as said above.
        unsafe { api.recv(r, n, DataType::F32, 0, c, st) }.unwrap();
        api.group_end().unwrap();
    });
    assert_eq!(
        out,
        f32s(&input),
        "send to and receive from itself in a group"
    );
    let id = api.comm_get_unique_id().unwrap();
    let comm = api.comm_init_rank(1, &id, 0).unwrap();
    // SAFETY: a live communicator, aborted once.
    unsafe { api.comm_abort(comm) }.unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored on a GPU machine"]
fn virtual_memory_reserve_map_use_unmap_release() {
    let api = api();
    let api = api.as_ref();
    assert!(
        api.capabilities().contains(Capabilities::VIRTUAL_MEMORY),
        "{}",
        api.version()
    );
    let g = api.vmm_granularity().unwrap();
    assert!(g > 0 && g.is_power_of_two(), "granularity {g}");
    let before = api.memory_info().unwrap();
    let base = api.vmm_reserve(3 * g).unwrap();
    assert_eq!(
        base as usize % g,
        0,
        "the reservation is aligned to the granularity"
    );
    let chunks = [api.vmm_create(g).unwrap(), api.vmm_create(g).unwrap()];
    let created = api.memory_info().unwrap();
    assert!(
        created.free + 2 * g as u64 <= before.free,
        "{before:?} -> {created:?}"
    );
    let second = base.cast::<u8>().wrapping_add(g).cast::<c_void>();
    // SAFETY: granule-aligned addresses in the live reservation, live
    // chunks of `g` bytes; everything is unmapped and released below.
    unsafe {
        api.vmm_map(base, g, chunks[0]).unwrap();
        api.vmm_map(second, g, chunks[1]).unwrap();
        api.memset(base, 0x5A, 2 * g).unwrap();
        assert!(download(api, base, 2 * g).iter().all(|&b| b == 0x5A));
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let across = base.cast::<u8>().add(g - 2048).cast::<c_void>();
        api.memcpy(
            across,
            data.as_ptr().cast(),
            data.len(),
            CopyKind::HostToDevice,
        )
        .unwrap();
        assert_eq!(
            download(api, across, data.len()),
            data,
            "a copy across the two chunks"
        );
        api.synchronize_device().unwrap();
        api.vmm_unmap(base, 2 * g).unwrap();
        for chunk in chunks {
            api.vmm_release(chunk).unwrap();
        }
        api.vmm_free_reservation(base, 3 * g).unwrap();
    }
    let after = api.memory_info().unwrap();
    assert!(
        after.free >= created.free + 2 * g as u64,
        "{created:?} -> {after:?}"
    );
    // On another thread, which has no current context until the vendor
    // makes the primary one current.
    std::thread::scope(|s| {
        s.spawn(|| {
            let chunk = api.vmm_create(g).unwrap();
            // SAFETY: a live chunk, released once.
            unsafe { api.vmm_release(chunk) }.unwrap();
        });
    });
}
