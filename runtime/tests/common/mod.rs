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
