//! `dipu selftest`: the conformance suite against the vendor.

use dipu_deviceapi::{Error, ErrorKind};

use crate::Failure;

/// Runs the checks whose name contains `filter`, prints the table and the
/// summary, and fails with [`Failure::ChecksFailed`] when any check failed.
pub(crate) fn run(vendor: Option<&str>, filter: Option<&str>) -> Result<(), Failure> {
    if let Some(f) = filter {
        if !dipu_tests::checks().iter().any(|c| c.name().contains(f)) {
            return Err(Failure::Error(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "no check name contains {f:?}; names look like `memory::malloc_and_free` \
                     (`dipu selftest` lists them all)"
                ),
            )));
        }
    }
    let loaded = crate::vendor::load(vendor)?;
    let api = &loaded.api;
    crate::outln!("vendor:      {} ({})", api.name(), api.version());
    crate::outln!("loaded from: {}", loaded.origin);
    crate::outln!();
    let report = dipu_tests::run(api, filter);
    crate::outln!("{report}");
    crate::outln!("{}", report.summary());
    if report.success() {
        Ok(())
    } else {
        Err(Failure::ChecksFailed)
    }
}
