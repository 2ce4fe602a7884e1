//! Accounting every device allocator shares (issue 4), one test per
//! algorithm: statistics after a known sequence, `reset_peak_stats` and
//! `empty_cache`.

#[macro_use]
mod common;

use common::{Env, KIB, MIB};
use dipu_allocator::{Algorithm, BlockState};

per_algorithm!(
    stats_add_up_after_a_known_sequence,
    reset_peak_stats_sets_peaks_to_current,
    empty_cache_returns_every_free_segment,
);

/// The block that serves `bytes`, as each algorithm documents its rounding.
fn block(alg: Algorithm, bytes: usize) -> u64 {
    let up = |n: usize, to: usize| n.div_ceil(to) * to;
    (match alg {
        Algorithm::Torch | Algorithm::BestFit => up(bytes.max(1), 512),
        Algorithm::BinSize if bytes <= 512 => 512,
        Algorithm::BinSize => {
            let floor = 1usize << (usize::BITS - 1 - bytes.leading_zeros());
            up(bytes, floor / 16)
        }
        Algorithm::Raw => bytes,
    }) as u64
}

/// a=1000, b=3 MiB, c=700; free a, b; d=1000; free c, d.
fn stats_add_up_after_a_known_sequence(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let (na, nb, nc) = (1000, 3 * MIB, 700);
    let a = alloc.allocate(na, s).unwrap();
    let b = alloc.allocate(nb, s).unwrap();
    let c = alloc.allocate(nc, s).unwrap();
    alloc.free(a.ptr).unwrap();
    alloc.free(b.ptr).unwrap();
    let d = alloc.allocate(na, s).unwrap();
    let mid = alloc.stats();
    assert_eq!(
        mid.allocation.current, 2,
        "{alg}: allocation.current with c and d live"
    );
    assert_eq!(
        mid.allocated_bytes.current,
        block(alg, nc) + block(alg, na),
        "{alg}: allocated_bytes mid-way"
    );
    assert_eq!(
        mid.requested_bytes.current,
        (nc + na) as u64,
        "{alg}: requested_bytes mid-way"
    );
    common::check_snapshot(alloc.as_ref(), &format!("{alg} mid-way"));
    alloc.free(c.ptr).unwrap();
    alloc.free(d.ptr).unwrap();

    let st = alloc.stats();
    let label = alg.to_string();
    for (name, stat) in common::all_stats(&st) {
        common::check_stat(name, stat, &label);
    }
    let peak_bytes = block(alg, na) + block(alg, nb) + block(alg, nc);
    let total_bytes = peak_bytes + block(alg, na);
    let requested_peak = (na + nb + nc) as u64;
    let requested_total = requested_peak + na as u64;
    for (name, stat) in [("allocation", st.allocation), ("active", st.active)] {
        assert_eq!(
            (stat.current, stat.peak, stat.allocated, stat.freed),
            (0, 3, 4, 4),
            "{alg}: {name} {stat:?}"
        );
    }
    for (name, stat) in [
        ("allocated_bytes", st.allocated_bytes),
        ("active_bytes", st.active_bytes),
    ] {
        assert_eq!(
            (stat.current, stat.peak, stat.allocated, stat.freed),
            (0, peak_bytes, total_bytes, total_bytes),
            "{alg}: {name} {stat:?}"
        );
    }
    let r = st.requested_bytes;
    assert_eq!(
        (r.current, r.peak, r.allocated, r.freed),
        (0, requested_peak, requested_total, requested_total),
        "{alg}: requested_bytes {r:?}"
    );
    // Segments: TORCH a 2 MiB small and a 20 MiB large one; BF a 2 MiB and
    // a 4 MiB one; BS one per block of a, b and c (d reuses a's); RAW one
    // per allocation.
    let (segments, reserved) = match alg {
        Algorithm::Torch => (2, 22 * MIB as u64),
        Algorithm::BestFit => (2, 6 * MIB as u64),
        Algorithm::BinSize => (3, peak_bytes),
        Algorithm::Raw => (4, total_bytes),
    };
    let (seg, res) = (st.segment, st.reserved_bytes);
    if alg == Algorithm::Raw {
        assert_eq!(
            (seg.current, seg.peak, seg.allocated, seg.freed),
            (0, 3, 4, 4),
            "{alg}: segment {seg:?}"
        );
        assert_eq!(
            (res.current, res.peak, res.allocated),
            (0, peak_bytes, reserved),
            "{alg}: reserved {res:?}"
        );
    } else {
        assert_eq!(
            (seg.current, seg.peak, seg.allocated, seg.freed),
            (segments, segments, segments, 0),
            "{alg}: segment {seg:?}"
        );
        assert_eq!(
            (res.current, res.peak, res.allocated, res.freed),
            (reserved, reserved, reserved, 0),
            "{alg}: reserved {res:?}"
        );
    }
    assert_eq!(
        (st.num_device_alloc, st.num_device_free),
        (segments, seg.freed),
        "{alg}: vendor calls"
    );
    if alg == Algorithm::BestFit {
        // BF parks freed blocks whole and merges them only before it grows
        // (or empties its cache): the pieces still count as split here.
        assert!(
            st.inactive_split_bytes.current <= res.current,
            "{alg}: split pieces within reserved"
        );
    } else {
        assert_eq!(
            (st.inactive_split.current, st.inactive_split_bytes.current),
            (0, 0),
            "{alg}: nothing split when all is free"
        );
    }
    assert_eq!(
        (st.num_alloc_retries, st.num_ooms),
        (0, 0),
        "{alg}: no retries or OOMs"
    );
    assert_eq!(
        env.used(0),
        res.current,
        "{alg}: the vendor holds exactly what is reserved"
    );
    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!(
        (st.inactive_split.current, st.inactive_split_bytes.current),
        (0, 0),
        "{alg}: nothing split once the cache is emptied"
    );
}

