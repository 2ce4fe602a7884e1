//! The conformance suite against the host vendor, built in.

use std::sync::Arc;

use dipu_deviceapi::DeviceApi;
use dipu_tests::Outcome;
use dipu_vendor_host::{HostConfig, HostVendor};

fn host(devices: i32) -> Arc<dyn DeviceApi> {
    let config = HostConfig {
        devices,
        ..HostConfig::default()
    };
    Arc::new(HostVendor::new(config).expect("host vendor"))
}

#[test]
fn the_host_vendor_passes_every_check() {
    let api = host(2);
    let report = dipu_tests::run(&api, None);
    assert!(report.success(), "\n{report}\n{}", report.summary());
    assert_eq!(report.skipped(), 0, "\n{report}");
    assert_eq!(report.results.len(), dipu_tests::checks().len());
    println!("{report}\n{}", report.summary());
}

/// With `DIPU_HOST_COLLECTIVES=0` the vendor answers as one without a
/// collective library: every check still passes, the collectives one by
/// finding every collective call `Unsupported`.
#[test]
fn the_host_vendor_with_collectives_hidden_passes_as_a_vendor_without_them() {
    let config = HostConfig {
        collectives: false,
        ..HostConfig::default()
    };
    let api: Arc<dyn DeviceApi> = Arc::new(HostVendor::new(config).expect("host vendor"));
    assert!(!api
        .capabilities()
        .contains(dipu_deviceapi::Capabilities::COLLECTIVES));
    let report = dipu_tests::run(&api, None);
    assert!(report.success(), "\n{report}\n{}", report.summary());
    assert_eq!(report.skipped(), 0, "\n{report}");
    let collectives = report
        .results
        .iter()
        .find(|r| r.name.ends_with("collectives"))
        .expect("the collectives check");
    assert!(
        collectives
            .notes
            .iter()
            .any(|n| n.contains("every collective method returns Unsupported")),
        "{:?}",
        collectives.notes
    );
}

#[test]
fn a_single_device_host_vendor_passes_too() {
    let api = host(1);
    let report = dipu_tests::run(&api, None);
    assert!(report.success(), "\n{report}\n{}", report.summary());
    let peer = report
        .results
        .iter()
        .find(|r| r.name == "copies::peer")
        .expect("the peer check");
    assert_eq!(peer.outcome, Outcome::Passed);
    assert!(
        peer.notes
            .iter()
            .any(|n| n == "single device: peer copy between device 0 and itself"),
        "{:?}",
        peer.notes
    );
}

#[test]
fn the_suite_restores_the_current_device() {
    let api = host(3);
    api.set_device(2).unwrap();
    let report = dipu_tests::run(&api, Some("device::"));
    assert!(report.success(), "\n{report}");
    assert_eq!(api.current_device().unwrap(), 2);
}

#[test]
fn an_injected_failure_is_reported_not_hidden() {
    let config = HostConfig {
        fail_malloc_at: Some(1),
        ..HostConfig::default()
    };
    let api: Arc<dyn DeviceApi> = Arc::new(HostVendor::new(config).expect("host vendor"));
    let report = dipu_tests::run(&api, Some("memory::malloc_and_free"));
    assert_eq!(report.failed(), 1, "\n{report}");
    match &report.results[0].outcome {
        Outcome::Failed(m) => assert!(
            m.contains("malloc(1)") && m.contains("out of memory"),
            "{m}"
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
}
