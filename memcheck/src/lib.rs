//! The memory checker behind `DIPU_MEM_CHECK=1`.
//!
//! When enabled (by the variable, read when a runtime is created, or by
//! [`MemCheck::enable`]) the runtime reports every allocation and free of
//! device and pinned host memory here. The checker keeps each live
//! allocation (pointer, size, device or host, stream, sequence number,
//! thread, time and, with `DIPU_MEM_CHECK_ENABLE_BACKTRACE=1`, an
//! unresolved backtrace) in a sharded map, remembers the last frees so a
//! second free shows both sides, and writes a [`Report`] of the leaks at
//! shutdown, on demand ([`report`]) and at process exit.
//!
//! With `DIPU_MEM_CHECK_GUARD_BYTES=N` the runtime also puts guard bytes
//! filled with [`GUARD_PATTERN`] around every device allocation and hands
//! them back at free (and on demand); [`on_guard_violation`] judges them
//! and reports an overwritten side ([`GuardViolation`]) as an
//! `out-of-bounds write` with the allocation's and the free's backtraces.
//! With `DIPU_MEM_CHECK_POISON=1` it fills freed device blocks with
//! [`POISON_PATTERN`] and holds them in a quarantine; a block whose poison
//! changed before it left is reported ([`on_poison_violation`]) as a
//! `write after free` with the free's backtrace.
//!
//! When disabled the allocation path pays one relaxed atomic load
//! ([`enabled`]) and nothing else. Backtraces are captured unresolved
//! (return addresses, by a caching unwinder where there is one: under a
//! microsecond for a call site seen before) and resolved only when a
//! report is written.
//!
//! ```
//! use dipu_memcheck::{Location, MemCheck};
//! MemCheck::enable(false);
//! dipu_memcheck::on_alloc(0x1000, 64, Location::Host, None);
//! assert_eq!(dipu_memcheck::report().blocks, 1);
//! dipu_memcheck::on_free(0x1000);
//! assert_eq!(dipu_memcheck::report().blocks, 0);
//! MemCheck::disable();
//! ```

mod config;
mod guard;
mod poison;
mod report;
mod state;
mod unwind;

use std::sync::atomic::{AtomicBool, Ordering};

pub use config::{
    Config, ENV_ABORT, ENV_BACKTRACE, ENV_GUARD_BYTES, ENV_LOG_FILE, ENV_LOG_INTERVAL,
    ENV_MAX_BLOCK, ENV_MEM_CHECK, ENV_POISON, ENV_QUARANTINE_BYTES,
};
pub use guard::{
    abort_on_violation, find_bad_byte, guard_bytes, on_guard_violation, on_guard_violation_of,
    set_options, GuardViolation, Side, GUARD_PATTERN, MAX_GUARD_BYTES,
};
pub use poison::{
    keep, on_poison_violation, poison, quarantine_bytes, release, set_poison, PoisonViolation,
    DEFAULT_QUARANTINE_BYTES, POISON_PATTERN,
};
pub use report::{Block, Frame, LeakGroup, Report, Violation};
pub use state::{
    check_access, note, on_alloc, on_bad_free, on_exit, on_free, records_count, take_freed,
    FreedRecord, EXIT_CHECK_TIMEOUT, MAX_FRAMES,
};

pub use dipu_stream::StreamId;

/// Whether the checker is on: one relaxed load, for the allocation path.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Whether allocations and frees capture backtraces.
static BACKTRACES: AtomicBool = AtomicBool::new(false);

/// Whether the checker is on. The runtime tests this before every call
/// into the checker, so a disabled checker costs one predictable branch.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether backtraces are captured.
#[inline]
pub fn backtraces() -> bool {
    BACKTRACES.load(Ordering::Relaxed)
}

/// Where an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// Device memory on this device.
    Device(i32),
    /// Pinned host memory.
    Host,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Device(d) => write!(f, "device {d}"),
            Location::Host => f.write_str("pinned host"),
        }
    }
}

/// Switches the checker on and off.
#[derive(Debug)]
pub struct MemCheck;

impl MemCheck {
    /// Switches the checker on (capturing backtraces when `backtraces`),
    /// and registers the process-exit report. Allocations made before are
    /// not known to it. Thread-safe.
    pub fn enable(backtraces: bool) {
        BACKTRACES.store(backtraces, Ordering::Relaxed);
        let was_on = ENABLED.swap(true, Ordering::Relaxed);
        dipu_deviceapi::observe::switched_global(was_on, true);
        state::register_at_exit();
    }

    /// Switches the checker off; the records stay (see [`MemCheck::clear`]).
    pub fn disable() {
        let was_on = ENABLED.swap(false, Ordering::Relaxed);
        dipu_deviceapi::observe::switched_global(was_on, false);
    }

    /// Forgets every record, recent free and bad free.
    pub fn clear() {
        state::clear();
    }

    /// Applies the environment ([`Config::from_env`]): switches the
    /// checker on when `DIPU_MEM_CHECK` is true (never off: a programmatic
    /// [`MemCheck::enable`] stays). `InvalidConfig` for a bad value,
    /// naming the variable.
    pub fn init_from_env() -> dipu_deviceapi::Result<()> {
        let c = Config::from_env()?;
        c.apply();
        Ok(())
    }
}

/// The report of what is live now (and the bad frees seen), with
/// backtraces resolved. Thread-safe; costs a resolve per backtrace.
pub fn report() -> Report {
    state::report()
}
