//! The small and large pools of the statistics (PyTorch's `small_pool` and
//! `large_pool` keys), for every algorithm and with expandable segments: a
//! block counts in its segment's pool, which the snapshot names; TORCH,
//! BS and RAW keep requests of at most 1 MiB in small segments as CUDA
//! does; and the two pools add up to the aggregate.

mod common;

use common::{Env, KIB, MIB};
use dipu_allocator::{
    Algorithm, AllocatorConfig, DeviceAllocator, DeviceStats, Pool, PoolStats, Stat,
};

/// Every pool's current value and totals add up to the aggregate's, and
/// each pool's peak lies between its current value and the aggregate peak.
fn assert_pools_add_up(s: &DeviceStats, what: &str) {
    let all = s.all().named();
    let small = s.small_pool.named();
    let large = s.large_pool.named();
    for ((name, a), ((_, sm), (_, lg))) in all.iter().zip(small.iter().zip(large.iter())) {
        let sum = |f: fn(&Stat) -> u64| f(sm) + f(lg);
        assert_eq!(sum(|x| x.current), a.current, "{what}: {name}.current");
        assert_eq!(
            sum(|x| x.allocated),
            a.allocated,
            "{what}: {name}.allocated"
        );
        assert_eq!(sum(|x| x.freed), a.freed, "{what}: {name}.freed");
        for (pool, p) in [("small", sm), ("large", lg)] {
            assert!(
                p.current <= p.peak && p.peak <= a.peak,
                "{what}: {name}.{pool}: current {} peak {} (all's peak {})",
                p.current,
                p.peak,
                a.peak
            );
        }
    }
}

/// Per pool, allocated ≤ active ≤ reserved (bytes), as in CUDA's pools.
fn assert_pool_invariants(p: &PoolStats, what: &str) {
    assert!(
        p.allocated_bytes.current <= p.active_bytes.current,
        "{what}"
    );
    assert!(p.active_bytes.current <= p.reserved_bytes.current, "{what}");
    assert!(
        p.requested_bytes.current <= p.allocated_bytes.current,
        "{what}"
    );
}

/// The pool the snapshot gives the segment holding `ptr`.
fn pool_in_snapshot(alloc: &dyn DeviceAllocator, ptr: *mut std::ffi::c_void) -> Pool {
    let addr = ptr as usize;
    let seg = alloc
        .snapshot()
        .segments
        .into_iter()
        .find(|s| s.address <= addr && addr < s.address + s.size)
        .expect("a live block is in a segment");
    match seg.pool.as_str() {
        "small" => Pool::Small,
        "large" | "expandable" => Pool::Large,
        other => panic!("unknown pool {other}"),
    }
}

/// Two small (4 KiB, 100 KiB) and two large (1.5 MiB, 4 MiB) allocations,
/// frees, a reuse and a peak reset. `cuda_like`: each request's pool is
/// CUDA's (small for at most 1 MiB); otherwise (BF, expandable segments)
/// the pool of the segment the block was carved from.
fn check(alloc: &dyn DeviceAllocator, env: &Env, cuda_like: bool, what: &str) {
    let stream = env.ctx.current_stream(0).unwrap();
    let requests = [4 * KIB, 100 * KIB, 3 * MIB / 2, 4 * MIB];
    let ptrs: Vec<_> = requests
        .iter()
        .map(|&bytes| alloc.allocate(bytes, stream).unwrap().ptr)
        .collect();
    let sizes: Vec<(usize, Pool)> = requests
        .iter()
        .zip(&ptrs)
        .map(|(&bytes, &ptr)| (bytes, pool_in_snapshot(alloc, ptr)))
        .collect();
    if cuda_like {
        for &(bytes, pool) in &sizes {
            assert_eq!(pool, Pool::for_request(bytes), "{what}: {bytes} bytes");
        }
    }
    let (small, large) = (sizes[0].1, sizes[3].1);
    let s = alloc.stats();
    assert_pools_add_up(&s, what);
    let expected = |pool: Pool| -> (u64, u64) {
        let mine = sizes.iter().filter(|(_, p)| *p == pool);
        (
            mine.clone().count() as u64,
            mine.map(|(b, _)| *b as u64).sum(),
        )
    };
    for pool in [Pool::Small, Pool::Large] {
        let p = s.pool(pool);
        let (count, requested) = expected(pool);
        assert_eq!(p.allocation.current, count, "{what}: {pool:?} allocations");
        assert_eq!(
            p.requested_bytes.current, requested,
            "{what}: {pool:?} requested"
        );
        assert!(p.allocated_bytes.current >= requested, "{what}: {pool:?}");
        assert_eq!(
            count > 0,
            p.segment.current > 0,
            "{what}: {pool:?} segments"
        );
        assert_pool_invariants(p, what);
    }

    // Free one of each: currents drop, totals grow, peaks stay.
    alloc.free(ptrs[0]).unwrap();
    alloc.free(ptrs[3]).unwrap();
    let after = alloc.stats();
    assert_pools_add_up(&after, what);
    let p_small = after.pool(small);
    let p_large = after.pool(large);
    let before_small = s.pool(small);
    assert_eq!(
        p_small.requested_bytes.current + if small == large { 4 * MIB as u64 } else { 0 },
        before_small.requested_bytes.current - 4 * KIB as u64,
        "{what}: the frees"
    );
    assert_eq!(
        p_large.requested_bytes.peak,
        s.pool(large).requested_bytes.peak
    );
    assert!(after.pool(small).allocation.freed >= 1, "{what}");
    assert!(after.pool(large).allocation.freed >= 1, "{what}");

    // A reuse of the freed small size (a thread-cache hit for BF and BS)
    // counts in the small pool again.
    let again = alloc.allocate(4 * KIB, stream).unwrap();
    let reused = alloc.stats();
    assert_pools_add_up(&reused, what);
    assert_eq!(
        reused.pool(small).allocation.allocated,
        after.pool(small).allocation.allocated + 1,
        "{what}: the reuse counts in its pool"
    );
    assert_eq!(
        reused.pool(large).allocation.allocated,
        after.pool(large).allocation.allocated + u64::from(small == large),
        "{what}"
    );

    alloc.reset_peak_stats();
    let reset = alloc.stats();
    // (Blocks waiting in a thread cache's slots are counted free when read,
    // not when the peak was kept: with thread caches a peak may sit above.)
    let exact = alloc.thread_cache_key().is_none();
    for (p, was) in [
        (&reset.small_pool, &reused.small_pool),
        (&reset.large_pool, &reused.large_pool),
    ] {
        for ((name, st), (_, before)) in p.named().into_iter().zip(was.named()) {
            assert!(
                st.peak >= st.current && st.peak <= before.peak,
                "{what}: {name}"
            );
            if exact {
                assert_eq!(st.peak, st.current, "{what}: {name} peak after reset");
            }
        }
    }
    for ptr in [again.ptr, ptrs[1], ptrs[2]] {
        alloc.free(ptr).unwrap();
    }
    let end = alloc.stats();
    assert_pools_add_up(&end, what);
    for p in [&end.small_pool, &end.large_pool] {
        assert_eq!(p.allocation.current, 0, "{what}");
        assert_eq!(p.requested_bytes.current, 0, "{what}");
    }
    alloc.empty_cache().unwrap();
    let empty = alloc.stats();
    assert_pools_add_up(&empty, what);
    assert_eq!(empty.small_pool.reserved_bytes.current, 0, "{what}");
    assert_eq!(empty.large_pool.reserved_bytes.current, 0, "{what}");
}

