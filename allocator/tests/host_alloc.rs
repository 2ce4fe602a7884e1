//! The pinned-host allocator on the host vendor.

use std::ffi::c_void;
use std::sync::{mpsc, Arc};

use dipu_allocator::{HostAlgorithm, HostAllocator, ENV_HOST_ALGORITHM};
use dipu_deviceapi::ErrorKind;
use dipu_stream::{DeviceContext, Stream};
use dipu_vendor_host::{HostConfig, HostVendor};

fn ctx() -> &'static DeviceContext {
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
    DeviceContext::new(vendor).unwrap()
}

/// Keeps `stream` busy until the returned sender is dropped or sent to.
fn hold(ctx: &'static DeviceContext, stream: Stream) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    // SAFETY: the stream came from this context's vendor and pooled streams
    // are never destroyed; the callback does not call the vendor.
    unsafe {
        ctx.api().launch_host_func(
            stream.raw(),
            Box::new(move || {
                let _ = rx.recv();
            }),
        )
    }
    .unwrap();
    tx
}

/// Fills `bytes` at `ptr` with `value` and reads them back.
fn touch(ptr: *mut c_void, bytes: usize, value: u8) {
    // SAFETY: `ptr` is a live pinned block of at least `bytes` bytes that
    // only this thread uses.
    let block = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), bytes) };
    block.fill(value);
    assert!(block.iter().all(|&b| b == value));
}

#[test]
fn bs_reuses_blocks_of_the_same_bin() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    assert_eq!(alloc.algorithm(), HostAlgorithm::BinSize);
    assert!(alloc.allocate(0).unwrap().is_null());
    alloc.free(std::ptr::null_mut()).unwrap();

    let a = alloc.allocate(1000).unwrap();
    assert!(!a.is_null());
    touch(a, 1000, 0xab);
    let s = alloc.stats();
    assert_eq!(s.allocation.current, 1);
    assert_eq!(
        s.allocated_bytes.current, 1024,
        "1000 bytes go in the 1024 bin"
    );
    assert_eq!(s.requested_bytes.current, 1000);
    assert_eq!((s.segment.current, s.reserved_bytes.current), (1, 1024));
    assert_eq!(s.num_device_alloc, 1);

    alloc.free(a).unwrap();
    let s = alloc.stats();
    assert_eq!((s.allocation.current, s.active.current), (0, 0));
    assert_eq!(s.reserved_bytes.current, 1024, "the block stays cached");
    assert_eq!(s.num_device_free, 0);

    let b = alloc.allocate(900).unwrap();
    assert_eq!(a, b, "a request of the same bin gets the cached block");
    assert_eq!(alloc.stats().num_device_alloc, 1);
    touch(b, 900, 1);

    let c = alloc.allocate(1100).unwrap();
    assert_ne!(c, b, "another bin needs another block");
    let s = alloc.stats();
    assert_eq!(s.num_device_alloc, 2);
    assert_eq!(
        s.allocated_bytes.current,
        1024 + 1280,
        "bins step by a quarter of the power of two"
    );
    alloc.free(b).unwrap();
    alloc.free(c).unwrap();
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 0);
    assert_eq!(s.num_device_free, 2);
}

#[test]
fn raw_never_caches() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::Raw);
    let a = alloc.allocate(1000).unwrap();
    touch(a, 1000, 7);
    let s = alloc.stats();
    assert_eq!(s.allocated_bytes.current, 1000, "RAW does not round");
    assert_eq!(s.reserved_bytes.current, 1000);
    alloc.free(a).unwrap();
    let s = alloc.stats();
    assert_eq!((s.reserved_bytes.current, s.num_device_free), (0, 1));
    let b = alloc.allocate(1000).unwrap();
    assert_eq!(alloc.stats().num_device_alloc, 2, "nothing was cached");

    // A block used on a stream goes back once the stream's work is done.
    let stream = ctx.stream_from_pool(0, false).unwrap();
    alloc.record_event(b, stream).unwrap();
    alloc.free(b).unwrap();
    stream.synchronize().unwrap();
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 0);
    assert_eq!(s.active.current, 0);
    assert_eq!(s.num_device_free, 2);
}

#[test]
fn a_block_used_on_a_busy_stream_waits_for_it() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    let stream = ctx.stream_from_pool(0, false).unwrap();
    // Declared after `alloc`, so a failed assertion releases the stream
    // before the allocator's drop (the host vendor's free_host waits for
    // every stream).
    let release = hold(ctx, stream);

    let a = alloc.allocate(4096).unwrap();
    alloc.record_event(a, stream).unwrap();
    alloc.record_event(a, stream).unwrap();
    alloc.free(a).unwrap();
    let s = alloc.stats();
    assert_eq!(s.allocation.current, 0);
    assert_eq!(
        (s.active.current, s.active_bytes.current),
        (1, 4096),
        "pending until the stream is done"
    );
    assert_eq!(
        alloc.free(a).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );

    let b = alloc.allocate(4096).unwrap();
    assert_ne!(
        a, b,
        "the pending block is not reused while its stream is busy"
    );
    assert_eq!(alloc.stats().num_device_alloc, 2);
    alloc.free(b).unwrap();
    let c = alloc.allocate(4096).unwrap();
    assert_eq!(c, b, "the block without events is reused");
    alloc.free(c).unwrap();
    let s = alloc.stats();
    assert_eq!((s.reserved_bytes.current, s.active.current), (8192, 1));
    // (No empty_cache here: the host vendor's free_host waits for every
    // stream, the held one included.)

    drop(release);
    stream.synchronize().unwrap();
    let d = alloc.allocate(4096).unwrap();
    assert_eq!(d, a, "reused once the stream's work is done");
    let e = alloc.allocate(4096).unwrap();
    assert_eq!(e, b);
    let s = alloc.stats();
    assert_eq!(s.num_device_alloc, 2);
    assert_eq!((s.active.current, s.allocation.current), (2, 2));
    alloc.free(d).unwrap();
    alloc.free(e).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 0);
}

