//! The binding tables of [`crate::cudart`], [`crate::nccl`] and
//! [`crate::driver`]: the macros of [`dipu_vendorkit::bind`], with this
//! vendor's advice for a missing symbol.
//!
//! The header test turns every Rust signature into its C prototype and has the
//! C compiler check it, every constant and every type size against NVIDIA's
//! real headers.

pub(crate) use dipu_vendorkit::{c_consts, c_types};

/// [`dipu_vendorkit::library!`] whose error for a missing symbol says to
/// point `DIPU_CUDA_HOME` at a newer CUDA.
macro_rules! library {
    ($($table:tt)*) => {
        dipu_vendorkit::library! {
            upgrade: "NVIDIA's library: point DIPU_CUDA_HOME at a newer CUDA",
            $($table)*
        }
    };
}

pub(crate) use library;
