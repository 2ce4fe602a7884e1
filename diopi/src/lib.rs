//! DIOPI on dipu-rs: the runtime side of DeepLink's operator interface.
//!
//! A vendor's kernel library (`libdiopi_impl*.so`, built against DIOPI's
//! C prototypes, `include/diopi/`) is opened at run time and its operators
//! are looked up by name; the functions it calls back into, DIOPI's
//! runtime ("diopirt": tensor getters, `diopiGetStream`,
//! `diopiRequireTensor`, generators), are exported by this crate with C
//! linkage. docs/diopi.md describes the contract.
//!
//! The Rust API, for programs that call kernels directly (`dipu
//! diopi-test`) and for the C ABI in `dipu-ffi`:
//!
//! - [`open`] / [`open_default`] / [`close`] / [`current`]: the process's
//!   [`KernelLibrary`]; [`KernelLibrary::function`] looks an operator up as
//!   a typed function pointer (`None`: the library lacks it, fall back),
//!   [`KernelLibrary::last_error`] reads `diopiGetLastErrorString`.
//! - [`Context`]: a context on a [`dipu_runtime::Stream`], whose handle
//!   goes first in every operator call; dropping it frees what the kernel
//!   required, stream-ordered.
//! - [`OwnedTensor`]: a descriptor built from Rust (memory, shape, strides,
//!   dtype); [`TensorInfo::read`] reads any handle (a `RequireTensor`
//!   result, say) and [`TensorInfo::read_elements`] copies its elements to
//!   the host.
//! - [`generator`]: a device's generator handle (its default Philox
//!   generator); [`seed_and_offset`] / [`set_seed_and_offset`].
//! - [`launch_host_func`] / [`launch_host_func_raw`]: queue host work on a
//!   stream, the way the host vendor's kernels run.
//! - [`tolerance`]: the project's tolerance policy for comparing kernel
//!   results with CPU references (docs/tolerance.md).

mod context;
pub mod diopirt;
mod error;
mod generator;
mod launch;
mod library;
mod tensor;
pub mod tolerance;
mod types;

pub use context::{
    context_create, context_destroy, context_get, Context, ContextHandle, DiopiContext,
};
pub use diopirt::keep_exports;
pub use error::{last_runtime_error, set_error_sink};
pub use generator::{generator, seed_and_offset, set_seed_and_offset};
pub use launch::{dipu_launch_host_func_raw, launch_host_func, launch_host_func_raw};
pub use library::{
    close, current, open, open_default, require_current, search_places, KernelLibrary,
    SearchPlaces, ENV_LIBRARY,
};
pub use tensor::{contiguous_strides, numel_of, span_of, OwnedTensor, TensorInfo};
pub use types::{
    ConstTensorHandle, DiopiDevice, DiopiError, DiopiGenerator, DiopiScalar, DiopiSize, Dtype,
    GeneratorHandle, MemoryFormat, Reduction, RoundMode, ScalarValue, StreamHandleRaw, TensorDesc,
    TensorHandle, HOST_DEVICE, TENSOR_MAGIC,
};