#[test]
fn the_environment_chooses_the_algorithm() {
    let ctx = ctx();
    // The only test that touches the environment.
    std::env::set_var(ENV_HOST_ALGORITHM, "XYZ");
    let e = HostAllocator::from_env(ctx).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    for needle in [ENV_HOST_ALGORITHM, "\"XYZ\"", "BS", "RAW"] {
        assert!(e.message().contains(needle), "{needle} missing from: {e}");
    }
    std::env::set_var(ENV_HOST_ALGORITHM, " raw ");
    assert_eq!(
        HostAllocator::from_env(ctx).unwrap().algorithm(),
        HostAlgorithm::Raw
    );
    std::env::set_var(ENV_HOST_ALGORITHM, "BS");
    assert_eq!(
        HostAllocator::from_env(ctx).unwrap().algorithm(),
        HostAlgorithm::BinSize
    );
    std::env::set_var(ENV_HOST_ALGORITHM, "");
    assert_eq!(HostAlgorithm::from_env().unwrap(), HostAlgorithm::DEFAULT);
    std::env::remove_var(ENV_HOST_ALGORITHM);
    assert_eq!(HostAlgorithm::from_env().unwrap(), HostAlgorithm::BinSize);
    assert_eq!(
        "Bs".parse::<HostAlgorithm>().unwrap(),
        HostAlgorithm::BinSize
    );
    assert_eq!(HostAlgorithm::Raw.to_string(), "RAW");
}

#[test]
fn unknown_and_double_frees_are_errors_that_change_nothing() {
    let ctx = ctx();
    for algorithm in HostAlgorithm::ALL {
        let alloc = HostAllocator::new(ctx, algorithm);
        let keep = alloc.allocate(64).unwrap();
        let a = alloc.allocate(100).unwrap();
        alloc.free(a).unwrap();
        let before = alloc.stats();

        let e = alloc.free(a).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{algorithm}");
        assert!(e.message().contains("already freed"), "{algorithm}: {e}");
        assert_eq!(alloc.stats(), before);

        let mut local = 0u64;
        let unknown = (&mut local as *mut u64).cast::<c_void>();
        let e = alloc.free(unknown).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("not allocated by"), "{e}");
        let inside = keep.cast::<u8>().wrapping_add(8).cast::<c_void>();
        assert_eq!(
            alloc.free(inside).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(alloc.stats(), before);

        let stream = ctx.default_stream(0).unwrap();
        let e = alloc.record_event(a, stream).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("record_event"), "{e}");
        let other = ctx_stream_of_another_context();
        assert_eq!(
            alloc.record_event(keep, other).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(alloc.stats(), before);
        alloc.free(keep).unwrap();
    }
}

fn ctx_stream_of_another_context() -> Stream {
    ctx().default_stream(0).unwrap()
}

#[test]
fn stats_track_current_peak_and_totals() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    let a = alloc.allocate(3000).unwrap(); // bin 3072
    let b = alloc.allocate(5000).unwrap(); // bin 5120
    let s = alloc.stats();
    assert_eq!(s.allocation.current, 2);
    assert_eq!(s.allocated_bytes.current, 3072 + 5120);
    assert_eq!(s.requested_bytes.current, 8000);
    assert_eq!(s.segment.current, 2);
    alloc.free(b).unwrap();
    let s = alloc.stats();
    assert_eq!(s.allocated_bytes.current, 3072);
    assert_eq!(s.allocated_bytes.peak, 3072 + 5120);
    assert_eq!(s.allocated_bytes.freed, 5120);
    assert_eq!(s.requested_bytes.peak, 8000);
    assert_eq!(s.reserved_bytes.current, 3072 + 5120);
    alloc.reset_peak_stats();
    let s = alloc.stats();
    assert_eq!(s.allocated_bytes.peak, 3072);
    assert_eq!(s.allocation.peak, 1);
    assert_eq!(s.allocation.allocated, 2, "totals survive a peak reset");
    alloc.free(a).unwrap();
    let s = alloc.stats();
    assert_eq!((s.allocation.current, s.allocated_bytes.current), (0, 0));
    assert_eq!((s.active.current, s.active_bytes.current), (0, 0));
    assert_eq!(
        (s.num_alloc_retries, s.num_ooms, s.num_sync_all_streams),
        (0, 0, 0)
    );
}

