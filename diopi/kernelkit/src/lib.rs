//! What every DIOPI kernel library (`libdiopi_impl_<vendor>.so`) shares.
//!
//! - [`types`]: Rust mirrors of the DIOPI C types, constants and handles.
//! - [`sys`]: the diopirt functions every library imports. They stay
//!   undefined in the library and are resolved when the runtime loads it,
//!   so a kernel library never links the runtime.
//! - [`rt`]: an op's errors, the calling thread's last-error message, the
//!   guard that turns errors and panics into a status, the tensor
//!   descriptor reader ([`rt::describe`]) and the scalar and size argument
//!   readers.
//! - [`check`]: shape, index-dtype and dimension checks, and
//!   [`export_library_info!`] for the library's vendor name, version and
//!   last-error entry points.
//!
//! Each library turns a descriptor into its own tensor type and checks it
//! against what its kernels accept (dtypes, device memory).

pub mod check;
pub mod rt;
pub mod sys;
pub mod types;
