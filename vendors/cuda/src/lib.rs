//! The dipu-rs CUDA vendor: [`CudaVendor`] implements
//! [`DeviceApi`](dipu_deviceapi::DeviceApi) on NVIDIA's libraries, opened
//! with `libloading` at run time and never linked at build time, so this
//! crate builds and loads on machines without CUDA:
//!
//! - the CUDA runtime, `libcudart.so.13` (else `.so.12`): devices, memory,
//!   copies, streams, events and host functions. Without it the vendor does
//!   not start (`VendorLibraryNotFound`, listing every place it looked);
//! - NCCL, `libnccl.so.2`: the COLLECTIVES capability, absent without it;
//! - the driver, `libcuda.so.1`: device names, memory sizes and the
//!   VIRTUAL_MEMORY capability (absent without it, or when a device lacks
//!   the virtual memory API).
//!
//! Where the libraries are looked for is [`LibrarySearch`]: `DIPU_CUDA_HOME`,
//! `CUDA_HOME`, the NVIDIA pip wheels of the active Python environment, then
//! the system. [`DeviceApi::version`](dipu_deviceapi::DeviceApi::version)
//! names every file loaded, e.g. `CUDA runtime 13.5 (cudart:
//! /venv/.../libcudart.so.13; nccl: /venv/.../libnccl.so.2 2.32.3; driver:
//! not found)`.
//!
//! Errors keep CUDA's or NCCL's code, name and message. A machine without a
//! GPU or driver loads the vendor and answers `device_count` with
//! `ErrorKind::NoDevice`.
//!
//! The plugin is `libdipu_vendor_cuda.so` (`dipu info --vendor cuda`).
//! See `docs/cuda.md`.

mod api;
mod bind;
mod collectives;
mod cudart;
mod device;
mod driver;
mod errors;
mod events;
mod init;
mod memory;
mod nccl;
mod search;
mod streams;
mod vendor;
mod vmm;

#[cfg(test)]
mod tests;

pub use search::{LibrarySearch, SearchDir, ENV_CUDA_HOME};
pub use vendor::CudaVendor;

dipu_deviceapi::export_vendor!(CudaVendor::new());
