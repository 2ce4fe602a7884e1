//! `dipu info`: the vendor and its devices.

use dipu_deviceapi::{DeviceApi, Result};

use crate::Failure;

const GIB: f64 = (1u64 << 30) as f64;

/// Prints the vendor, then each device; fails (exit 2) when the vendor
/// cannot be loaded or reports no device.
pub(crate) fn run(vendor: Option<&str>) -> Result<(), Failure> {
    let loaded = crate::vendor::load(vendor)?;
    let api = loaded.api.as_ref();
    let caps = api.capabilities().names();
    crate::outln!("vendor:       {}", api.name());
    crate::outln!("version:      {}", api.version());
    crate::outln!("loaded from:  {}", loaded.origin);
    crate::outln!(
        "capabilities: {}",
        if caps.is_empty() {
            "none".to_owned()
        } else {
            caps.join(", ")
        }
    );
    let count = api.device_count()?;
    crate::outln!("devices:      {count}");
    for device in 0..count {
        print_device(api, device).map_err(|e| e.context(format_args!("device {device}")))?;
    }
    Ok(())
}

fn print_device(api: &dyn DeviceApi, device: i32) -> Result<()> {
    let props = api.device_properties(device)?;
    api.set_device(device)?;
    let mem = api.memory_info()?;
    crate::outln!();
    crate::outln!("device {device}: {}", props.name);
    crate::outln!(
        "  total memory:    {:.2} GiB",
        props.total_memory as f64 / GIB
    );
    crate::outln!("  free memory:     {:.2} GiB", mem.free as f64 / GIB);
    crate::outln!("  compute:         {}.{}", props.major, props.minor);
    crate::outln!("  multiprocessors: {}", props.multiprocessor_count);
    Ok(())
}
