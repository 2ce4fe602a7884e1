//! The binding table of [`crate::cl`]: the macros of
//! [`dipu_vendorkit::bind`], with this vendor's advice for a missing symbol.
//!
//! The header test turns every Rust signature into its C prototype and has
//! the C compiler check it, every constant and every type size against the
//! Khronos headers (`CL/cl.h`, `CL/cl_ext.h`).

pub(crate) use dipu_vendorkit::{c_consts, c_types};

/// [`dipu_vendorkit::library!`] whose error for a missing symbol says what
/// the vendor needs of the ICD loader.
macro_rules! library {
    ($($table:tt)*) => {
        dipu_vendorkit::library! {
            upgrade: "an OpenCL 2.0 ICD loader: install ocl-icd-libopencl1 (or another OpenCL 2.0+ loader)",
            $($table)*
        }
    };
}

pub(crate) use library;
