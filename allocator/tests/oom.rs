//! Out of memory on the host vendor (issue 4): the recovery ladder (free
//! the cache, wait for streams, retry), the OOM error and its message, the
//! cache still serving afterwards, and `garbage_collection_threshold`.

#[macro_use]
mod common;

use common::{Env, KIB, MIB};
use dipu_allocator::{Algorithm, AllocatorConfig};
use dipu_deviceapi::{Error, ErrorKind};
use dipu_vendor_host::Fault;

const DEVICE_MEMORY: u64 = 64 << 20;

per_caching_algorithm!(
    injected_failure_is_retried_after_freeing_the_cache,
    real_shortage_is_retried_after_freeing_the_cache,
    oom_explains_itself_and_the_cache_still_serves,
    gc_threshold_keeps_reserved_below_it,
);

/// RAW's out-of-memory error explains itself like the caching algorithms'.
#[test]
fn raw_reports_oom_like_the_others() {
    let env = Env::new(DEVICE_MEMORY);
    let alloc = env.allocator(0, Algorithm::Raw);
    let s = env.ctx.default_stream(0).unwrap();
    env.vendor.set_fault(Fault::AfterBytes(0));
    let e = alloc
        .allocate(40 * MIB, s)
        .expect_err("RAW: every malloc fails");
    assert_eq!(alloc.stats().num_ooms, 1, "RAW: num_ooms");
    assert_oom_message(Algorithm::Raw, &e, 0, "40.00 MiB");
}

/// The checks every OOM error must pass.
fn assert_oom_message(alg: Algorithm, e: &Error, device: i32, requested: &str) {
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{alg}: {e}");
    let m = e.message();
    for (what, word) in [
        ("the device", format!("device {device}")),
        ("the request", requested.to_owned()),
        ("the reserved memory", "reserved".to_owned()),
        ("the allocated memory", "allocated".to_owned()),
    ] {
        assert!(
            m.contains(&word),
            "{alg}: the OOM message should name {what} ({word:?}): {m}"
        );
    }
    assert!(
        m.contains("expandable_segments") || m.contains("max_split_size_mb"),
        "{alg}: the OOM message should suggest expandable_segments or max_split_size_mb: {m}"
    );
}

/// A cached 12 MiB segment; the next vendor malloc fails once; a 14 MiB
/// request frees the cache, retries and succeeds.
fn injected_failure_is_retried_after_freeing_the_cache(alg: Algorithm) {
    let env = Env::new(DEVICE_MEMORY);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let cached = alloc.allocate(12 * MIB, s).unwrap();
    alloc.free(cached.ptr).unwrap();
    assert_eq!(
        alloc.stats().reserved_bytes.current,
        12 * MIB as u64,
        "{alg}: 12 MiB cached"
    );
    env.vendor.set_fault(Fault::MallocAt(1));
    let a = alloc
        .allocate(14 * MIB, s)
        .unwrap_or_else(|e| panic!("{alg}: the retry after freeing the cache should succeed: {e}"));
    let st = alloc.stats();
    assert_eq!(
        (st.num_alloc_retries, st.num_ooms),
        (1, 0),
        "{alg}: retries and OOMs"
    );
    assert_eq!(
        st.num_device_free, 1,
        "{alg}: the cached segment went back to the vendor"
    );
    assert_eq!(st.segment.current, 1, "{alg}: only the new segment is left");
    assert_eq!(
        env.used(0),
        st.reserved_bytes.current,
        "{alg}: vendor vs reserved"
    );
    let data = common::pattern(14 * MIB, 1);
    env.upload(0, a.ptr, &data);
    assert!(
        env.download(0, a.ptr, 14 * MIB) == data,
        "{alg}: retried memory is usable"
    );
    alloc.free(a.ptr).unwrap();
}

/// No injected fault: 30 MiB cached and 40 MiB requested do not both fit
/// in 64 MiB; the allocator must give the cache back to succeed.
fn real_shortage_is_retried_after_freeing_the_cache(alg: Algorithm) {
    let env = Env::new(DEVICE_MEMORY);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let cached = alloc.allocate(30 * MIB, s).unwrap();
    alloc.free(cached.ptr).unwrap();
    let a = alloc
        .allocate(40 * MIB, s)
        .unwrap_or_else(|e| panic!("{alg}: 40 MiB fits once the cache is freed: {e}"));
    let st = alloc.stats();
    assert_eq!(st.num_ooms, 0, "{alg}: no OOM");
    assert!(st.num_alloc_retries <= 1, "{alg}: at most one retry");
    assert_eq!(
        st.reserved_bytes.current,
        40 * MIB as u64,
        "{alg}: only the new segment"
    );
    assert_eq!(
        env.used(0),
        40 * MIB as u64,
        "{alg}: the vendor holds the new segment only"
    );
    alloc.free(a.ptr).unwrap();
}

