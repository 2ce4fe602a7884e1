//! The contract between dipu-rs and a device vendor.
//!
//! A vendor implements [`DeviceApi`] (devices, memory, copies, streams,
//! events, host callbacks, and optionally collectives and virtual memory),
//! adds one [`export_vendor!`] line and builds a `cdylib`. The [`loader`]
//! turns such a library, or a vendor built into the program, back into an
//! `Arc<dyn DeviceApi>`, so nothing above this crate knows how a vendor
//! arrived.
//!
//! ```
//! use dipu_deviceapi::{CopyKind, DataType, ErrorKind, StreamHandle};
//! assert_eq!(DataType::F32.size_in_bytes(), 4);
//! assert!(CopyKind::HostToDevice.dst_is_device());
//! assert!(StreamHandle::DEFAULT.is_default());
//! assert_eq!(ErrorKind::from_code(1), ErrorKind::OutOfMemory);
//! ```

mod api;
mod error;
pub mod loader;
mod methods;
pub mod observe;
pub mod plugin;
mod traced;
mod types;

pub use api::{DeviceApi, HostCallback};
pub use error::{Error, ErrorKind, Result};
pub use loader::{LoadedVendor, Loader, VendorOrigin, VendorSpec};
pub use traced::TRACE_TARGET;
pub use types::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceProperties, EventHandle, MemoryInfo,
    PhysicalMemHandle, PriorityRange, ReduceOp, StreamHandle,
};
