//! The byte layout of a generator's state, for `get_state`/`set_state`.
//!
//! | bytes  | content                         |
//! |--------|---------------------------------|
//! | 0..4   | magic `DPRG`                    |
//! | 4..8   | layout version, u32 little-endian (1) |
//! | 8..16  | seed, u64 little-endian         |
//! | 16..24 | Philox offset, u64 little-endian |

use dipu_deviceapi::{Error, Result};

/// The first four bytes of every state.
pub const STATE_MAGIC: [u8; 4] = *b"DPRG";
/// The layout version this crate writes and reads.
pub const STATE_VERSION: u32 = 1;
/// Bytes in a state.
pub const STATE_LEN: usize = 24;

/// Encodes a seed and offset.
pub(crate) fn encode(seed: u64, offset: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(STATE_LEN);
    bytes.extend_from_slice(&STATE_MAGIC);
    bytes.extend_from_slice(&STATE_VERSION.to_le_bytes());
    bytes.extend_from_slice(&seed.to_le_bytes());
    bytes.extend_from_slice(&offset.to_le_bytes());
    bytes
}

/// Decodes a state into (seed, offset), rejecting a wrong length, magic or version.
pub(crate) fn decode(bytes: &[u8]) -> Result<(u64, u64)> {
    if bytes.len() != STATE_LEN {
        return Err(Error::invalid_argument(format!(
            "a generator state has {STATE_LEN} bytes, this one has {}",
            bytes.len()
        )));
    }
    if bytes[0..4] != STATE_MAGIC {
        return Err(Error::invalid_argument(
            "not a dipu generator state (it does not start with `DPRG`)",
        ));
    }
    let word =
        |range: std::ops::Range<usize>| -> [u8; 8] { bytes[range].try_into().expect("8 bytes") };
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if version != STATE_VERSION {
        return Err(Error::invalid_argument(format!(
            "generator state layout version {version} is not supported (this build reads version {STATE_VERSION})"
        )));
    }
    Ok((
        u64::from_le_bytes(word(8..16)),
        u64::from_le_bytes(word(16..24)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_bad_states() {
        let bytes = encode(7, 1 << 40);
        assert_eq!(bytes.len(), STATE_LEN);
        assert_eq!(decode(&bytes).unwrap(), (7, 1 << 40));
        assert!(decode(&bytes[..23])
            .unwrap_err()
            .message()
            .contains("24 bytes"));
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(decode(&bad).unwrap_err().message().contains("DPRG"));
        let mut future = bytes;
        future[4] = 2;
        assert!(decode(&future).unwrap_err().message().contains("version 2"));
    }
}