/// Every vendor malloc fails: a request that needs a new segment is an
/// OOM with a useful message; requests the cache can serve still succeed.
fn oom_explains_itself_and_the_cache_still_serves(alg: Algorithm) {
    let env = Env::new(DEVICE_MEMORY);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let x = alloc.allocate(MIB, s).unwrap();
    let z = alloc.allocate(256 * KIB, s).unwrap();
    env.vendor.set_fault(Fault::AfterBytes(0));
    let before = alloc.stats();
    let e = alloc.allocate(40 * MIB, s).expect_err(&format!(
        "{alg}: 40 MiB allocated with every malloc failing"
    ));
    assert_oom_message(alg, &e, 0, "40.00 MiB");
    let st = alloc.stats();
    assert_eq!(
        (st.num_ooms, st.num_alloc_retries),
        (1, 0),
        "{alg}: OOM counted once, no retry"
    );
    assert_eq!(
        st.allocated_bytes, before.allocated_bytes,
        "{alg}: a failed allocation allocates nothing"
    );
    assert_eq!(
        st.requested_bytes, before.requested_bytes,
        "{alg}: a failed allocation requests nothing"
    );
    // The cache still serves: a freed block of the same size...
    let vendor_allocs = st.num_device_alloc;
    alloc.free(z.ptr).unwrap();
    let z2 = alloc.allocate(256 * KIB, s).unwrap_or_else(|e| {
        panic!("{alg}: a cached 256 KiB block should serve after the OOM: {e}")
    });
    // ...and, where blocks split, the free rest of a segment in use.
    let rest = (alg != Algorithm::BinSize).then(|| {
        alloc.allocate(512 * KIB, s).unwrap_or_else(|e| {
            panic!("{alg}: 512 KiB fits in the cached rest of x's segment: {e}")
        })
    });
    assert_eq!(
        alloc.stats().num_device_alloc,
        vendor_allocs,
        "{alg}: served without the vendor"
    );
    env.vendor.set_fault(Fault::None);
    for p in [Some(x.ptr), Some(z2.ptr), rest.map(|r| r.ptr)]
        .into_iter()
        .flatten()
    {
        alloc.free(p).unwrap();
    }
    common::check_snapshot(alloc.as_ref(), &format!("{alg} after the OOM"));
}

/// Allocate and free 10, 12, 14 and 16 MiB in turn: each needs a new
/// segment and the earlier ones stay cached. With a threshold of 0.5 of
/// 64 MiB, cached segments go before reserved passes 32 MiB.
fn gc_threshold_keeps_reserved_below_it(alg: Algorithm) {
    let sizes = [10 * MIB, 12 * MIB, 14 * MIB, 16 * MIB];
    let run = |config: &AllocatorConfig| {
        let env = Env::new(DEVICE_MEMORY);
        let alloc = env.allocator_with(0, alg, config);
        let s = env.ctx.default_stream(0).unwrap();
        for bytes in sizes {
            let a = alloc
                .allocate(bytes, s)
                .unwrap_or_else(|e| panic!("{alg}: {bytes}: {e}"));
            alloc.free(a.ptr).unwrap();
        }
        let st = alloc.stats();
        assert_eq!(st.num_ooms, 0, "{alg}: no OOM");
        assert_eq!(
            env.used(0),
            st.reserved_bytes.current,
            "{alg}: vendor vs reserved"
        );
        st.reserved_bytes.peak
    };
    let bound = (32 * MIB + 16 * MIB) as u64;
    let gc = run(&AllocatorConfig::parse("garbage_collection_threshold:0.5").unwrap());
    assert!(
        gc <= bound,
        "{alg}: with the threshold, reserved peaked at {} MiB",
        gc >> 20
    );
    let plain = run(&AllocatorConfig::default());
    if alg != Algorithm::BestFit {
        // BF releases whole cached segments before growing anyway.
        assert!(
            plain > bound,
            "{alg}: without the threshold the sequence should cache more ({} MiB)",
            plain >> 20
        );
    }
}
