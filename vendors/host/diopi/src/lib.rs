//! `libdiopi_impl_host.so`: the host vendor's DIOPI kernel library.
//!
//! Every exported operator reads its tensor descriptors with the
//! framework's diopirt functions on the calling thread, validates them,
//! copies what the kernel needs into a closure and queues it on the
//! context's stream with `dipu_launch_host_func_raw`, returning at once:
//! the host vendor's stream worker runs the kernel, in stream order.
//!
//! The kernels ([`elementwise`], [`reduce`], [`matmul`], ...) are plain Rust
//! functions on strided views ([`view::TView`]), unit-tested without a
//! runtime; the C entry points live in `ops` (built only outside `cargo
//! test` of this crate, since their diopirt symbols come from the runtime).

pub mod conv;
pub mod elementwise;
pub mod index;
pub mod llm;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod optim;
pub mod par;
pub mod pool;
pub mod random;
pub mod reduce;
pub use dipu_diopi_kernelkit::types;
pub mod view;

#[cfg(not(test))]
mod ops;
#[cfg(not(test))]
pub mod rt;
