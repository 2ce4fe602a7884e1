//! Code shared by the dipu-rs vendors that open their SDK's libraries at
//! run time (`vendors/cuda`, `vendors/cambricon`, `vendors/ascend`,
//! `vendors/opencl`). Each vendor keeps only what is its own; this crate
//! gives it:
//!
//! - [`device_api!`]: the whole `impl DeviceApi` of a vendor, dispatching
//!   every trait method to the vendor's inherent methods, with the
//!   collectives as one [`Collective`] and its [`Buffers`];
//! - [`forward!`] and [`forward_unsafe!`]: the forwarding it is built from;
//! - [`bind`]: the binding tables ([`c_types!`], [`c_consts!`], [`library!`])
//!   of the functions, constants and types a vendor takes from its libraries;
//! - [`search`]: looking for those libraries folder by folder, and the
//!   not-found error naming every place looked in;
//! - [`size`]: byte sizes in environment variables (`512M`, `8GiB`).

mod api;
pub mod bind;
mod collective;
pub mod search;
pub mod size;

pub use collective::{Buffers, Collective, Translation};

/// What the macros name through `$crate`; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use dipu_deviceapi;
    pub use libloading;
}
