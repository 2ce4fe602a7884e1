//! The communicator unique id: 128 bytes naming one shared-memory segment.
//!
//! Layout: bytes 0..8 are the magic `DIPUHC` followed by the format version
//! (`0x00 0x01`), bytes 8..24 are random, bytes 24..28 the creator's pid
//! (little endian), and the rest is zero. The segment's name is
//! `/dipu-hc-<32 hex digits of the random bytes>-<pid in hex>`.

use dipu_deviceapi::{Error, ErrorKind, Result};

/// Bytes in a unique id (as NCCL's `ncclUniqueId`).
pub(crate) const UNIQUE_ID_SIZE: usize = 128;

const MAGIC: [u8; 8] = *b"DIPUHC\x00\x01";

/// A parsed unique id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UniqueId {
    random: [u8; 16],
    pid: u32,
}

impl UniqueId {
    /// A fresh id with 16 random bytes and this process's pid.
    pub(crate) fn generate() -> Result<UniqueId> {
        let mut random = [0u8; 16];
        getrandom::getrandom(&mut random).map_err(|e| {
            Error::new(
                ErrorKind::VendorError,
                format!("comm_get_unique_id: the system has no random bytes to give: {e}"),
            )
        })?;
        Ok(UniqueId {
            random,
            pid: std::process::id(),
        })
    }

    /// The 128 bytes handed to the other ranks.
    pub(crate) fn to_bytes(self) -> Vec<u8> {
        let mut bytes = vec![0u8; UNIQUE_ID_SIZE];
        bytes[..8].copy_from_slice(&MAGIC);
        bytes[8..24].copy_from_slice(&self.random);
        bytes[24..28].copy_from_slice(&self.pid.to_le_bytes());
        bytes
    }

    /// Parses bytes from [`UniqueId::to_bytes`] (possibly of another process).
    pub(crate) fn parse(bytes: &[u8]) -> Result<UniqueId> {
        if bytes.len() != UNIQUE_ID_SIZE {
            return Err(Error::invalid_argument(format!(
                "a host-vendor unique id has {UNIQUE_ID_SIZE} bytes, not {} \
                 (pass the bytes comm_get_unique_id returned, unchanged)",
                bytes.len()
            )));
        }
        if bytes[..8] != MAGIC {
            return Err(Error::invalid_argument(
                "this is not a unique id of the host vendor (bad magic): pass the bytes \
                 comm_get_unique_id of the host vendor returned, unchanged",
            ));
        }
        let mut random = [0u8; 16];
        random.copy_from_slice(&bytes[8..24]);
        let mut pid = [0u8; 4];
        pid.copy_from_slice(&bytes[24..28]);
        Ok(UniqueId {
            random,
            pid: u32::from_le_bytes(pid),
        })
    }

    /// The shared-memory segment's name, e.g. `/dipu-hc-0123…ef-4d2`.
    pub(crate) fn segment_name(&self) -> String {
        let hex: String = self.random.iter().map(|b| format!("{b:02x}")).collect();
        format!("/dipu-hc-{hex}-{:x}", self.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_foreign_bytes() {
        let id = UniqueId::generate().unwrap();
        let bytes = id.to_bytes();
        assert_eq!(bytes.len(), UNIQUE_ID_SIZE);
        assert_eq!(UniqueId::parse(&bytes).unwrap(), id);
        assert_ne!(UniqueId::generate().unwrap(), id, "ids are random");
        let name = id.segment_name();
        assert!(name.starts_with("/dipu-hc-") && name.len() < 64, "{name}");
        let e = UniqueId::parse(&bytes[..16]).unwrap_err();
        assert!(e.message().contains("128 bytes, not 16"), "{e}");
        let e = UniqueId::parse(&[0u8; UNIQUE_ID_SIZE]).unwrap_err();
        assert!(e.message().contains("bad magic"), "{e}");
    }
}
