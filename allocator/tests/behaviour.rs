//! Behaviour every device allocator shares (issue 4), one test per
//! algorithm: round trips of awkward sizes, usable and disjoint memory,
//! reuse of freed blocks per stream, deferred reuse after `record_stream`.
//! Zero sizes and rejected frees and streams are in `behaviour_errors.rs`;
//! statistics, `reset_peak_stats` and `empty_cache` in
//! `behaviour_accounting.rs`; snapshots and the memory fraction in
//! `behaviour_snapshot.rs`.

#[macro_use]
mod common;

use common::{Env, KIB, MIB};
use dipu_allocator::Algorithm;

const SIZES: [usize; 9] = [0, 1, 511, 512, 513, MIB, MIB + 1, 13 * MIB, 100 * MIB];

per_algorithm!(
    round_trips_give_usable_memory,
    allocations_never_overlap,
    freed_block_is_reused_on_its_stream_only,
    pending_block_is_not_handed_out,
);

#[test]
fn the_suite_covers_every_algorithm() {
    use Algorithm::*;
    assert_eq!(
        Algorithm::ALL,
        [Torch, BestFit, BinSize, Raw],
        "a new algorithm needs its tests in per_algorithm!"
    );
}

#[test]
fn json_check_accepts_json_and_rejects_broken_text() {
    use common::json_is_well_formed as ok;
    assert!(ok(r#"{"a":[1,2,{"b":"x"}],"c":-1.5e3,"d":true}"#));
    assert!(ok(r#"{"segments":[]}"#));
    for bad in [
        r#"{"a":1"#,
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        "[1 2]",
        r#"{"a":"x}"#,
        "{} {}",
    ] {
        assert!(!ok(bad), "accepted {bad}");
    }
}

/// Every size allocates (on device 1, to check the device is honoured),
/// holds a pattern written and read back through the vendor, and frees.
fn round_trips_give_usable_memory(alg: Algorithm) {
    let env = Env::new(4 << 30);
    let alloc = env.allocator(1, alg);
    let stream = env.ctx.default_stream(1).unwrap();
    let used0 = env.used(0);
    for (i, &bytes) in SIZES.iter().enumerate() {
        let a = alloc
            .allocate(bytes, stream)
            .unwrap_or_else(|e| panic!("{alg}: allocate({bytes}): {e}"));
        assert_eq!(
            (a.size, a.device, a.stream),
            (bytes, 1, stream),
            "{alg}: allocation of {bytes}"
        );
        if bytes == 0 {
            alloc
                .free(a.ptr)
                .unwrap_or_else(|e| panic!("{alg}: free of a 0-byte allocation: {e}"));
            continue;
        }
        assert!(!a.ptr.is_null(), "{alg}: allocate({bytes}) gave null");
        assert_eq!(
            a.ptr as usize % 256,
            0,
            "{alg}: allocate({bytes}) is not 256-byte aligned"
        );
        let data = common::pattern(bytes, i as u8);
        env.upload(1, a.ptr, &data);
        assert!(
            env.download(1, a.ptr, bytes) == data,
            "{alg}: {bytes} bytes did not round-trip"
        );
        let s = alloc.stats();
        assert!(
            s.allocated_bytes.current >= bytes as u64,
            "{alg}: allocated_bytes for {bytes}"
        );
        assert_eq!(
            s.requested_bytes.current, bytes as u64,
            "{alg}: requested_bytes for {bytes}"
        );
        alloc
            .free(a.ptr)
            .unwrap_or_else(|e| panic!("{alg}: free after {bytes}: {e}"));
        assert_eq!(
            alloc.stats().allocated_bytes.current,
            0,
            "{alg}: freed {bytes}"
        );
    }
    assert!(
        env.used(1) > 0 || alg == Algorithm::Raw,
        "{alg}: device 1 memory is cached"
    );
    assert_eq!(env.used(0), used0, "{alg}: device 0 memory was touched");
    alloc.empty_cache().unwrap();
    assert_eq!(
        env.used(1),
        0,
        "{alg}: empty_cache gave device 1 memory back"
    );
}

/// Many live allocations of mixed sizes never overlap: checked on the
/// address ranges and by a distinct value written into each.
fn allocations_never_overlap(alg: Algorithm) {
    let env = Env::new(1 << 30);
    let alloc = env.allocator(0, alg);
    let stream = env.ctx.default_stream(0).unwrap();
    let mut seed = 0x2545_f491_u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize
    };
    let mut live = Vec::new();
    for round in 0..3 {
        while live.len() < 120 {
            let bytes = match next() % 4 {
                0 => 1 + next() % (2 * KIB),
                1 => 1 + next() % (64 * KIB),
                2 => 1 + next() % MIB,
                _ => MIB + next() % (3 * MIB),
            };
            let a = alloc.allocate(bytes, stream).unwrap();
            live.push((a.ptr, bytes));
        }
        let mut ranges: Vec<(usize, usize)> = live.iter().map(|&(p, n)| (p as usize, n)).collect();
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            assert!(
                w[0].0 + w[0].1 <= w[1].0,
                "{alg}: round {round}: {:#x}+{} overlaps {:#x}",
                w[0].0,
                w[0].1,
                w[1].0
            );
        }
        for (i, &(ptr, bytes)) in live.iter().enumerate() {
            env.memset_async(stream, ptr, (i % 251) as u8 + 1, bytes);
        }
        stream.synchronize().unwrap();
        for (i, &(ptr, bytes)) in live.iter().enumerate() {
            let want = vec![(i % 251) as u8 + 1; bytes];
            assert!(
                env.download(0, ptr, bytes) == want,
                "{alg}: round {round}: block {i} was overwritten"
            );
        }
        common::check_snapshot(alloc.as_ref(), &format!("{alg} round {round}"));
        // Free every other block, so the next round reuses split and cached memory.
        let mut keep = Vec::new();
        for (i, (ptr, bytes)) in live.drain(..).enumerate() {
            if (i + round) % 2 == 0 {
                alloc.free(ptr).unwrap();
            } else {
                keep.push((ptr, bytes));
            }
        }
        live = keep;
    }
    for (ptr, _) in live {
        alloc.free(ptr).unwrap();
    }
    assert_eq!(alloc.stats().allocated_bytes.current, 0, "{alg}: all freed");
}

/// A freed block serves the next same-size request on its stream (no
/// vendor call) for caching algorithms; RAW calls the vendor every time;
/// no algorithm hands a block cached for one stream to another stream.
fn freed_block_is_reused_on_its_stream_only(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let (s1, s2) = (env.stream(0), env.stream(0));
    for bytes in [4 * KIB, 3 * MIB] {
        let a = alloc.allocate(bytes, s1).unwrap();
        alloc.free(a.ptr).unwrap();
        let vendor_allocs = alloc.stats().num_device_alloc;
        let b = alloc.allocate(bytes, s1).unwrap();
        let grown = alloc.stats().num_device_alloc - vendor_allocs;
        if alg == Algorithm::Raw {
            assert_eq!(
                grown, 1,
                "{alg}: {bytes}: RAW must call the vendor for every allocation"
            );
        } else {
            assert_eq!(
                b.ptr, a.ptr,
                "{alg}: {bytes}: the freed block was not reused on its stream"
            );
            assert_eq!(grown, 0, "{alg}: {bytes}: reuse must not call the vendor");
        }
        alloc.free(b.ptr).unwrap();
        // The block cached for s1 is free now; s2 must get memory of its own.
        let c = alloc.allocate(bytes, s2).unwrap();
        let snap = alloc.snapshot();
        let seg = snap
            .segments
            .iter()
            .find(|s| s.address <= c.ptr as usize && (c.ptr as usize) < s.address + s.size)
            .unwrap_or_else(|| panic!("{alg}: {bytes}: no segment holds {:p}", c.ptr));
        assert_eq!(
            seg.stream,
            s2.id().as_u32(),
            "{alg}: {bytes}: s2 was given memory of a segment of another stream"
        );
        alloc.free(c.ptr).unwrap();
    }
}

/// A block used on s2 (`record_stream`) and freed while s2's work runs is
/// handed to nobody until that work is done.
fn pending_block_is_not_handed_out(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let (s1, s2) = (env.stream(0), env.stream(0));
    let bytes = 256 * KIB;
    let a = alloc.allocate(bytes, s1).unwrap();
    alloc.record_stream(a.ptr, s2).unwrap();
    let gate = common::hold(&env, s2, alg == Algorithm::Raw);
    alloc.free(a.ptr).unwrap();
    if alg == Algorithm::Raw {
        assert!(
            s2.query().unwrap(),
            "{alg}: free returned before s2's work on the block was done"
        );
    } else {
        let on_s1 = alloc.allocate(bytes, s1).unwrap();
        let on_s2 = alloc.allocate(bytes, s2).unwrap();
        assert!(!s2.query().unwrap(), "{alg}: s2 is still held");
        for (name, b) in [("s1", on_s1), ("s2", on_s2)] {
            let (x, y) = (b.ptr as usize, a.ptr as usize);
            assert!(
                x + bytes <= y || y + bytes <= x,
                "{alg}: the pending block {:p} was handed to {name} at {:p}",
                a.ptr,
                b.ptr
            );
        }
        alloc.free(on_s1.ptr).unwrap();
        alloc.free(on_s2.ptr).unwrap();
    }
    drop(gate);
    s2.synchronize().unwrap();
    assert!(
        env.vendor.take_async_error().is_none(),
        "{alg}: asynchronous error"
    );
}
