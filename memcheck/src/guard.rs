//! Guard bytes (`DIPU_MEM_CHECK_GUARD_BYTES`): the settings, the pattern,
//! the search for an overwritten byte and the report of a violation. The
//! runtime places the guards and copies them back; this module judges them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dipu_stream::StreamId;

use crate::report;
use crate::state::{self, FreedRecord};

/// The byte every guard is filled with (the value a debug heap uses for
/// its no-man's-land, rarely a kernel's output).
pub const GUARD_PATTERN: u8 = 0xFD;

/// The largest guard `DIPU_MEM_CHECK_GUARD_BYTES` accepts (1 MiB a side).
pub const MAX_GUARD_BYTES: usize = 1 << 20;

/// Bytes shown from the first overwritten one on.
const SHOWN: usize = 16;

static GUARD_BYTES: AtomicUsize = AtomicUsize::new(0);
static ABORT: AtomicBool = AtomicBool::new(false);

/// Sets the guard size (0: none) that runtimes created from now on use,
/// and whether the first violation aborts the process.
pub fn set_options(guard_bytes: usize, abort_on_violation: bool) {
    GUARD_BYTES.store(guard_bytes.min(MAX_GUARD_BYTES), Ordering::Relaxed);
    ABORT.store(abort_on_violation, Ordering::Relaxed);
}

/// The guard bytes a side asked for (0: no guards).
pub fn guard_bytes() -> usize {
    GUARD_BYTES.load(Ordering::Relaxed)
}

/// Whether the first violation aborts the process.
pub fn abort_on_violation() -> bool {
    ABORT.load(Ordering::Relaxed)
}

/// Which guard was overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The guard before the user's pointer (an underflow).
    Before,
    /// The guard after the user's last byte (an overflow).
    After,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Before => "before the start",
            Side::After => "after the end",
        })
    }
}

/// The first byte of `guard` that is not [`GUARD_PATTERN`], searching from
/// the user's buffer outwards (from the end of a [`Side::Before`] guard,
/// from the start of a [`Side::After`] one): its distance from the buffer
/// (0 is the byte right next to it).
pub fn find_bad_byte(guard: &[u8], side: Side) -> Option<usize> {
    match side {
        Side::After => guard.iter().position(|&b| b != GUARD_PATTERN),
        Side::Before => guard.iter().rev().position(|&b| b != GUARD_PATTERN),
    }
}

/// An overwritten guard, as the runtime found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardViolation {
    /// The user's pointer.
    pub ptr: usize,
    /// The bytes requested.
    pub size: usize,
    /// The device.
    pub device: i32,
    /// The allocation's stream.
    pub stream: StreamId,
    /// Which guard.
    pub side: Side,
    /// The guard's bytes, as copied back.
    pub guard: Vec<u8>,
    /// Whether found at the free (else by a check of a live allocation).
    pub at_free: bool,
    /// Allocations of the same size on the same stream the block served
    /// since its guards were filled (1: this one alone; more when the
    /// runtime kept it for reuse: the write may be any of theirs).
    pub uses: u32,
}

impl GuardViolation {
    /// The message: side, first bad offset (from the user's pointer), the
    /// bytes found, and the allocation (`freed`, else the checker's record
    /// at the pointer) with its backtraces.
    fn message(&self, freed: Option<&FreedRecord>) -> Option<String> {
        let k = find_bad_byte(&self.guard, self.side)?;
        let (offset, found) = match self.side {
            Side::After => (format!("+{}", self.size + k), &self.guard[k..]),
            Side::Before => {
                let at = self.guard.len() - 1 - k;
                (format!("-{}", k + 1), &self.guard[at..])
            }
        };
        let mut bytes = String::new();
        for b in found.iter().take(SHOWN) {
            let _ = write!(bytes, " {b:02x}");
        }
        let distance = match self.side {
            Side::After => format!("{k} bytes past the end"),
            Side::Before => format!("{} bytes before the start", k + 1),
        };
        let story = freed.map(FreedRecord::story);
        let story = story.or_else(|| state::allocation_story(self.ptr));
        let story = story.unwrap_or_else(|| {
            format!(
                "allocation {:#x} ({} bytes on device {}, stream {}; not in the checker's records)",
                self.ptr,
                self.size,
                self.device,
                report::stream_name(Some(self.stream))
            )
        });
        let when = if self.at_free {
            "at its free"
        } else {
            "by a check"
        };
        let story = if self.uses > 1 {
            format!(
                "{story}\n  (the block was kept for reuse: it served {} allocations of {} bytes on \
                 this stream since its guards were filled, the one above last; the write may be \
                 any of theirs)",
                self.uses, self.size
            )
        } else {
            story
        };
        Some(format!(
            "the guard {} of {:#x} was overwritten (found {when}): first bad byte at offset \
             {offset} ({distance}); bytes found from there:{bytes} (expected {GUARD_PATTERN:#04x})\
             \n  {story}",
            self.side, self.ptr
        ))
    }
}

