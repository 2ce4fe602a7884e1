//! Expandable segments under `BF`: one address range per stream, granules
//! mapped as blocks need them, and free granules unmapped only when mapping
//! more would pass the most memory reserved so far (the high-water mark).

mod common;

use common::{Env, MIB};
use dipu_allocator::{Algorithm, AllocatorConfig, BlockState};
use dipu_vendor_host::Fault;

fn expandable() -> AllocatorConfig {
    AllocatorConfig::parse("expandable_segments:True").unwrap()
}

#[test]
fn blocks_share_one_range_and_map_granules_as_they_grow() {
    let env = Env::new(256 << 20);
    let alloc = env.allocator_with(0, Algorithm::BestFit, &expandable());
    let s = env.ctx.default_stream(0).unwrap();
    let blocks: Vec<_> = (0..3)
        .map(|_| alloc.allocate(10 * MIB, s).unwrap())
        .collect();
    let st = alloc.stats();
    assert_eq!(st.segment.current, 1, "one range for the stream");
    assert_eq!(st.reserved_bytes.current, 30 * MIB as u64);
    assert_eq!(st.num_device_alloc, 15, "fifteen 2 MiB granules mapped");
    for (a, b) in blocks.iter().zip(&blocks[1..]) {
        assert_eq!(b.ptr as usize - a.ptr as usize, 10 * MIB, "carved upwards");
    }
    let snap = alloc.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert_eq!(snap.segments[0].pool, "expandable");
    assert_eq!(snap.segments[0].size, 30 * MIB, "the mapped memory");
    assert!(common::json_is_well_formed(&snap.to_json()));
    env.upload(0, blocks[2].ptr, &vec![3u8; 10 * MIB]);
    assert!(env
        .download(0, blocks[2].ptr, 10 * MIB)
        .iter()
        .all(|&b| b == 3));
    for b in blocks {
        alloc.free(b.ptr).unwrap();
    }
    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!((st.reserved_bytes.current, st.segment.current), (0, 0));
    assert_eq!(st.num_device_free, 15, "every granule unmapped");
}

#[test]
fn free_granules_stay_mapped_until_growth_would_pass_the_high_water_mark() {
    let env = Env::new(256 << 20);
    let alloc = env.allocator_with(0, Algorithm::BestFit, &expandable());
    let s = env.ctx.default_stream(0).unwrap();
    let a = alloc.allocate(10 * MIB, s).unwrap();
    let b = alloc.allocate(10 * MIB, s).unwrap();
    let c = alloc.allocate(10 * MIB, s).unwrap();
    alloc.free(a.ptr).unwrap();
    alloc.free(c.ptr).unwrap();
    let st = alloc.stats();
    assert_eq!(
        st.reserved_bytes.current,
        30 * MIB as u64,
        "freeing unmaps nothing"
    );
    assert_eq!(st.num_device_free, 0);

    // 14 MiB does not fit a's 10 MiB hole: it goes where c was and needs
    // 4 MiB more. Mapping them would pass the 30 MiB reserved so far, so
    // two of a's free granules (the highest) are unmapped first, not all
    // five.
    let d = alloc.allocate(14 * MIB, s).unwrap();
    assert_eq!(d.ptr, c.ptr);
    let st = alloc.stats();
    assert_eq!(st.num_device_free, 2, "only as many granules as needed");
    assert_eq!(st.num_device_alloc, 17);
    assert_eq!(st.reserved_bytes.current, 30 * MIB as u64);
    assert_eq!(
        st.reserved_bytes.peak,
        30 * MIB as u64,
        "the peak did not move"
    );
    let snap = alloc.snapshot();
    assert_eq!(
        common::block_state(&snap, b.ptr),
        Some(BlockState::Allocated)
    );
    // a's lowest three granules are still mapped: 6 MiB there needs no call.
    let low = alloc.allocate(6 * MIB, s).unwrap();
    assert_eq!(low.ptr, a.ptr);
    assert_eq!(
        alloc.stats().num_device_alloc,
        17,
        "the top two went, not the bottom"
    );
    alloc.free(low.ptr).unwrap();

    // Freed and requested again, d's granules are reused without a call.
    alloc.free(d.ptr).unwrap();
    let e = alloc.allocate(14 * MIB, s).unwrap();
    assert_eq!(e.ptr, c.ptr);
    let st = alloc.stats();
    assert_eq!((st.num_device_alloc, st.num_device_free), (17, 2));

    // empty_cache unmaps every free granule (a's last three).
    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!(st.reserved_bytes.current, 24 * MIB as u64);
    assert_eq!(st.num_device_free, 5);
    for p in [b.ptr, e.ptr] {
        alloc.free(p).unwrap();
    }
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 0);
    assert_eq!(alloc.stats().num_device_free, 17);
}

