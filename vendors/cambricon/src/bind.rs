//! The binding tables of [`crate::cnrt`], [`crate::cncl`] and [`crate::cndrv`]:
//! the macros of [`dipu_vendorkit::bind`], with this vendor's advice for a
//! missing symbol.
//!
//! The header test turns every Rust signature into its C prototype and has the
//! C compiler check it against the project's own header of the published
//! Cambricon API (`vendors/cambricon/fake/include/dipu_cambricon_api.h`), and
//! the pin test checks every constant against the value documented for the
//! version it was taken from.

pub(crate) use dipu_vendorkit::{c_consts, c_types};

/// [`dipu_vendorkit::library!`] whose error for a missing symbol says to
/// point `NEUWARE_HOME` at a newer Neuware.
macro_rules! library {
    ($($table:tt)*) => {
        dipu_vendorkit::library! {
            upgrade: "Cambricon's library: point NEUWARE_HOME at a newer Neuware",
            $($table)*
        }
    };
}

pub(crate) use library;
