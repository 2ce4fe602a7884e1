//! Thread caches (BF and BS keep a thread's freed blocks for its own next
//! requests): what one thread frees is handed back to it without the
//! device, and everything else still holds: frees on other threads,
//! `record_stream` from another thread, a thread that ends with blocks
//! cached or live, `empty_cache` and growth taking cached blocks back,
//! double frees, statistics and snapshots. Run for every caching
//! algorithm, so TORCH (no thread caches) shows the same behaviour.

#[macro_use]
mod common;

use std::ffi::c_void;

use common::{Env, MIB};
use dipu_allocator::{Algorithm, AllocatorConfig, BlockState, DeviceAllocators};

per_algorithm!(
    a_free_on_another_thread_is_valid_once,
    a_thread_that_ends_gives_its_cache_back,
    growth_takes_other_threads_cached_blocks_first,
);
// (RAW caches nothing, and its free waits for the streams that used the
// block.)
per_caching_algorithm!(
    empty_cache_on_another_thread_takes_cached_blocks_back,
    record_stream_on_another_thread_defers_the_free,
    a_repeat_request_reuses_the_block_freed_on_this_thread,
);

/// A pointer that may cross threads in a test.
#[derive(Clone, Copy)]
struct Ptr(*mut c_void);
// SAFETY: a device address, never dereferenced on the host here.
unsafe impl Send for Ptr {}

impl Ptr {
    fn get(self) -> *mut c_void {
        self.0
    }
}

fn is_caching(alg: Algorithm) -> bool {
    alg != Algorithm::Raw
}

fn a_repeat_request_reuses_the_block_freed_on_this_thread(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let first = alloc.allocate(3000, s).unwrap();
    alloc.free(first.ptr).unwrap();
    for i in 0..100 {
        let a = alloc.allocate(3000, s).unwrap();
        assert_eq!(a.ptr, first.ptr, "{alg}: pair {i} reused the cached block");
        let st = alloc.stats();
        assert_eq!(st.allocation.current, 1, "{alg}: one live block");
        assert_eq!(st.requested_bytes.current, 3000, "{alg}: requested");
        alloc.free(a.ptr).unwrap();
    }
    let st = alloc.stats();
    assert_eq!(st.num_device_alloc, 1, "{alg}: one segment served all");
    assert_eq!(st.allocation.current, 0);
    assert_eq!(
        st.allocation.allocated, 101,
        "{alg}: every allocation counted"
    );
    assert_eq!(st.allocation.freed, 101, "{alg}: every free counted");
    assert_eq!(st.requested_bytes.allocated, 101 * 3000);
    assert_eq!(st.active.current, 0, "{alg}: nothing active");
    assert_eq!(
        alloc.free(first.ptr).unwrap_err().kind(),
        dipu_deviceapi::ErrorKind::InvalidArgument,
        "{alg}: a second free of a cached block is an error"
    );
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0, "{alg}: the cached block went back");
}

fn a_free_on_another_thread_is_valid_once(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    // Cached on this thread first, so the next allocation is a cache hit.
    let warm = alloc.allocate(4096, s).unwrap();
    alloc.free(warm.ptr).unwrap();
    let a = alloc.allocate(4096, s).unwrap();
    let b = alloc.allocate(8192, s).unwrap();
    let ptrs = (Ptr(a.ptr), Ptr(b.ptr));
    std::thread::scope(|scope| {
        let alloc = alloc.as_ref();
        scope
            .spawn(move || {
                let (a, b) = ptrs;
                alloc.free(a.0).unwrap();
                alloc.free(b.0).unwrap();
                assert!(alloc.free(a.0).is_err(), "{alg}: second free elsewhere");
            })
            .join()
            .unwrap();
    });
    // The allocating thread must not take the address back as its own.
    assert!(alloc.free(a.ptr).is_err(), "{alg}: a third free, here");
    assert!(alloc.free(b.ptr).is_err(), "{alg}: b freed twice");
    let st = alloc.stats();
    assert_eq!(st.allocation.current, 0, "{alg}: nothing live");
    assert_eq!(st.allocated_bytes.current, 0, "{alg}: no bytes live");
    assert_eq!(st.requested_bytes.current, 0, "{alg}: no requests live");
    assert_eq!(st.allocation.allocated, st.allocation.freed);
    // Both blocks are reusable: the same requests need no new segment.
    let before = st.num_device_alloc;
    let c = alloc.allocate(4096, s).unwrap();
    let d = alloc.allocate(8192, s).unwrap();
    if is_caching(alg) {
        assert_eq!(alloc.stats().num_device_alloc, before, "{alg}: reused");
    }
    alloc.free(c.ptr).unwrap();
    alloc.free(d.ptr).unwrap();
    common::check_snapshot(alloc.as_ref(), &format!("{alg} after frees elsewhere"));
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0, "{alg}: every segment went back");
}