/// Reports `v` (logged, kept for [`crate::report`]) unless its guard is
/// intact; returns whether it was reported. With `DIPU_MEM_CHECK_ABORT=1`
/// the process aborts after writing it.
pub fn on_guard_violation(v: &GuardViolation) -> bool {
    report_violation(v, None)
}

/// As [`on_guard_violation`], naming the freed allocation `freed` (taken
/// out of the checker before its address was handed out again).
pub fn on_guard_violation_of(v: &GuardViolation, freed: &FreedRecord) -> bool {
    report_violation(v, Some(freed))
}

fn report_violation(v: &GuardViolation, freed: Option<&FreedRecord>) -> bool {
    let Some(message) = v.message(freed) else {
        return false;
    };
    state::record_violation("out-of-bounds write", message);
    abort_if_asked();
    true
}

/// With `DIPU_MEM_CHECK_ABORT=1`, aborts the process (after a line saying
/// why): called right after a violation is written.
pub(crate) fn abort_if_asked() {
    if abort_on_violation() {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"dipu memcheck: aborting at the first violation (DIPU_MEM_CHECK_ABORT=1)\n",
        );
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bad_byte_is_counted_from_the_buffer() {
        let mut g = vec![GUARD_PATTERN; 8];
        assert_eq!(find_bad_byte(&g, Side::After), None);
        assert_eq!(find_bad_byte(&g, Side::Before), None);
        g[2] = 0;
        g[5] = 0;
        assert_eq!(find_bad_byte(&g, Side::After), Some(2));
        assert_eq!(
            find_bad_byte(&g, Side::Before),
            Some(2),
            "g[5] is 3rd from the end"
        );
    }

    #[test]
    fn a_message_names_side_offset_and_bytes() {
        let mut guard = vec![GUARD_PATTERN; 64];
        guard[63] = 0xAB;
        let v = GuardViolation {
            ptr: 0x7000_0000,
            size: 100,
            device: 1,
            stream: StreamId::DEFAULT,
            side: Side::Before,
            guard,
            at_free: true,
            uses: 1,
        };
        let m = v.message(None).unwrap();
        assert!(m.contains("before the start"), "{m}");
        assert!(m.contains("offset -1 (1 bytes before the start)"), "{m}");
        assert!(m.contains(" ab (expected 0xfd)"), "{m}");
        assert!(m.contains("100 bytes on device 1"), "{m}");
    }

    #[test]
    fn a_freed_record_taken_out_names_the_freed_allocation_after_reuse() {
        let ptr = 0x5a5a_0000_0000;
        state::on_alloc(ptr, 100, crate::Location::Device(3), None);
        assert!(state::take_freed(ptr).is_none(), "live: nothing to take");
        state::on_free(ptr);
        let freed = state::take_freed(ptr).unwrap();
        assert!(state::take_freed(ptr).is_none(), "taken once");
        // The address is handed out again.
        state::on_alloc(ptr, 100, crate::Location::Device(3), None);
        let mut guard = vec![GUARD_PATTERN; 8];
        guard[0] = 0xAB;
        let v = GuardViolation {
            ptr,
            size: 100,
            device: 3,
            stream: StreamId::DEFAULT,
            side: Side::After,
            guard,
            at_free: true,
            uses: 1,
        };
        let named = v.message(Some(&freed)).unwrap();
        let current = v.message(None).unwrap();
        assert!(named.contains("; freed (free #"), "{named}");
        assert!(current.contains("; still live"), "{current}");
        let seq = |m: &str| m.split("allocation #").nth(1).map(|t| t.to_owned());
        assert_ne!(seq(&named), seq(&current), "{named}\n{current}");
        state::on_free(ptr);
    }
}
