//! On a machine with an Ascend NPU and CANN (`ASCEND_HOME_PATH` set by
//! `set_env.sh`): the whole conformance suite on the real libraries. Run with
//! `cargo test -p dipu-vendor-ascend --test npu -- --ignored`.

use std::sync::Arc;

use dipu_deviceapi::DeviceApi;
use dipu_vendor_ascend::AscendVendor;

#[test]
#[ignore = "needs an Ascend NPU and the CANN toolkit"]
fn conformance_on_a_real_npu() {
    let api: Arc<dyn DeviceApi> = Arc::new(AscendVendor::new().expect("CANN is installed"));
    println!("{}", api.version());
    let report = dipu_tests::run(&api, None);
    print!("{report}");
    assert_eq!(report.failed(), 0, "{report}");
    assert_eq!(
        report.skipped(),
        0,
        "an NPU machine skips nothing: {report}"
    );
}