#[test]
fn empty_cache_gives_every_cached_block_back() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    let stream = ctx.stream_from_pool(0, false).unwrap();
    let blocks: Vec<_> = (1..=5).map(|i| alloc.allocate(i * 1000).unwrap()).collect();
    let live = alloc.allocate(100).unwrap();
    alloc.record_event(blocks[0], stream).unwrap();
    for &b in &blocks {
        alloc.free(b).unwrap();
    }
    stream.synchronize().unwrap();
    assert!(alloc.stats().reserved_bytes.current > 512);

    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!(s.reserved_bytes.current, 512, "only the live block is kept");
    assert_eq!((s.segment.current, s.active.current), (1, 1));
    assert_eq!(s.num_device_free, 5);
    // SAFETY: the host vendor checks every free_host against its registry of
    // live pinned allocations, so a pointer it already freed is rejected
    // rather than freed again.
    let again = unsafe { ctx.api().free_host(blocks[3]) };
    assert_eq!(
        again.unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "the vendor has the memory back"
    );

    alloc.free(live).unwrap();
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!((s.reserved_bytes.current, s.segment.current), (0, 0));
    assert_eq!(s.num_device_free, s.num_device_alloc);
}

#[test]
fn pinned_oom_gives_the_cache_back_and_is_counted() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    let a = alloc.allocate(1000).unwrap();
    alloc.free(a).unwrap();
    let e = alloc.allocate(usize::MAX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(e.message().contains("pinned host memory"), "{e}");
    let s = alloc.stats();
    assert_eq!(s.num_ooms, 1);
    assert_eq!(s.num_sync_all_streams, 1);
    assert_eq!(s.num_alloc_retries, 0);
    assert_eq!(s.reserved_bytes.current, 0, "the cached block went back");
    assert_eq!(s.allocation.current, 0);
    let b = alloc.allocate(1000).unwrap();
    alloc.free(b).unwrap();
}

#[test]
fn four_threads_allocate_and_free_concurrently() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<HostAllocator>();

    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    let stream = ctx.stream_from_pool(0, false).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let alloc = &alloc;
            scope.spawn(move || {
                let mut held: Vec<(usize, usize)> = Vec::new();
                for i in 0..300usize {
                    let bytes = 1 + (i * 997 + usize::from(t) * 131) % 20_000;
                    let ptr = alloc.allocate(bytes).unwrap();
                    touch(ptr, bytes, t);
                    if i % 7 == 0 {
                        alloc.record_event(ptr, stream).unwrap();
                    }
                    held.push((ptr as usize, bytes));
                    if held.len() > 4 {
                        let (addr, bytes) = held.remove(i % held.len());
                        // SAFETY: a live block of `bytes` bytes this thread owns.
                        let block = unsafe { std::slice::from_raw_parts(addr as *const u8, bytes) };
                        assert!(block.iter().all(|&b| b == t), "another thread wrote here");
                        alloc.free(addr as *mut c_void).unwrap();
                    }
                }
                for (addr, _) in held {
                    alloc.free(addr as *mut c_void).unwrap();
                }
            });
        }
    });
    stream.synchronize().unwrap();
    let s = alloc.stats();
    assert_eq!(s.allocation.current, 0);
    assert_eq!(s.allocation.allocated, 4 * 300);
    assert_eq!(s.allocated_bytes.current, 0);
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!((s.active.current, s.reserved_bytes.current), (0, 0));
    assert_eq!(s.num_device_alloc, s.num_device_free);
}

#[test]
fn bs_takes_a_cached_block_of_up_to_twice_the_size_when_its_bin_is_empty() {
    let ctx = ctx();
    let alloc = HostAllocator::new(ctx, HostAlgorithm::BinSize);
    let big = alloc.allocate(3000).unwrap(); // bin 3072
    let huge = alloc.allocate(9000).unwrap(); // bin 10240
    alloc.free(big).unwrap();
    alloc.free(huge).unwrap();

    let small = alloc.allocate(2000).unwrap(); // bin 2048, empty
    assert_eq!(small, big, "the 3072-byte block serves 2000 bytes");
    let s = alloc.stats();
    assert_eq!(s.num_device_alloc, 2, "no new pinned block");
    assert_eq!(s.allocated_bytes.current, 3072, "the whole block is in use");
    assert_eq!(s.requested_bytes.current, 2000);
    touch(small, 2000, 0x5a);

    let other = alloc.allocate(4000).unwrap(); // bin 4096: 10240 is over 2x
    assert_ne!(
        other, huge,
        "a block over twice the bin's size is not taken"
    );
    assert_eq!(alloc.stats().num_device_alloc, 3);

    alloc.free(small).unwrap();
    let again = alloc.allocate(3000).unwrap();
    assert_eq!(again, big, "freed, the block is back in its own bin");
    for p in [again, other] {
        alloc.free(p).unwrap();
    }
    alloc.empty_cache().unwrap();
    let s = alloc.stats();
    assert_eq!((s.reserved_bytes.current, s.num_device_free), (0, 3));
}