#[test]
fn the_memory_fraction_limits_mapped_memory() {
    let env = Env::new(64 << 20);
    let alloc = env.allocator_with(0, Algorithm::BestFit, &expandable());
    let s = env.ctx.default_stream(0).unwrap();
    // The range is reserved (and one granule mapped) before the fraction
    // is lowered.
    let first = alloc.allocate(MIB, s).unwrap();
    alloc.free(first.ptr).unwrap();
    alloc.set_memory_fraction(0.25).unwrap(); // 16 MiB
    assert_eq!(alloc.stats().segment.current, 1);
    let a = alloc.allocate(12 * MIB, s).unwrap();
    let e = alloc
        .allocate(6 * MIB, s)
        .expect_err("18 MiB mapped under a 16 MiB limit");
    assert_eq!(e.kind(), dipu_deviceapi::ErrorKind::OutOfMemory, "{e}");
    assert!(
        e.message().contains("per-process memory fraction allows"),
        "{e}"
    );
    let st = alloc.stats();
    assert_eq!(st.num_ooms, 1);
    assert_eq!(
        st.reserved_bytes.current,
        12 * MIB as u64,
        "nothing half-mapped"
    );
    assert_eq!(st.allocated_bytes.current, 12 * MIB as u64);

    alloc.free(a.ptr).unwrap();
    let whole = alloc.allocate(16 * MIB, s).unwrap();
    assert_eq!(alloc.stats().reserved_bytes.current, 16 * MIB as u64);
    alloc.free(whole.ptr).unwrap();
    alloc.set_memory_fraction(1.0).unwrap();
    let big = alloc.allocate(40 * MIB, s).unwrap();
    alloc.free(big.ptr).unwrap();
}

#[test]
fn a_fraction_given_at_creation_limits_mapping_not_the_range() {
    let env = Env::new(64 << 20);
    let quarter =
        AllocatorConfig::parse("expandable_segments:True,per_process_memory_fraction:0.25")
            .unwrap();
    let alloc = env.allocator_with(0, Algorithm::BestFit, &quarter);
    let s = env.ctx.default_stream(0).unwrap();
    let e = alloc
        .allocate(17 * MIB, s)
        .expect_err("17 MiB under 16 MiB");
    assert_eq!(e.kind(), dipu_deviceapi::ErrorKind::OutOfMemory, "{e}");
    alloc.set_memory_fraction(1.0).unwrap();
    let big = alloc.allocate(40 * MIB, s).unwrap();
    let st = alloc.stats();
    assert_eq!(
        st.segment.current, 1,
        "40 MiB in the one range, no extra segment"
    );
    assert_eq!(st.reserved_bytes.current, 40 * MIB as u64);
    alloc.free(big.ptr).unwrap();
}

#[test]
fn a_mapping_that_fails_part_way_is_undone_and_retried() {
    let env = Env::new(256 << 20);
    let alloc = env.allocator_with(0, Algorithm::BestFit, &expandable());
    let s = env.ctx.default_stream(0).unwrap();
    // The third of the five granules cannot be created the first time.
    env.vendor.set_fault(Fault::VmmCreateAt(3));
    let a = alloc.allocate(10 * MIB, s).unwrap();
    let st = alloc.stats();
    assert_eq!(st.reserved_bytes.current, 10 * MIB as u64);
    assert_eq!(
        st.num_device_alloc, 5,
        "the two undone granules are not counted"
    );
    assert_eq!((st.num_alloc_retries, st.num_ooms), (1, 0));
    assert_eq!(env.used(0), 10 * MIB as u64, "the undone chunks went back");
    env.upload(0, a.ptr, &vec![9u8; 10 * MIB]);
    assert!(env.download(0, a.ptr, 10 * MIB).iter().all(|&b| b == 9));
    alloc.free(a.ptr).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!((alloc.stats().reserved_bytes.current, env.used(0)), (0, 0));
}

#[test]
fn an_unmap_that_fails_leaves_the_statistics_true() {
    let env = Env::new(256 << 20);
    let alloc = env.allocator_with(0, Algorithm::BestFit, &expandable());
    let s = env.ctx.default_stream(0).unwrap();
    let a = alloc.allocate(10 * MIB, s).unwrap();
    alloc.free(a.ptr).unwrap();
    env.vendor.set_fault(Fault::VmmUnmapAt(2));
    let e = alloc.empty_cache().expect_err("the second unmap fails");
    assert_eq!(e.kind(), dipu_deviceapi::ErrorKind::VendorError, "{e}");
    let st = alloc.stats();
    assert_eq!(
        st.reserved_bytes.current,
        8 * MIB as u64,
        "four granules still mapped"
    );
    assert_eq!(st.num_device_free, 1);
    assert_eq!(
        env.used(0),
        8 * MIB as u64,
        "the statistics match the vendor"
    );

    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!((st.reserved_bytes.current, st.num_device_free), (0, 5));
    assert_eq!(env.used(0), 0);
    let again = alloc.allocate(10 * MIB, s).unwrap();
    alloc.free(again.ptr).unwrap();
}

#[test]
fn granules_are_unmapped_only_after_the_work_queued_on_them() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let env = Env::new(256 << 20);
    let alloc = env.allocator_with(0, Algorithm::BestFit, &expandable());
    let s = env.stream(0);
    let gate = common::hold(&env, s, false).unwrap();
    let a = alloc.allocate(10 * MIB, s).unwrap();
    // Queued behind the gate: a write into the block, then a flag.
    env.memset_async(s, a.ptr, 5, 10 * MIB);
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    // SAFETY: `s` is a live stream of this vendor; the callback sets a flag.
    unsafe {
        env.ctx
            .api()
            .launch_host_func(
                s.raw(),
                Box::new(move || flag.store(true, Ordering::SeqCst)),
            )
            .unwrap()
    };
    // Freed on its own stream: free at once, the write still queued.
    alloc.free(a.ptr).unwrap();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(gate);
    });
    alloc.empty_cache().unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "the stream's queued write ran before its granules were unmapped"
    );
    opener.join().unwrap();
    assert_eq!((alloc.stats().reserved_bytes.current, env.used(0)), (0, 0));
}
