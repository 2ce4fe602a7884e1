//! The runtime trace through `Runtime` on the host vendor: allocator
//! events (allocate, free, segments, map and unmap, OOM and its retry,
//! empty_cache) and vendor calls, for the regular and the expandable
//! segment allocators.

use dipu_runtime::profiler as prof;
use dipu_runtime::{Algorithm, AllocatorConfig, Runtime, RuntimeOptions};
use serde_json::Value;

/// The tests share the process's trace and environment: one at a time.
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn names(cat: &str) -> Vec<String> {
    let doc: Value = serde_json::from_str(&prof::to_json()).unwrap();
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == cat)
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

fn count(v: &[String], name: &str) -> usize {
    v.iter().filter(|n| *n == name).count()
}

#[test]
fn allocator_and_vendor_events_reach_the_trace() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for conf in ["", "expandable_segments:True"] {
        let opts = RuntimeOptions::default()
            .with_algorithm(Algorithm::Torch)
            .with_alloc_conf(AllocatorConfig::parse(conf).unwrap());
        let rt = Runtime::new(opts).unwrap();
        let stream = rt.context().stream_from_pool(0, false).unwrap();
        prof::clear();
        prof::start();
        let p = rt.allocate_raw(3 << 20, stream).unwrap();
        rt.free_raw(0, p).unwrap();
        rt.empty_cache(0).unwrap();
        // More than the process's memory fraction allows: out of memory
        // after the retry.
        let total = rt.device_properties(0).unwrap().total_memory as usize;
        rt.set_memory_fraction(0, 0.01).unwrap();
        assert!(rt.allocate_raw(total / 10, stream).is_err());
        prof::stop();
        let alloc = names("allocator");
        assert_eq!(count(&alloc, "allocate"), 1, "{conf}: {alloc:?}");
        assert_eq!(count(&alloc, "free"), 1, "{conf}: {alloc:?}");
        assert_eq!(count(&alloc, "empty_cache"), 1, "{conf}: {alloc:?}");
        assert_eq!(count(&alloc, "oom_retry"), 1, "{conf}: {alloc:?}");
        assert_eq!(count(&alloc, "oom"), 1, "{conf}: {alloc:?}");
        if conf.is_empty() {
            assert!(count(&alloc, "segment_created") >= 1, "{alloc:?}");
            assert!(count(&alloc, "segment_returned") >= 1, "{alloc:?}");
        } else {
            assert!(count(&alloc, "map") >= 1, "{alloc:?}");
            assert!(count(&alloc, "unmap") >= 1, "{alloc:?}");
        }
        let vendor = names("vendor");
        let want = if conf.is_empty() { "malloc" } else { "vmm_map" };
        assert!(count(&vendor, want) >= 1, "{conf}: {vendor:?}");
        // Off: nothing more is kept.
        let before = prof::events();
        let p = rt.allocate_raw(64, stream).unwrap();
        rt.free_raw(0, p).unwrap();
        assert_eq!(prof::events(), before);
        prof::clear();
    }
}

/// While the trace records, `dipu_malloc`'s hit paths step aside (they
/// would bypass its hooks), so every allocate and free is in the trace.
#[test]
fn hit_paths_step_aside_while_the_trace_records() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit)).unwrap();
    let stream = rt.context().stream_from_pool(0, false).unwrap();
    // The memory checker (`DIPU_MEM_CHECK=1`, as scripts/test.sh also runs
    // this suite) is an observer too: with it on the hit paths never serve.
    let hits = !dipu_runtime::memcheck::enabled();
    let p = rt.allocate_raw(256, stream).unwrap();
    assert_eq!(rt.free_cached(p), hits, "trace off: the hit path serves");
    if !hits {
        rt.free_raw(0, p).unwrap();
    }
    prof::clear();
    prof::start();
    assert_eq!(rt.allocate_cached(256, stream), None, "trace on");
    let q = rt.allocate_raw(256, stream).unwrap();
    assert!(!rt.free_cached(q), "trace on");
    rt.free_raw(0, q).unwrap();
    prof::stop();
    let alloc = names("allocator");
    assert_eq!(count(&alloc, "allocate"), 1, "{alloc:?}");
    assert_eq!(count(&alloc, "free"), 1, "{alloc:?}");
    prof::clear();
    let r = rt.allocate_raw(256, stream).unwrap();
    assert_eq!(rt.free_cached(r), hits, "trace off again");
    if !hits {
        rt.free_raw(0, r).unwrap();
    }
}

#[test]
fn a_bad_dipu_profile_events_is_a_config_error() {
    let _l = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("DIPU_PROFILE_EVENTS", "many");
    let err = Runtime::new(RuntimeOptions::default()).unwrap_err();
    std::env::remove_var("DIPU_PROFILE_EVENTS");
    assert_eq!(err.kind(), dipu_runtime::ErrorKind::InvalidConfig);
    assert!(err.message().contains("DIPU_PROFILE_EVENTS"), "{err}");
}
