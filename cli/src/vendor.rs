//! Choosing and loading the vendor, and the host vendor that `replay` and
//! `bench` use.

use std::sync::Arc;

use dipu_deviceapi::{LoadedVendor, Result, VendorSpec};
use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

/// Loads the vendor `spec` names (`--vendor`), else `DIPU_VENDOR`'s, else
/// the built-in host vendor.
pub(crate) fn load(spec: Option<&str>) -> Result<LoadedVendor> {
    let spec = match spec {
        Some(s) => VendorSpec::parse(s)?,
        None => VendorSpec::from_env()?,
    };
    tracing::debug!(%spec, "loading vendor");
    dipu_runtime::loader().load(&spec)
}

/// A device context over the vendor `spec` names (as `--vendor`), device
/// 0 current.
pub(crate) fn context_for(spec: &str) -> Result<&'static DeviceContext> {
    let ctx = DeviceContext::new(load(Some(spec))?.api)?;
    ctx.set_device(0)?;
    Ok(ctx)
}

/// Device memory of the host vendor used by `dipu replay` and `dipu bench`:
/// an accounting budget only (the host vendor takes memory from the system
/// allocator on each device malloc, and the allocators never touch it, so
/// nothing is committed up front).
pub(crate) const BENCH_HOST_MEMORY: u64 = 64 << 30;

/// A device context over a fresh built-in host vendor with
/// [`BENCH_HOST_MEMORY`] per device, device 0 current.
pub(crate) fn host_context() -> Result<&'static DeviceContext> {
    let vendor = HostVendor::new(HostConfig {
        memory_per_device: BENCH_HOST_MEMORY,
        ..HostConfig::default()
    })?;
    let ctx = DeviceContext::new(Arc::new(vendor))?;
    ctx.set_device(0)?;
    Ok(ctx)
}
