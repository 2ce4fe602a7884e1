//! The names of a communicator's files in `/dev/shm` (self-contained, so
//! a vendor's tests can include it without depending on this crate).

/// FNV-1a of `bytes`.
fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The name (in `/dev/shm`) every file of the communicator of `id` starts
/// with, for fake `tag` (`nccl`, `hccl`, `cncl`).
pub fn shm_prefix(tag: &str, id: &[u8]) -> String {
    format!("dipu-fake-{tag}-{:016x}", fnv64(id))
}
