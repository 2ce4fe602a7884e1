//! The runtime trace: what the runtime did, where and for how long.
//!
//! When on (`DIPU_PROFILE=path.json`, or [`start`]), the runtime records
//! every vendor call (host time, and device time for work queued on a
//! stream), every allocator event, stream and event operations with flow
//! arrows from an event's record to its waits, collectives and host
//! callbacks. The last [`DEFAULT_CAPACITY`] events (`DIPU_PROFILE_EVENTS`)
//! are kept in a ring; [`dump`] writes them in Chrome's trace event format,
//! which `chrome://tracing` and Perfetto open, with one named track per
//! host thread and one per stream.
//!
//! Off, each recording site costs one relaxed atomic load ([`enabled`]).
//!
//! ```
//! use dipu_profiler::{self as prof, Args, Category, Track};
//! prof::set_capacity(16).unwrap();
//! prof::start();
//! let t0 = prof::now_ns();
//! prof::complete("allocate", Category::Allocator, Track::current_thread(), t0, 250,
//!     Args::new().u64("bytes", 4096));
//! prof::stop();
//! let json = prof::to_json();
//! assert!(json.contains("\"allocate\""));
//! prof::clear();
//! ```

mod chrome;
mod clock;
mod env;
mod event;
mod ring;
mod tracks;
mod wrap;

pub use chrome::{dump, to_json, write_to};
pub use clock::now_ns;
pub use env::{init_from_env, PROFILE_ENV, PROFILE_EVENTS_ENV};
pub use event::{Arg, Args, Category, Event, Phase};
pub use ring::{
    clear, dropped, dump_wait, events, record, set_capacity, set_dump_wait, snapshot, start, stop,
    DEFAULT_CAPACITY, DEFAULT_DUMP_WAIT,
};
pub use tracks::{name_stream, Track};
pub use wrap::wrap;

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether events are being recorded now.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// True while the trace records: the one check every recording site makes
/// first, so that an off trace costs a relaxed load.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Records a complete event (a slice) of `dur_ns` from `ts_ns` on `track`.
#[inline]
pub fn complete(
    name: &'static str,
    cat: Category,
    track: Track,
    ts_ns: u64,
    dur_ns: u64,
    args: Args,
) {
    record(Event {
        name,
        cat,
        phase: Phase::Complete { dur_ns },
        track,
        ts_ns,
        args,
    });
}

/// Records an instant event now on the calling thread's track.
#[inline]
pub fn instant(name: &'static str, cat: Category, args: Args) {
    record(Event {
        name,
        cat,
        phase: Phase::Instant,
        track: Track::current_thread(),
        ts_ns: now_ns(),
        args,
    });
}
