//! loom models of the caching allocator's concurrent parts.

use std::sync::Arc;

use loom::sync::Mutex as LoomMutex;

use dipu_stream::Stream;

use crate::{new_device_allocator, Algorithm, AllocatorConfig, DeviceAllocator};

/// An allocator of `algorithm` for a 64 MiB host device, and the
/// device's current stream.
fn host_allocator(algorithm: Algorithm) -> (Arc<dyn DeviceAllocator>, Stream) {
    let vendor = dipu_vendor_host::HostVendor::new(dipu_vendor_host::HostConfig {
        devices: 1,
        memory_per_device: 64 << 20,
        ..Default::default()
    })
    .unwrap();
    let ctx = dipu_stream::DeviceContext::new(Arc::new(vendor)).unwrap();
    let alloc = new_device_allocator(ctx, 0, algorithm, &AllocatorConfig::default()).unwrap();
    (Arc::from(alloc), ctx.current_stream(0).unwrap())
}

/// Nothing is allocated, every allocation was freed once, and
/// `empty_cache` gives every segment back.
fn assert_all_given_back(alloc: &dyn DeviceAllocator) {
    let stats = alloc.stats();
    assert_eq!(stats.allocation.current, 0);
    assert_eq!(stats.allocated_bytes.current, 0);
    assert_eq!(stats.allocation.allocated, stats.allocation.freed);
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 0);
}

/// Two threads allocate and free at once through one device allocator
/// whose cache already holds a segment: every interleaving hands out
/// disjoint live blocks, and afterwards the books balance.
#[test]
fn concurrent_allocate_and_free_never_share_memory() {
    loom::model(|| {
        let (alloc, stream) = host_allocator(Algorithm::BestFit);
        let warm = alloc.allocate(8192, stream).unwrap();
        alloc.free(warm.ptr).unwrap();
        let live = Arc::new(LoomMutex::new(Vec::<(usize, usize)>::new()));
        let worker = {
            let (alloc, live) = (alloc.clone(), live.clone());
            move |bytes: usize| {
                let a = alloc.allocate(bytes, stream).unwrap();
                let start = a.ptr as usize;
                {
                    let mut live = live.lock().unwrap();
                    for &(s, e) in live.iter() {
                        assert!(start + bytes <= s || e <= start, "overlapping live blocks");
                    }
                    live.push((start, start + bytes));
                }
                live.lock().unwrap().retain(|&(s, _)| s != start);
                alloc.free(a.ptr).unwrap();
            }
        };
        let w = worker.clone();
        let t = loom::thread::spawn(move || w(3000));
        worker(5000);
        t.join().unwrap();
        let stats = alloc.stats();
        assert_eq!(stats.allocated_bytes.current, 0);
        assert_eq!(
            stats.num_device_alloc, 1,
            "both threads were served from the cached segment"
        );
        alloc.empty_cache().unwrap();
        assert_eq!(alloc.stats().reserved_bytes.current, 0);
    });
}

/// A block waits in this thread's cache while this thread asks for the
/// same size again and another thread asks for it too (taking it back
/// from the cache as it grows): each gets a different block, and after
/// both frees and the other thread's end the books balance and every
/// segment can go back.
#[test]
fn a_cached_block_goes_to_exactly_one_thread() {
    loom::model(|| {
        let (alloc, stream) = host_allocator(Algorithm::BinSize);
        let cached = alloc.allocate(4096, stream).unwrap();
        alloc.free(cached.ptr).unwrap();
        let other = {
            let alloc = alloc.clone();
            loom::thread::spawn(move || {
                let b = alloc.allocate(4096, stream).unwrap();
                b.ptr as usize
            })
        };
        let a = alloc.allocate(4096, stream).unwrap();
        let b = other.join().unwrap();
        assert_ne!(a.ptr as usize, b, "one block handed to two threads");
        assert!(
            a.ptr == cached.ptr || b == cached.ptr as usize,
            "the cached block served one of them"
        );
        assert_eq!(alloc.stats().allocation.current, 2);
        alloc.free(a.ptr).unwrap();
        alloc.free(b as *mut std::ffi::c_void).unwrap();
        assert_all_given_back(alloc.as_ref());
    });
}