fn reset_peak_stats_sets_peaks_to_current(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let big = alloc.allocate(12 * MIB, s).unwrap();
    let small = alloc.allocate(3 * KIB, s).unwrap();
    alloc.free(big.ptr).unwrap();
    alloc.empty_cache().unwrap();
    let before = alloc.stats();
    assert!(
        before.allocated_bytes.peak > before.allocated_bytes.current,
        "{alg}: the peak is above current"
    );
    alloc.reset_peak_stats();
    let after = alloc.stats();
    for ((name, b), (_, a)) in common::all_stats(&before)
        .into_iter()
        .zip(common::all_stats(&after))
    {
        assert_eq!(
            a.peak, a.current,
            "{alg}: {name}: peak not reset to current"
        );
        assert_eq!(
            (a.current, a.allocated, a.freed),
            (b.current, b.allocated, b.freed),
            "{alg}: {name}: reset changed more than the peak"
        );
    }
    let more = alloc.allocate(5 * KIB, s).unwrap();
    let now = alloc.stats();
    assert_eq!(
        now.allocated_bytes.peak, now.allocated_bytes.current,
        "{alg}: the peak follows new growth"
    );
    assert_eq!(
        now.requested_bytes.peak,
        (8 * KIB) as u64,
        "{alg}: requested peak after reset"
    );
    alloc.free(small.ptr).unwrap();
    alloc.free(more.ptr).unwrap();
}

fn empty_cache_returns_every_free_segment(alg: Algorithm) {
    let env = Env::new(256 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let start = env.used(0);
    let keep = alloc.allocate(MIB, s).unwrap();
    let data = common::pattern(MIB, 3);
    env.upload(0, keep.ptr, &data);
    let others: Vec<_> = [1000, 300 * KIB, 3 * MIB, 12 * MIB, 40 * MIB]
        .into_iter()
        .map(|n| alloc.allocate(n, s).unwrap())
        .collect();
    for a in &others {
        alloc.free(a.ptr).unwrap();
    }
    let st = alloc.stats();
    if alg != Algorithm::Raw {
        assert!(
            st.reserved_bytes.current > st.allocated_bytes.current,
            "{alg}: freed blocks stay cached"
        );
    }
    alloc.empty_cache().unwrap();
    let snap = common::check_snapshot(alloc.as_ref(), &format!("{alg} after empty_cache"));
    for seg in &snap.segments {
        assert!(
            seg.blocks.iter().any(|b| b.state != BlockState::Free),
            "{alg}: empty_cache kept the free segment {:#x}",
            seg.address
        );
    }
    assert_eq!(
        env.used(0) - start,
        alloc.stats().reserved_bytes.current,
        "{alg}: vendor vs reserved"
    );
    assert!(
        env.download(0, keep.ptr, MIB) == data,
        "{alg}: empty_cache damaged a live block"
    );
    alloc.free(keep.ptr).unwrap();
    alloc.empty_cache().unwrap();
    let st = alloc.stats();
    assert_eq!(
        (st.reserved_bytes.current, st.segment.current),
        (0, 0),
        "{alg}: reserved after the last free and empty_cache"
    );
    assert_eq!(
        st.num_device_free, st.num_device_alloc,
        "{alg}: every vendor allocation freed"
    );
    assert_eq!(
        env.used(0),
        start,
        "{alg}: the vendor's memory is back to its start"
    );
}
