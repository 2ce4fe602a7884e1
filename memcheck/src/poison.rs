//! Poisoned, quarantined frees (`DIPU_MEM_CHECK_POISON`): the settings, the
//! pattern and the report of a write after free. The runtime fills a freed
//! block with [`POISON_PATTERN`] and holds it back from reuse; this module
//! judges the bytes it finds when the block leaves the quarantine.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dipu_stream::StreamId;

use crate::state;

/// The byte a freed block is filled with. A tensor read after its memory
/// was freed shows it: float32 `-1.9984e18`, bfloat16 `-1.9906e18`,
/// float16 `-375.25`, float64 `-1.4568e144`, int32 `-572662307`, int64
/// `-2459565876494606883`, uint8 `221` (int8 `-35`).
pub const POISON_PATTERN: u8 = 0xDD;

/// The default quarantine per device (64 MiB).
pub const DEFAULT_QUARANTINE_BYTES: usize = 64 << 20;

static POISON: AtomicBool = AtomicBool::new(false);
static QUARANTINE: AtomicUsize = AtomicUsize::new(DEFAULT_QUARANTINE_BYTES);

/// Bytes shown from the first overwritten one on.
const SHOWN: usize = 16;

/// Sets whether runtimes created from now on poison and quarantine their
/// frees, and how many bytes each device's quarantine holds.
pub fn set_poison(poison: bool, quarantine_bytes: usize) {
    POISON.store(poison, Ordering::Relaxed);
    QUARANTINE.store(quarantine_bytes, Ordering::Relaxed);
}

/// Whether frees are poisoned and quarantined.
pub fn poison() -> bool {
    POISON.load(Ordering::Relaxed)
}

/// The bytes of freed blocks each device's quarantine holds.
pub fn quarantine_bytes() -> usize {
    QUARANTINE.load(Ordering::Relaxed)
}

/// A freed block whose poison was overwritten, as the runtime found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoisonViolation {
    /// The user's pointer.
    pub ptr: usize,
    /// The device.
    pub device: i32,
    /// The allocation's stream.
    pub stream: StreamId,
    /// The user's bytes as copied back (the allocation's size).
    pub bytes: Vec<u8>,
    /// Whether found as the block left the quarantine (else by a check).
    pub leaving: bool,
}

impl PoisonViolation {
    /// The message: first bad offset, how many bytes differ, the bytes
    /// found, and the allocation with its backtraces; `None` when the
    /// poison is intact.
    fn message(&self) -> Option<String> {
        let first = self.bytes.iter().position(|&b| b != POISON_PATTERN)?;
        let last = self.bytes.iter().rposition(|&b| b != POISON_PATTERN)?;
        let changed = self.bytes.iter().filter(|&&b| b != POISON_PATTERN).count();
        let mut shown = String::new();
        for b in self.bytes[first..].iter().take(SHOWN) {
            let _ = write!(shown, " {b:02x}");
        }
        let story = state::allocation_story(self.ptr).unwrap_or_else(|| {
            format!(
                "allocation {:#x} ({} bytes on device {}, stream {}; not in the checker's records)",
                self.ptr,
                self.bytes.len(),
                self.device,
                crate::report::stream_name(Some(self.stream))
            )
        });
        let when = if self.leaving {
            "as it left the quarantine"
        } else {
            "by a check"
        };
        Some(format!(
            "{:#x} was written after its free (found {when}): {changed} of its {} bytes changed, \
             offsets +{first} to +{last}; bytes found from +{first}:{shown} (expected \
             {POISON_PATTERN:#04x})\n  {story}",
            self.ptr,
            self.bytes.len()
        ))
    }
}

/// Reports `v` (logged, kept for [`crate::report`]) unless its poison is
/// intact; returns whether it was reported. With `DIPU_MEM_CHECK_ABORT=1`
/// the process aborts after writing it.
pub fn on_poison_violation(v: &PoisonViolation) -> bool {
    let Some(message) = v.message() else {
        return false;
    };
    state::record_violation("write after free", message);
    crate::guard::abort_if_asked();
    true
}

/// Keeps the checker's record of the allocation at `ptr` (live now, freed
/// next) while its block is in the quarantine, so that a write after free
/// found when it leaves names the free's backtrace however many frees
/// came since. [`release`] lets it go.
pub fn keep(ptr: usize) {
    state::set_kept(ptr, true);
}

/// Lets the record [`keep`] kept be forgotten like any other free.
pub fn release(ptr: usize) {
    state::set_kept(ptr, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intact_poison_is_no_violation() {
        let v = PoisonViolation {
            ptr: 0x1000,
            device: 0,
            stream: StreamId::DEFAULT,
            bytes: vec![POISON_PATTERN; 64],
            leaving: true,
        };
        assert_eq!(v.message(), None);
    }

    #[test]
    fn a_message_names_offsets_count_and_bytes() {
        let mut bytes = vec![POISON_PATTERN; 100];
        bytes[10] = 0x01;
        bytes[11] = 0x02;
        bytes[40] = 0x00;
        let v = PoisonViolation {
            ptr: 0x7000_0000,
            device: 1,
            stream: StreamId::DEFAULT,
            bytes,
            leaving: true,
        };
        let m = v.message().unwrap();
        assert!(
            m.starts_with("0x70000000 was written after its free"),
            "{m}"
        );
        assert!(
            m.contains("3 of its 100 bytes changed, offsets +10 to +40"),
            "{m}"
        );
        assert!(m.contains("from +10: 01 02 dd"), "{m}");
        assert!(m.contains("(expected 0xdd)"), "{m}");
        assert!(m.contains("100 bytes on device 1"), "{m}");
        assert!(m.contains("as it left the quarantine"), "{m}");
    }
}
