//! Choosing and loading the vendor.

use std::sync::Arc;

use dipu_deviceapi::{LoadedVendor, Loader, Result, VendorSpec};
use dipu_vendor_host::HostVendor;

/// Loads the vendor `spec` names (`--vendor`), else `DIPU_VENDOR`'s, else
/// the built-in host vendor.
pub(crate) fn load(spec: Option<&str>) -> Result<LoadedVendor> {
    let spec = match spec {
        Some(s) => VendorSpec::parse(s)?,
        None => VendorSpec::from_env()?,
    };
    tracing::debug!(%spec, "loading vendor");
    Loader::new()
        .with_builtin("host", || Ok(Arc::new(HostVendor::from_env()?)))
        .load(&spec)
}