/// A block lent to this thread's cache is freed on another thread while
/// this thread frees and allocates other blocks: the address is freed
/// once, this thread forgets it, and a second free is an error.
#[test]
fn a_free_on_another_thread_reaches_the_lending_cache() {
    loom::model(|| {
        let (alloc, stream) = host_allocator(Algorithm::BinSize);
        let lent = alloc.allocate(4096, stream).unwrap();
        let mine = alloc.allocate(8192, stream).unwrap();
        let other = {
            let alloc = alloc.clone();
            let ptr = lent.ptr as usize;
            loom::thread::spawn(move || {
                alloc.free(ptr as *mut std::ffi::c_void).unwrap();
            })
        };
        alloc.free(mine.ptr).unwrap();
        let again = alloc.allocate(8192, stream).unwrap();
        assert_eq!(again.ptr, mine.ptr, "this thread's cache served it");
        other.join().unwrap();
        assert!(alloc.free(lent.ptr).is_err(), "freed twice");
        alloc.free(again.ptr).unwrap();
        assert_all_given_back(alloc.as_ref());
    });
}

/// This thread's cache is full and makes room by giving its oldest block
/// back while another thread empties the cache (taking every slotted block
/// back): the block goes back exactly once, the books balance and every
/// segment can go back.
#[test]
fn an_evicted_block_goes_back_exactly_once() {
    loom::model(|| {
        let (alloc, stream) = host_allocator(Algorithm::BinSize);
        // Two slots under loom: two distinct sizes fill them.
        let blocks: Vec<_> = [4096, 8192, 12288]
            .into_iter()
            .map(|bytes| alloc.allocate(bytes, stream).unwrap())
            .collect();
        alloc.free(blocks[0].ptr).unwrap();
        alloc.free(blocks[1].ptr).unwrap();
        let other = {
            let alloc = alloc.clone();
            loom::thread::spawn(move || alloc.empty_cache().unwrap())
        };
        alloc.free(blocks[2].ptr).unwrap(); // evicts the 4096-byte block
        other.join().unwrap();
        assert_all_given_back(alloc.as_ref());
    });
}

/// The C ABI's hit path frees a lent block into this thread's cache
/// (`DeviceAllocators::free_cached`) while another thread empties the
/// cache (the device taking slotted blocks back): the block ends on one
/// side, a hit after it is a block nobody else holds, and the books balance.
///
/// Once ignored: loom ended `allocation.current` at 1 when the device's
/// swap of the empty slot came just before the owner's store into it. That
/// execution is loom's (tokio-rs/loom#254), not the allocator's: the owner
/// then read its own slot as empty, which C11 forbids. The owner's fill is
/// a swap under loom (`front::publish`), which loom orders.
#[test]
fn a_cached_free_races_the_device_taking_slots_back() {
    loom::model(|| free_races_the_device_taking_slots_back(true));
}

/// [`a_cached_free_races_the_device_taking_slots_back`] with the
/// allocator's own `free` (the same slot fill, through `Front::push`).
#[test]
fn a_free_races_the_device_taking_slots_back() {
    loom::model(|| free_races_the_device_taking_slots_back(false));
}

/// The two models above: `a` freed through the hit path (`hit_path`) or
/// the allocator's `free` while another thread calls `empty_cache`.
fn free_races_the_device_taking_slots_back(hit_path: bool) {
    let vendor = dipu_vendor_host::HostVendor::new(dipu_vendor_host::HostConfig {
        devices: 1,
        memory_per_device: 64 << 20,
        ..Default::default()
    })
    .unwrap();
    let ctx = dipu_stream::DeviceContext::new(Arc::new(vendor)).unwrap();
    let all = Arc::new(crate::DeviceAllocators::new(
        ctx,
        Algorithm::BinSize,
        AllocatorConfig::default(),
    ));
    let stream = ctx.current_stream(0).unwrap();
    let a = all.get(0).unwrap().allocate(4096, stream).unwrap();
    let b = all.get(0).unwrap().allocate(4096, stream).unwrap();
    all.get(0).unwrap().free(b.ptr).unwrap();
    let other = {
        let all = all.clone();
        loom::thread::spawn(move || all.get(0).unwrap().empty_cache().unwrap())
    };
    if hit_path {
        assert!(all.free_cached(a.ptr), "lent here, with a free slot");
    } else {
        all.get(0).unwrap().free(a.ptr).unwrap();
    }
    other.join().unwrap();
    let again = all.allocate_cached(4096, stream);
    assert!(again.is_none_or(|p| p == a.ptr || p == b.ptr), "{again:?}");
    if let Some(p) = again {
        assert!(all.free_cached(p), "a hit's block goes back to the cache");
    }
    assert_all_given_back(all.get(0).unwrap());
}
