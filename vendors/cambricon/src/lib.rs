//! The dipu-rs Cambricon vendor: [`CambriconVendor`] implements
//! [`DeviceApi`](dipu_deviceapi::DeviceApi) on Cambricon's libraries, opened
//! with `libloading` at run time and never linked at build time, so this
//! crate builds and loads on machines without Neuware:
//!
//! - CNRT, `libcnrt.so` (6.x): devices, memory, copies, queues, notifiers
//!   and host functions. Without it the vendor does not start
//!   (`VendorLibraryNotFound`, listing every place it looked);
//! - CNCL, `libcncl.so` (1.25): the COLLECTIVES capability;
//! - CNDrv, `libcndrv.so`: the VIRTUAL_MEMORY capability, when every device
//!   supports its virtual address management.
//!
//! Where the libraries are looked for is [`LibrarySearch`]: `NEUWARE_HOME`,
//! `/usr/local/neuware/lib64`, `DIPU_VENDOR_PATH`, then the system path.
//! The bindings are declared from Cambricon's published API; the tests pin
//! every constant and layout with the version it was taken from, and check
//! every signature against the project's own header of those prototypes.
//!
//! The plugin is `libdipu_vendor_cambricon.so` (`dipu info --vendor
//! cambricon`). See `docs/cambricon.md`.

mod api;
mod bind;
mod cncl;
mod cndrv;
mod cnrt;
mod collectives;
mod device;
mod errors;
mod events;
mod memory;
mod search;
mod streams;
mod vendor;
mod vmm;

#[cfg(test)]
mod tests;

pub use search::{LibrarySearch, SearchDir, DEFAULT_NEUWARE_LIB, ENV_NEUWARE_HOME};
pub use vendor::CambriconVendor;

dipu_deviceapi::export_vendor!(CambriconVendor::new());
