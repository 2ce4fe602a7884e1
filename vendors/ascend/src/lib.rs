//! The dipu-rs Ascend vendor: [`AscendVendor`] implements
//! [`DeviceApi`](dipu_deviceapi::DeviceApi) on Huawei's CANN libraries,
//! opened with `libloading` at run time and never linked at build time, so
//! this crate builds and loads on machines without CANN:
//!
//! - the ACL runtime, `libascendcl.so`: devices, memory, copies, streams,
//!   events, host callbacks and virtual memory. Without it the vendor does
//!   not start (`VendorLibraryNotFound`, listing every place it looked);
//! - HCCL, `libhccl.so`: the COLLECTIVES capability, absent without it.
//!
//! Where the libraries are looked for is [`LibrarySearch`]:
//! `ASCEND_HOME_PATH`, `ASCEND_TOOLKIT_HOME`, CANN's default
//! `/usr/local/Ascend/ascend-toolkit/latest`, `DIPU_VENDOR_PATH`, then the
//! system. Functions that older CANN releases lack (`aclrtLaunchHostFunc`,
//! `aclrtMemGetAllocationGranularity`, `aclrtDeviceGetStreamPriorityRange`,
//! `aclrtGetDeviceInfo`, `aclrtFreeWithDevSync`, `HcclGroupStart`/`End`,
//! `HcclGetErrorString`) are optional: the vendor works
//! without them, and its version string names the ones missing.
//!
//! The plugin is `libdipu_vendor_ascend.so` (`dipu info --vendor ascend`).
//! See `docs/ascend.md` for how each ACL and HCCL difference from the
//! trait is absorbed.

mod acl;
mod api;
mod bind;
mod callbacks;
mod collectives;
mod device;
mod errors;
mod events;
mod hccl;
mod memory;
mod search;
mod streams;
mod vendor;
mod vmm;

#[cfg(test)]
mod tests;

pub use search::{LibrarySearch, SearchDir, DEFAULT_TOOLKIT};
pub use vendor::AscendVendor;

dipu_deviceapi::export_vendor!(AscendVendor::new());
