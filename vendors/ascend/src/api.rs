//! `impl DeviceApi for AscendVendor`: dispatch to the device, memory, stream,
//! event, collective and virtual-memory modules (the dispatch itself is
//! [`dipu_vendorkit::device_api!`]).

use crate::hccl::HCCL_ROOT_INFO_BYTES;
use crate::AscendVendor;

dipu_vendorkit::device_api!(AscendVendor, "ascend");

impl AscendVendor {
    /// The size of HCCL's root info: `comm_unique_id_size`, 0 without HCCL.
    pub(crate) fn comm_id_bytes(&self) -> usize {
        if self.hccl.is_some() {
            HCCL_ROOT_INFO_BYTES
        } else {
            0
        }
    }
}
