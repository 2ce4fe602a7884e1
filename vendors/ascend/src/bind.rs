//! The binding tables of [`crate::acl`] and [`crate::hccl`]: the macros of
//! [`dipu_vendorkit::bind`], with this vendor's advice for a missing symbol.
//!
//! The header test turns every Rust signature into its C prototype and has the
//! C compiler check it, every constant and every type size against the real
//! CANN headers (from the torch-npu wheels).

pub(crate) use dipu_vendorkit::{c_consts, c_types};

/// [`dipu_vendorkit::library!`] whose error for a missing symbol says to
/// point `ASCEND_HOME_PATH` at a newer CANN toolkit.
macro_rules! library {
    ($($table:tt)*) => {
        dipu_vendorkit::library! {
            upgrade: "CANN's library: point ASCEND_HOME_PATH at a newer CANN toolkit",
            $($table)*
        }
    };
}

pub(crate) use library;
