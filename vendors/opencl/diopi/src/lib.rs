//! `libdiopi_impl_opencl.so`: the OpenCL vendor's DIOPI kernel library.
//!
//! Every exported operator reads its tensor descriptors with the
//! framework's diopirt functions on the calling thread and checks them
//! (dtype, shape, strides, device memory), then enqueues OpenCL C kernels
//! (`kernels.cl`) on the context's command queue (`diopiGetStream`, which
//! names the default stream's queue too) and returns: nothing is computed
//! on the calling thread. The program is built once per (context, device)
//! and its kernels cached. OpenCL is reached through the ICD loader opened
//! at run time (the one the OpenCL vendor already loaded), never linked.
//!
//! Tensors are SVM pointers with their shape, strides and dtype passed by
//! value; float16 and bfloat16 are stored as such and computed in the
//! device's widest float (double with `cl_khr_fp64`). See `docs/opencl.md`.

pub(crate) mod cl;
#[cfg_attr(test, allow(dead_code))]
pub(crate) mod kernels;
pub mod rt;
pub use dipu_diopi_kernelkit::types;

#[cfg(not(test))]
mod ops;
