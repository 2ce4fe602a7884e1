//! The plugin boundary: the C vtable ([`abi`]), the export side behind
//! [`export_vendor!`](crate::export_vendor), and the import side the loader uses.

pub mod abi;
mod convert;
pub mod export;
pub(crate) mod import;

pub use abi::{
    DipuHostFn, DipuVendorDeviceProperties, DipuVendorError, DipuVendorInfo, DipuVendorVTable,
    DIPU_VENDOR_ABI_MAJOR,
};

#[cfg(test)]
mod tests;
