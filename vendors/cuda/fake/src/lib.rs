//! Fake `libcudart.so.13`/`.so.12`, `libcuda.so.1` and `libnccl.so.2`
//! over host memory, for testing the CUDA vendor without a GPU.
//!
//! One `cdylib`, `libdipu_fake_cuda.so`, exports the runtime, driver and
//! NCCL functions the vendor uses, each with the signature of NVIDIA's
//! header (checked by the vendor's header test against the same wheels'
//! headers). [`layout`] lays it out under the real file names; the runtime,
//! the driver and NCCL are then one loaded object sharing one state (as the
//! real runtime shares the driver's contexts). A copy named
//! `libcudart.so.12` is a separate object that calls itself CUDA 12.8.
//!
//! What it models, each with the sentence of NVIDIA's documentation it
//! comes from, is listed in `docs/cuda.md`; the switches are the
//! `DIPU_FAKE_*` variables of [`dipu_fakekit::config`] plus
//! [`ENV_DRIVER_VERSION`]. It is not a performance model.
//!
//! The `old-libraries` feature (the `dipu-fake-cuda-old` package,
//! `libdipu_fake_cuda_old.so`) leaves out what the vendor resolves
//! optionally, as older libraries lack it: the driver's virtual-memory
//! functions (`cuMemGetAllocationGranularity` to `cuMemUnmap`),
//! `cudaDeviceCanAccessPeer` and `cudaDeviceEnablePeerAccess`, and
//! `ncclCommInitRankConfig` (its NCCL calls itself 2.13.4).

#![cfg_attr(
    feature = "old-libraries",
    expect(
        dead_code,
        unused_imports,
        reason = "the helpers of the functions the old-libraries build leaves out"
    )
)]

pub mod driver;
mod errors;
mod exports;
pub mod layout;
pub mod nccl;
mod reduce;
pub mod runtime;
mod state;
pub mod types;

/// The shared machinery, for tests (`dipu_fakekit::ranks`: ranks as processes).
pub use dipu_fakekit;
pub use exports::Signature;

/// `DIPU_FAKE_CUDA_DRIVER_VERSION`: the driver's CUDA version as
/// `cuDriverGetVersion` reports it (`12080` or `12.8`; default `13050`).
pub const ENV_DRIVER_VERSION: &str = "DIPU_FAKE_CUDA_DRIVER_VERSION";

/// Every exported runtime function, as declared (for the header check).
pub const RUNTIME: &[Signature] = runtime::SIGNATURES;
/// Every exported driver function, as declared (for the header check).
pub const DRIVER: &[Signature] = driver::SIGNATURES;
/// Every exported NCCL function, as declared (for the header check).
pub const NCCL: &[Signature] = nccl::SIGNATURES;
