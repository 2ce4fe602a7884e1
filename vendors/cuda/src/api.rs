//! `impl DeviceApi for CudaVendor`: dispatch to the device, memory, stream,
//! event, collective and virtual-memory modules (the dispatch itself is
//! [`dipu_vendorkit::device_api!`]).

use crate::nccl::NCCL_UNIQUE_ID_BYTES;
use crate::CudaVendor;

dipu_vendorkit::device_api!(CudaVendor, "cuda");

impl CudaVendor {
    /// The size of NCCL's unique id: `comm_unique_id_size`, 0 without NCCL.
    pub(crate) fn comm_id_bytes(&self) -> usize {
        if self.nccl.is_some() {
            NCCL_UNIQUE_ID_BYTES
        } else {
            0
        }
    }
}
