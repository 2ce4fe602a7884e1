//! What the memory checker's guard and poison tests share: the runtimes
//! they run on (every algorithm, and expandable segments where the vendor
//! has virtual memory), on the vendor `DIPU_VENDOR` names (the host vendor
//! by default; `scripts/test.sh` also runs them on the vendors' fakes).
//! With `DIPU_TEST_EXPECT_VENDOR=name` a runtime on any other vendor fails
//! the test, so a fake that did not load cannot pass as the host vendor.

use std::sync::Arc;

use dipu_deviceapi::Capabilities;
use dipu_runtime::{Algorithm, AllocatorConfig, Runtime, RuntimeOptions};

/// A runtime with `algorithm`, expandable segments or not, on the vendor
/// of the environment (checked against `DIPU_TEST_EXPECT_VENDOR`).
pub(crate) fn runtime(algorithm: Algorithm, expandable: bool) -> Arc<Runtime> {
    let conf = AllocatorConfig {
        expandable_segments: expandable,
        ..AllocatorConfig::default()
    };
    let rt = Runtime::new(
        RuntimeOptions::default()
            .with_algorithm(algorithm)
            .with_alloc_conf(conf),
    )
    .unwrap();
    if let Ok(expected) = std::env::var("DIPU_TEST_EXPECT_VENDOR") {
        assert_eq!(
            rt.vendor_name(),
            expected,
            "DIPU_TEST_EXPECT_VENDOR: the vendor that loaded"
        );
    }
    rt
}

/// Every algorithm, and expandable segments under TORCH and BF when the
/// vendor has virtual memory (said on stderr when it has not).
pub(crate) fn setups() -> Vec<(Algorithm, bool)> {
    let mut v: Vec<(Algorithm, bool)> = [
        Algorithm::Torch,
        Algorithm::BestFit,
        Algorithm::BinSize,
        Algorithm::Raw,
    ]
    .into_iter()
    .map(|a| (a, false))
    .collect();
    let rt = runtime(Algorithm::BestFit, false);
    if rt
        .api()
        .capabilities()
        .contains(Capabilities::VIRTUAL_MEMORY)
    {
        v.push((Algorithm::Torch, true));
        v.push((Algorithm::BestFit, true));
    } else {
        eprintln!(
            "vendor `{}` has no virtual memory: expandable segments not tested on it",
            rt.vendor_name()
        );
    }
    v
}

/// Under every setup: 200 allocations of changing sizes on one stream, each
/// filled exactly (its user bytes only) on a second stream ordered after the
/// first, a third of them freed as it goes, then the rest; with the checker
/// on, nothing may be reported and every block must be given back.
pub(crate) fn clean_work_on_two_streams_reports_nothing() {
    for (algorithm, expandable) in setups() {
        // Reports of an earlier setup may name the same addresses.
        dipu_memcheck::MemCheck::clear();
        let what = format!("{algorithm} expandable={expandable}");
        let rt = runtime(algorithm, expandable);
        let ctx = rt.context();
        let a = ctx.stream_from_pool(0, false).unwrap();
        let b = ctx.new_stream(0, 0).unwrap();
        let mut live = Vec::new();
        for i in 0..200usize {
            let size = 1 + (i * 7919) % 70_000;
            let p = rt.allocate_raw(size, a).unwrap();
            // Fill exactly the user's bytes, on the other stream, after the
            // allocation's stream (as a framework orders a consumer).
            rt.record_stream_raw(p, b).unwrap();
            let ready = ctx.pooled_event(0).unwrap();
            ready.record(&a).unwrap();
            ready.block(&b).unwrap();
            // SAFETY: `p..p + size` is the live allocation just made.
            unsafe { rt.api().memset_async(p, 0xAB, size, b.raw()).unwrap() };
            live.push(p);
            if i % 3 == 0 {
                rt.free_raw(0, live.swap_remove(0)).unwrap();
            }
        }
        assert_eq!(rt.check_guards().unwrap(), 0, "{what}");
        for p in live {
            rt.free_raw(0, p).unwrap();
        }
        let report = rt.release_and_report();
        assert!(report.is_clean(), "{what}: {report:?}");
        let r = report.memcheck.unwrap();
        assert!(r.violations.is_empty(), "{what}: {:?}", r.violations);
        assert_eq!(
            rt.stats(0).unwrap().allocation.current,
            0,
            "{what}: guarded blocks all given back"
        );
    }
}

/// The checker's variables the suite may run under (`DIPU_MEM_CHECK=1`
/// with guards and poison, as scripts/test.sh runs the runtime's tests):
/// removed, so that creating a runtime does not change what a test set.
/// Every test of the file holds `LOCK`, so nothing reads the environment
/// meanwhile.
pub(crate) fn forget_checker_variables() {
    use dipu_runtime::memcheck as m;
    for var in [
        m::ENV_MEM_CHECK,
        m::ENV_BACKTRACE,
        m::ENV_GUARD_BYTES,
        m::ENV_POISON,
        m::ENV_QUARANTINE_BYTES,
        m::ENV_ABORT,
    ] {
        std::env::remove_var(var);
    }
}
