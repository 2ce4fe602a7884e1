//! No false positives on a real workload: the resnet18 allocation trace
//! (`allocator/traces/resnet18.trace`) replayed on three streams (every
//! third block also used on the next stream, so its free waits for
//! events) through the runtime's device allocator under every algorithm,
//! with 64-byte guards and poison (default quarantine), reports no
//! violation. (`runtime/benches/memcheck_replay.rs` measures the peak
//! reserved memory of the same replays.) The checker is process-global:
//! one test.

use dipu_allocator::replay::{replay, Trace};
use dipu_runtime::memcheck::{self, MemCheck};
use dipu_runtime::{Algorithm, AllocatorConfig, Runtime, RuntimeOptions};

#[test]
fn the_resnet18_trace_with_guards_and_poison_reports_nothing() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../allocator/traces/resnet18.trace"
    );
    let trace = Trace::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    MemCheck::clear();
    memcheck::set_options(64, false);
    memcheck::set_poison(true, memcheck::DEFAULT_QUARANTINE_BYTES);
    MemCheck::enable(false);
    for (algorithm, expandable) in [
        (Algorithm::Torch, false),
        (Algorithm::BestFit, false),
        (Algorithm::BinSize, false),
        (Algorithm::Raw, false),
        (Algorithm::BestFit, true),
    ] {
        let what = format!("{algorithm} expandable={expandable}");
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
        assert_eq!(rt.guard_bytes(), Some((512, 64)), "{what}");
        assert!(rt.quarantine_bytes().is_some(), "{what}");
        let streams: Vec<_> = (0..3)
            .map(|_| rt.context().stream_from_pool(0, false).unwrap())
            .collect();
        let r = replay(&trace, rt.allocator(0).unwrap(), &streams, |_| Ok(()))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(r.events, trace.events.len(), "{what}");
        assert_eq!(rt.check_guards().unwrap(), 0, "{what}");
        let report = rt.release_and_report();
        assert!(report.is_clean(), "{what}: {report:?}");
        let violations = memcheck::report().violations;
        assert!(violations.is_empty(), "{what}: {violations:?}");
    }
    MemCheck::disable();
    memcheck::set_options(0, false);
    memcheck::set_poison(false, memcheck::DEFAULT_QUARANTINE_BYTES);
    MemCheck::clear();
}
