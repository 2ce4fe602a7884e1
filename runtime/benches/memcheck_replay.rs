//! Peak reserved memory of the resnet18 allocation trace
//! (`allocator/traces/resnet18.trace`) replayed through the runtime's
//! device allocator under every algorithm, with the checker off, with
//! 64-byte guards, and with guards and poison (default quarantine): the
//! table of `docs/benchmarks.md` (memory checker section). Every replay
//! must report no violation. (The test `memcheck_replay` checks the same
//! on three streams without the figures.)

use dipu_allocator::replay::{replay, Trace};
use dipu_runtime::memcheck::{self, MemCheck};
use dipu_runtime::{Algorithm, AllocatorConfig, Runtime, RuntimeOptions};

/// (label, algorithm, expandable segments).
const SETUPS: [(&str, Algorithm, bool); 5] = [
    ("TORCH", Algorithm::Torch, false),
    ("BF", Algorithm::BestFit, false),
    ("BS", Algorithm::BinSize, false),
    ("RAW", Algorithm::Raw, false),
    ("BF + expandable", Algorithm::BestFit, true),
];

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../allocator/traces/resnet18.trace"
    );
    let trace = Trace::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    println!("| algorithm | off | guards 64 | guards 64 + poison |");
    for (label, algorithm, expandable) in SETUPS {
        let mut peaks = Vec::new();
        for (guards, poison) in [(0, false), (64, false), (64, true)] {
            MemCheck::clear();
            memcheck::set_options(guards, false);
            memcheck::set_poison(poison, memcheck::DEFAULT_QUARANTINE_BYTES);
            if guards > 0 {
                MemCheck::enable(false);
            }
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
            assert_eq!(rt.guard_bytes().is_some(), guards > 0);
            assert_eq!(rt.quarantine_bytes().is_some(), poison);
            let streams = [
                rt.context().stream_from_pool(0, false).unwrap(),
                rt.context().stream_from_pool(0, false).unwrap(),
                rt.context().stream_from_pool(0, false).unwrap(),
            ];
            let what = format!("{label} guards={guards} poison={poison}");
            // One stream for the figure; with guards and poison, three too
            // (blocks used on the next stream too: their frees wait for
            // events).
            let one = replay(&trace, rt.allocator(0).unwrap(), &streams[..1], |_| Ok(()))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            if poison {
                replay(&trace, rt.allocator(0).unwrap(), &streams, |_| Ok(()))
                    .unwrap_or_else(|e| panic!("{what}, three streams: {e}"));
            }
            assert_eq!(rt.check_guards().unwrap(), 0, "{what}");
            let report = rt.release_and_report();
            assert!(report.is_clean(), "{what}: {report:?}");
            let violations = memcheck::report().violations;
            assert!(violations.is_empty(), "{what}: {violations:?}");
            peaks.push(one.peak_reserved as f64 / (1 << 20) as f64);
            MemCheck::disable();
        }
        println!(
            "| {label} | {:.2} MiB | {:.2} MiB | {:.2} MiB |",
            peaks[0], peaks[1], peaks[2]
        );
    }
    memcheck::set_options(0, false);
    memcheck::set_poison(false, memcheck::DEFAULT_QUARANTINE_BYTES);
    MemCheck::clear();
}
