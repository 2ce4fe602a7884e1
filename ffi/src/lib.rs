//! The C ABI of the dipu-rs runtime: `libdipu_runtime.so` / `.a` and
//! `include/dipu_runtime.h` (generated from this crate by cbindgen).
//!
//! Conventions (see `docs/c-api.md`): every function is named
//! `dipu_<object>_<verb>`, returns a [`dipu_status`] (`DIPU_OK` is 0; the
//! other codes equal `dipu_deviceapi::ErrorKind`'s), takes out-parameters
//! last, and leaves a message for [`dipu_last_error_message`] when it
//! fails. Every body runs inside one panic boundary (`ffi_boundary!`): a
//! panic becomes `DIPU_STATUS_INTERNAL`, never unwinds into C. Bad input
//! (NULL, unknown pointers and handles, double frees, bad devices, sizes
//! that overflow) is an error status, never undefined behaviour on the
//! Rust side; host pointers the caller passes for copies are the caller's
//! to keep valid.

#![expect(
    non_camel_case_types,
    reason = "the C types keep their C names (dipu_status, dipu_stream, ...)"
)]

mod collectives;
mod copy;
mod device;
mod diopi;
mod dtypes;
mod event;
mod generator;
mod handles;
mod host_memory;
mod memcheck;
mod memory;
mod memory_history;
mod pointer;
mod process_group;
mod profiler;
mod runtime;
mod status;
mod store;
mod store_callback;
mod store_extended;
mod stream;
mod types;
mod work;

pub use collectives::*;
pub use copy::*;
pub use device::*;
pub use diopi::*;
pub use dtypes::{DIPU_DTYPE_BOOL, DIPU_DTYPE_C128, DIPU_DTYPE_C64};
pub use event::*;
pub use generator::*;
pub use host_memory::*;
pub use memcheck::*;
pub use memory::*;
pub use memory_history::*;
pub use pointer::*;
pub use process_group::*;
pub use profiler::*;
pub use runtime::*;
pub use status::{dipu_last_error_message, dipu_status, dipu_status_str};
pub use store::*;
pub use store_callback::*;
pub use store_extended::*;
pub use stream::*;
pub use types::*;
pub use work::*;