#[test]
fn every_algorithm_counts_small_and_large_requests_in_their_pools() {
    for algorithm in [
        Algorithm::Torch,
        Algorithm::BestFit,
        Algorithm::BinSize,
        Algorithm::Raw,
    ] {
        let env = Env::new(256 * MIB as u64);
        let alloc = env.allocator(0, algorithm);
        check(
            alloc.as_ref(),
            &env,
            algorithm != Algorithm::BestFit,
            algorithm.name(),
        );
    }
}

#[test]
fn without_thread_caches_the_pools_are_the_same() {
    for algorithm in [Algorithm::BestFit, Algorithm::BinSize] {
        let env = Env::new(256 * MIB as u64);
        let config = AllocatorConfig::parse("thread_caches:False").unwrap();
        let alloc = env.allocator_with(0, algorithm, &config);
        check(
            alloc.as_ref(),
            &env,
            algorithm != Algorithm::BestFit,
            algorithm.name(),
        );
    }
}

#[test]
fn expandable_segments_count_in_the_large_pool() {
    let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
    for algorithm in [Algorithm::Torch, Algorithm::BestFit] {
        let env = Env::new(256 * MIB as u64);
        let alloc = env.allocator_with(0, algorithm, &config);
        let stream = env.ctx.current_stream(0).unwrap();
        let big = alloc.allocate(4 * MIB, stream).unwrap();
        assert_eq!(pool_in_snapshot(alloc.as_ref(), big.ptr), Pool::Large);
        let s = alloc.stats();
        assert_eq!(s.large_pool.allocation.current, 1, "{}", algorithm.name());
        assert_eq!(
            s.large_pool.reserved_bytes.current,
            s.reserved_bytes.current
        );
        alloc.free(big.ptr).unwrap();
        check(
            alloc.as_ref(),
            &env,
            false,
            &format!("{} expandable", algorithm.name()),
        );
    }
}

#[test]
fn snapshot_pools_agree_with_the_statistics() {
    for algorithm in [Algorithm::Torch, Algorithm::BestFit] {
        let env = Env::new(256 * MIB as u64);
        let alloc = env.allocator(0, algorithm);
        let stream = env.ctx.current_stream(0).unwrap();
        let held: Vec<_> = [8 * KIB, MIB, MIB + 1, 6 * MIB]
            .into_iter()
            .map(|b| alloc.allocate(b, stream).unwrap().ptr)
            .collect();
        let stats = alloc.stats();
        let snapshot = alloc.snapshot();
        for pool in [Pool::Small, Pool::Large] {
            let reserved: usize = snapshot
                .segments
                .iter()
                .filter(|s| s.pool == pool.as_str())
                .map(|s| s.size)
                .sum();
            assert_eq!(
                reserved as u64,
                stats.pool(pool).reserved_bytes.current,
                "{}: {pool:?}",
                algorithm.name()
            );
        }
        for p in held {
            alloc.free(p).unwrap();
        }
    }
}