fn a_thread_that_ends_gives_its_cache_back(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let kept = std::thread::scope(|scope| {
        let alloc = alloc.as_ref();
        scope
            .spawn(move || {
                let cached = alloc.allocate(MIB, s).unwrap();
                let kept = alloc.allocate(2 * MIB, s).unwrap();
                alloc.free(cached.ptr).unwrap();
                Ptr(kept.ptr)
            })
            .join()
            .unwrap()
    });
    let st = alloc.stats();
    assert_eq!(st.allocation.current, 1, "{alg}: the kept block is live");
    assert_eq!(st.requested_bytes.current, 2 * MIB as u64);
    let snap = common::check_snapshot(alloc.as_ref(), &format!("{alg} after the thread"));
    let allocated: Vec<usize> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::Allocated)
        .map(|b| b.address)
        .collect();
    assert_eq!(allocated, [kept.0 as usize], "{alg}: only the kept block");
    // The ended thread's block is an ordinary allocation now.
    alloc.free(kept.0).unwrap();
    assert!(alloc.free(kept.0).is_err(), "{alg}: freed twice");
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0, "{alg}: every segment went back");
    assert_eq!(alloc.stats().reserved_bytes.current, 0);
}

fn empty_cache_on_another_thread_takes_cached_blocks_back(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let a = alloc.allocate(5 * MIB, s).unwrap();
    alloc.free(a.ptr).unwrap();
    assert!(env.used(0) >= 5 * MIB as u64, "{alg}: cached");
    std::thread::scope(|scope| {
        let alloc = alloc.as_ref();
        scope.spawn(move || alloc.empty_cache().unwrap());
    });
    assert_eq!(
        env.used(0),
        0,
        "{alg}: this thread's cached block went back"
    );
    // The cache forgot it: a new request gets a new segment.
    let b = alloc.allocate(5 * MIB, s).unwrap();
    assert_eq!(alloc.stats().num_device_alloc, 2, "{alg}: a new segment");
    alloc.free(b.ptr).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0);
}

fn growth_takes_other_threads_cached_blocks_first(alg: Algorithm) {
    // Room for 48 MiB: a thread caches 40 MiB, another needs 40 MiB.
    let env = Env::new(48 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    std::thread::scope(|scope| {
        let alloc = alloc.as_ref();
        scope.spawn(move || {
            let a = alloc.allocate(40 * MIB, s).unwrap();
            alloc.free(a.ptr).unwrap();
        });
    });
    let b = alloc
        .allocate(40 * MIB, s)
        .unwrap_or_else(|e| panic!("{alg}: the other thread's cached block serves: {e}"));
    alloc.free(b.ptr).unwrap();
    let c = alloc.allocate(44 * MIB, s).unwrap_or_else(|e| {
        panic!("{alg}: a larger request frees this thread's cached block first: {e}")
    });
    alloc.free(c.ptr).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0);
}

fn record_stream_on_another_thread_defers_the_free(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let side = env.ctx.stream_from_pool(0, false).unwrap();
    let a = alloc.allocate(MIB, s).unwrap();
    let p = Ptr(a.ptr);
    std::thread::scope(|scope| {
        let alloc = alloc.as_ref();
        scope.spawn(move || alloc.record_stream(p.get(), side).unwrap());
    });
    // Work on the side stream still uses the block when it is freed: it
    // waits for the gate.
    let (gate, wait) = std::sync::mpsc::channel::<()>();
    // SAFETY: `side` is a live pooled stream; the callback only waits.
    unsafe {
        env.ctx
            .api()
            .launch_host_func(side.raw(), Box::new(move || _ = wait.recv()))
            .unwrap()
    };
    alloc.free(a.ptr).unwrap();
    let st = alloc.stats();
    assert_eq!(st.allocation.current, 0, "{alg}: freed");
    assert_eq!(
        st.active.current, 1,
        "{alg}: still active: the side stream works"
    );
    let b = alloc.allocate(MIB, s).unwrap();
    assert_ne!(
        b.ptr, a.ptr,
        "{alg}: not reused while the side stream works"
    );
    alloc.free(b.ptr).unwrap();
    drop(gate);
    side.synchronize().unwrap();
    let c = alloc.allocate(1, s).unwrap();
    alloc.free(c.ptr).unwrap();
    assert_eq!(alloc.stats().active.current, 0, "{alg}: no longer active");
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0);
}

