//! `impl DeviceApi for CambriconVendor`: dispatch to the device, memory, stream,
//! event, collective and virtual-memory modules (the dispatch itself is
//! [`dipu_vendorkit::device_api!`]).

use crate::collectives::CLIQUE_ID_BYTES;
use crate::CambriconVendor;

dipu_vendorkit::device_api!(CambriconVendor, "cambricon");

impl CambriconVendor {
    /// The size of CNCL's clique id: `comm_unique_id_size`, 0 without CNCL.
    pub(crate) fn comm_id_bytes(&self) -> usize {
        if self.cncl.is_some() {
            CLIQUE_ID_BYTES
        } else {
            0
        }
    }
}
