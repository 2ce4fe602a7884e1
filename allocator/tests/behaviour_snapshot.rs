//! Snapshots and the memory fraction, for every device allocator (issue
//! 4), one test per algorithm: snapshot contents (segments sorted, blocks
//! tiling them, states and requested sizes) and their JSON; the limit a
//! memory fraction sets and the OOM error it gives.

#[macro_use]
mod common;

use common::{Env, KIB, MIB};
use dipu_allocator::{Algorithm, BlockState};
use dipu_deviceapi::ErrorKind;

per_algorithm!(
    snapshot_describes_every_block,
    memory_fraction_limits_and_explains
);

/// Live, freed and pending blocks as the snapshot and its JSON show them;
/// the pending block becomes free once its stream is done.
fn snapshot_describes_every_block(alg: Algorithm) {
    let env = Env::new(256 << 20);
    let alloc = env.allocator(0, alg);
    let (s1, s2) = (env.stream(0), env.stream(0));
    let live: Vec<_> = [5000, 2 * MIB + 3, 13 * MIB]
        .into_iter()
        .map(|n| alloc.allocate(n, s1).unwrap())
        .collect();
    let freed = alloc.allocate(700 * KIB, s1).unwrap();
    let pending = alloc.allocate(100 * KIB, s1).unwrap();
    alloc.free(freed.ptr).unwrap();
    alloc.record_stream(pending.ptr, s2).unwrap();
    let gate = common::hold(&env, s2, alg == Algorithm::Raw);
    alloc.free(pending.ptr).unwrap();
    let snap = common::check_snapshot(alloc.as_ref(), &alg.to_string());
    let blocks: Vec<_> = snap.segments.iter().flat_map(|s| &s.blocks).collect();
    let holding = |p: usize| {
        blocks
            .iter()
            .find(|b| b.address <= p && p < b.address + b.size)
    };
    for a in &live {
        let b = blocks
            .iter()
            .find(|b| b.address == a.ptr as usize)
            .unwrap_or_else(|| panic!("{alg}: live {:p} missing", a.ptr));
        assert_eq!(
            (b.state, b.requested),
            (BlockState::Allocated, a.size),
            "{alg}: live block {:p}",
            a.ptr
        );
        assert!(
            b.size >= a.size,
            "{alg}: block of {} for {} bytes",
            b.size,
            a.size
        );
    }
    let json = snap.to_json();
    let count = |pat: &str| json.matches(pat).count();
    assert!(json.starts_with("{\"segments\":["), "{alg}: {json}");
    assert_eq!(count("{\"address\""), blocks.len(), "{alg}: JSON blocks");
    assert_eq!(
        count("{\"device\""),
        snap.segments.len(),
        "{alg}: JSON segments"
    );
    if alg == Algorithm::Raw {
        assert!(
            holding(freed.ptr as usize).is_none(),
            "{alg}: a freed block is still listed"
        );
        assert!(
            holding(pending.ptr as usize).is_none(),
            "{alg}: RAW gives memory back at free"
        );
        assert_eq!(
            blocks.len(),
            live.len(),
            "{alg}: one block per live allocation"
        );
    } else {
        let f = holding(freed.ptr as usize)
            .unwrap_or_else(|| panic!("{alg}: the freed block is not cached"));
        assert_eq!(f.state, BlockState::Free, "{alg}: freed block");
        let p = blocks
            .iter()
            .find(|b| b.address == pending.ptr as usize)
            .unwrap();
        assert_eq!(
            (p.state, p.requested),
            (BlockState::Pending, 100 * KIB),
            "{alg}: pending block"
        );
        assert_eq!(
            count("\"state\":\"pending\""),
            1,
            "{alg}: JSON pending blocks"
        );
        assert_eq!(
            blocks
                .iter()
                .filter(|b| b.state == BlockState::Allocated)
                .count(),
            live.len(),
            "{alg}: allocated blocks"
        );
    }
    drop(gate);
    s2.synchronize().unwrap();
    let probe = alloc.allocate(1, s1).unwrap(); // releases pending frees whose work is done
    alloc.free(probe.ptr).unwrap();
    let snap = common::check_snapshot(alloc.as_ref(), &format!("{alg} after s2 finished"));
    assert_eq!(
        snap.bytes_in(BlockState::Pending),
        0,
        "{alg}: still pending after s2 finished"
    );
    for a in live {
        alloc.free(a.ptr).unwrap();
    }
}

/// A fraction of 0.25 of a 64 MiB device: 12 MiB fits, 17 MiB is an OOM
/// that explains itself; bad fractions are rejected.
fn memory_fraction_limits_and_explains(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(1, alg);
    let s = env.ctx.default_stream(1).unwrap();
    for bad in [0.0, 1.5, f64::NAN, -0.25, f64::INFINITY] {
        let e = alloc
            .set_memory_fraction(bad)
            .expect_err(&format!("{alg}: fraction {bad} accepted"));
        assert_eq!(
            e.kind(),
            ErrorKind::InvalidArgument,
            "{alg}: fraction {bad}: {e}"
        );
    }
    alloc.set_memory_fraction(0.25).unwrap();
    let ok = alloc
        .allocate(12 * MIB, s)
        .unwrap_or_else(|e| panic!("{alg}: 12 MiB within a 16 MiB limit: {e}"));
    alloc.free(ok.ptr).unwrap();
    alloc.empty_cache().unwrap();
    let e = alloc
        .allocate(17 * MIB, s)
        .expect_err(&format!("{alg}: 17 MiB allowed by a 16 MiB limit"));
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{alg}: {e}");
    let m = e.message();
    assert!(
        m.contains("device 1"),
        "{alg}: the OOM message should name device 1: {m}"
    );
    assert!(
        m.contains("17.00 MiB") || m.contains("17825792"),
        "{alg}: the OOM message should name the 17 MiB requested: {m}"
    );
    assert!(
        m.contains("reserved") && m.contains("allocated"),
        "{alg}: the OOM message should give reserved and allocated memory: {m}"
    );
    assert!(
        [
            "expandable_segments",
            "max_split_size_mb",
            "per_process_memory_fraction"
        ]
        .iter()
        .any(|o| m.contains(o)),
        "{alg}: the OOM message should suggest an option: {m}"
    );
    assert_eq!(alloc.stats().num_ooms, 1, "{alg}: num_ooms");
    alloc.set_memory_fraction(1.0).unwrap();
    let big = alloc
        .allocate(17 * MIB, s)
        .unwrap_or_else(|e| panic!("{alg}: 17 MiB with the whole device: {e}"));
    alloc.free(big.ptr).unwrap();
}