/// With `thread_caches:False`, a block one thread freed is at once the
/// device's to hand to another thread; with thread caches (the default),
/// it waits in the freeing thread's cache for that thread's next request,
/// and another thread gets other free memory of the segment. (BF: it
/// splits, so there is other free memory; BS would take the cached block
/// back before growing, which `growth_takes_other_threads_cached_blocks_first`
/// covers.)
#[test]
fn the_thread_caches_option_decides_who_reuses_a_freed_block() {
    let alg = Algorithm::BestFit;
    for cached in [true, false] {
        let env = Env::new(64 << 20);
        let config = dipu_allocator::AllocatorConfig {
            thread_caches: cached,
            ..Default::default()
        };
        let alloc = env.allocator_with(0, alg, &config);
        let s = env.ctx.default_stream(0).unwrap();
        let (freed, done) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            let (alloc, freed, done) = (&alloc, &freed, &done);
            let owner = scope.spawn(move || {
                let a = alloc.allocate(3000, s).unwrap();
                alloc.free(a.ptr).unwrap();
                freed.wait();
                done.wait(); // alive while the main thread allocates
                Ptr(a.ptr)
            });
            freed.wait();
            let b = alloc.allocate(3000, s).unwrap();
            done.wait();
            let a = owner.join().unwrap();
            if cached {
                assert_ne!(
                    b.ptr,
                    a.get(),
                    "{alg}: the block waits in its thread's cache"
                );
            } else {
                assert_eq!(b.ptr, a.get(), "{alg}: the device reuses the block at once");
            }
            alloc.free(b.ptr).unwrap();
        });
        let st = alloc.stats();
        assert_eq!(st.allocation.current, 0, "{alg}, caches {cached}");
        assert_eq!(st.allocation.allocated, 2, "{alg}, caches {cached}");
        alloc.empty_cache().unwrap();
        assert_eq!(env.used(0), 0, "{alg}, caches {cached}: all given back");
    }
}

/// A thread that frees more blocks of distinct sizes than its cache has
/// slots keeps the newest: the oldest goes back to the device, where
/// another thread's request of that size gets it at once, while the newest
/// still waits for its own thread.
#[test]
fn a_full_cache_gives_its_oldest_block_back() {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, Algorithm::BestFit);
    let s = env.ctx.default_stream(0).unwrap();
    // More distinct sizes than any thread cache has slots (at most 32).
    let sizes: Vec<usize> = (1..=40).map(|k| k * 4096).collect();
    let blocks: Vec<Ptr> = sizes
        .iter()
        .map(|&bytes| Ptr(alloc.allocate(bytes, s).unwrap().ptr))
        .collect();
    for b in &blocks {
        alloc.free(b.get()).unwrap();
    }
    let (oldest, newest) = (blocks[0].get() as usize, blocks[39].get() as usize);
    let (first, last) = (sizes[0], sizes[39]);
    let alloc = &alloc;
    let (got_oldest, got_newest) = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let a = alloc.allocate(first, s).unwrap();
                let b = alloc.allocate(last, s).unwrap();
                let got = (a.ptr as usize, b.ptr as usize);
                alloc.free(a.ptr).unwrap();
                alloc.free(b.ptr).unwrap();
                got
            })
            .join()
            .unwrap()
    });
    assert_eq!(
        got_oldest, oldest,
        "the oldest freed block went back to the device"
    );
    assert_ne!(got_newest, newest, "the newest waits in its thread's cache");
    let st = alloc.stats();
    assert_eq!(st.allocation.current, 0);
    assert_eq!(st.allocation.allocated, st.allocation.freed);
    assert_eq!(st.allocation.allocated, 42);
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0, "every block went back");
}

/// A block freed into the slot that `empty_cache` on another thread has
/// just emptied (the order a loom model once reported as losing a block,
/// see `a_cached_free_races_the_device_taking_slots_back`) counts as free
/// at once, is this thread's next hit, and the books balance: through the
/// C ABI's hit path (`free_cached`) and the allocator's own `free`, for
/// both allocators with thread caches.
#[test]
fn a_free_into_a_slot_the_device_emptied_counts_as_free() {
    for alg in [Algorithm::BestFit, Algorithm::BinSize] {
        for hit_path in [true, false] {
            let env = Env::new(64 << 20);
            let all = DeviceAllocators::new(env.ctx, alg, AllocatorConfig::default());
            let alloc = all.get(0).unwrap();
            let s = env.ctx.default_stream(0).unwrap();
            let a = alloc.allocate(4096, s).unwrap();
            let b = alloc.allocate(4096, s).unwrap();
            alloc.free(b.ptr).unwrap();
            std::thread::scope(|scope| {
                scope.spawn(|| alloc.empty_cache().unwrap());
            });
            assert_eq!(alloc.stats().allocation.current, 1, "{alg}: a is live");
            if hit_path {
                assert!(all.free_cached(a.ptr), "{alg}: lent here, a slot free");
            } else {
                alloc.free(a.ptr).unwrap();
            }
            let st = alloc.stats();
            assert_eq!(st.allocation.current, 0, "{alg} (hit path {hit_path})");
            assert_eq!(st.allocated_bytes.current, 0, "{alg} (hit path {hit_path})");
            assert_eq!(st.allocation.allocated, st.allocation.freed, "{alg}");
            assert_eq!(
                all.allocate_cached(4096, s),
                Some(a.ptr),
                "{alg}: the slotted block is this thread's next hit"
            );
            assert_eq!(alloc.stats().allocation.current, 1, "{alg}: lent again");
            assert!(all.free_cached(a.ptr), "{alg}: back to its slot");
            assert_eq!(alloc.stats().allocation.current, 0, "{alg}");
            alloc.empty_cache().unwrap();
            assert_eq!(env.used(0), 0, "{alg}: every segment went back");
        }
    }
}
