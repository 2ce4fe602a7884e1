//! The checker's state: live records in sharded maps, the recent frees,
//! the violations seen, the limits and the process-exit report.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Once};
use std::thread::ThreadId;
use std::time::Duration;
#[cfg(not(target_os = "linux"))]
use std::time::Instant;

use dipu_deviceapi::{Error, ErrorKind};
use dipu_stream::StreamId;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::report::{self, Block, Report, Violation};
use crate::Location;

const SHARDS: usize = 16;
/// Recent frees remembered per shard (4096 in all).
const FREED_PER_SHARD: usize = 256;
/// Violations kept for the report.
const MAX_VIOLATIONS: usize = 256;

/// One live allocation.
pub(crate) struct Record {
    pub(crate) size: usize,
    pub(crate) location: Location,
    pub(crate) stream: Option<StreamId>,
    pub(crate) seq: u64,
    /// The allocating thread (its name, if any, in [`THREAD_NAMES`]).
    pub(crate) thread: ThreadId,
    /// When, on [`now`]'s clock.
    pub(crate) time: u64,
    /// Boxed: a record moves through the maps on every allocation and
    /// free, and most are taken without a backtrace.
    pub(crate) backtrace: Option<Box<Trace>>,
}

/// How an allocation was freed.
struct Free {
    seq: u64,
    thread: ThreadId,
    backtrace: Option<Box<Trace>>,
}

/// One allocation, live or recently freed: a free marks the entry in
/// place, so an allocation and a free each cost one map operation (and a
/// free one more, to forget the oldest recent free).
struct Entry {
    record: Record,
    /// `None` while live.
    free: Option<Free>,
    /// Kept past the recent frees while its block is quarantined
    /// ([`set_kept`]).
    kept: bool,
}

#[derive(Default)]
struct Shard {
    /// Live and recently freed allocations, by address.
    map: FxHashMap<usize, Entry>,
    /// Live entries of `map` and their bytes, kept under the shard's lock
    /// (no global counters on the allocation path).
    live: usize,
    live_bytes: u64,
    /// The recent frees, oldest first: (address, free sequence number).
    order: VecDeque<(usize, u64)>,
}

impl Shard {
    fn live(&self) -> impl Iterator<Item = (usize, &Record)> {
        self.map
            .iter()
            .filter(|(_, e)| e.free.is_none())
            .map(|(&ptr, e)| (ptr, &e.record))
    }
}

/// A monotonic clock in nanoseconds for the records' ages, cheap enough
/// for every allocation: on Linux `CLOCK_MONOTONIC_COARSE` (the last
/// timer tick, a few milliseconds of resolution, read from the vDSO
/// without the TSC), elsewhere `Instant`.
pub(crate) fn now() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        (ts.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ts.tv_nsec as u64)
    }
    #[cfg(not(target_os = "linux"))]
    {
        static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
        EPOCH.elapsed().as_nanos() as u64
    }
}

static SHARD_MAPS: LazyLock<[Mutex<Shard>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::new(Shard::default())));
static SEQ: AtomicU64 = AtomicU64::new(0);
static MAX_BLOCK: AtomicUsize = AtomicUsize::new(10_000);
static LOG_INTERVAL: AtomicUsize = AtomicUsize::new(1000);
static LOG_FILE: Mutex<Option<PathBuf>> = Mutex::new(None);
static VIOLATIONS: Mutex<Vec<Violation>> = Mutex::new(Vec::new());

fn shard(ptr: usize) -> &'static Mutex<Shard> {
    // Allocations are at least 64-byte aligned: mix the higher bits.
    let h = (ptr >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize);
    &SHARD_MAPS[h >> (usize::BITS - 4)]
}

/// Frames captured per backtrace (from the capture point: dipu's own
/// frames, then the caller's). Unwinding costs per frame; a bound keeps
/// a capture's cost the same whatever the depth of the stack. In a debug
/// build dipu's own frames between a C call and the capture take up to
/// about 16 (the panic boundary, the runtime lent by `dipu_runtime::with`).
pub const MAX_FRAMES: usize = 24;

/// An unresolved backtrace: the return addresses of the innermost
/// [`MAX_FRAMES`] frames, resolved to functions and lines only when a
/// report needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Trace {
    len: usize,
    ips: [usize; MAX_FRAMES],
}

impl Trace {
    /// The return addresses, innermost first.
    pub(crate) fn addresses(&self) -> &[usize] {
        &self.ips[..self.len]
    }
}

/// The current backtrace, when backtraces are on: return addresses only
/// (no symbol lookup, no allocation), from the caching unwinder
/// ([`crate::unwind`]) or, where it is not available, `backtrace::trace`.
fn capture() -> Option<Box<Trace>> {
    if !crate::backtraces() {
        return None;
    }
    let mut trace = Box::new(Trace {
        len: 0,
        ips: [0; MAX_FRAMES],
    });
    match crate::unwind::capture(&mut trace.ips) {
        Some(len) => trace.len = len,
        None => backtrace::trace(|frame| {
            trace.ips[trace.len] = frame.ip() as usize;
            trace.len += 1;
            trace.len < MAX_FRAMES
        }),
    }
    Some(trace)
}

/// Names of the named threads that recorded something, for reports (an
/// unnamed thread needs no entry; thread ids are never reused).
static THREAD_NAMES: LazyLock<Mutex<FxHashMap<ThreadId, Box<str>>>> =
    LazyLock::new(Default::default);

thread_local! {
    /// This thread's id, its name registered on first use: a record takes
    /// a copy instead of a `Thread` handle (an `Arc` clone and drop).
    static THREAD: ThreadId = {
        let t = std::thread::current();
        if let Some(name) = t.name() {
            THREAD_NAMES.lock().insert(t.id(), name.into());
        }
        t.id()
    };
}

fn current_thread() -> ThreadId {
    // While the thread's locals are being destroyed: unnamed in reports.
    THREAD
        .try_with(|id| *id)
        .unwrap_or_else(|_| std::thread::current().id())
}

/// The name of thread `id`, if it is a named thread that recorded.
pub(crate) fn thread_name_of(id: ThreadId) -> Option<String> {
    THREAD_NAMES.lock().get(&id).map(|n| n.to_string())
}

pub(crate) fn set_limits(max_block: usize, log_interval: usize, log_file: Option<PathBuf>) {
    MAX_BLOCK.store(max_block, Ordering::Relaxed);
    LOG_INTERVAL.store(log_interval.max(1), Ordering::Relaxed);
    *LOG_FILE.lock() = log_file;
}

/// Records a new allocation of `size` bytes at `ptr` (null is ignored).
pub fn on_alloc(ptr: usize, size: usize, location: Location, stream: Option<StreamId>) {
    if ptr == 0 {
        return;
    }
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let record = Record {
        size,
        location,
        stream,
        seq,
        thread: current_thread(),
        time: now(),
        backtrace: capture(),
    };
    {
        let mut guard = shard(ptr).lock();
        let s = &mut *guard;
        let entry = Entry {
            record,
            free: None,
            kept: false,
        };
        match s.map.insert(ptr, entry) {
            // Not freed through the runtime (e.g. a record from before a
            // disable/enable cycle): keep the counts right.
            Some(old) if old.free.is_none() => s.live_bytes -= old.record.size as u64,
            // New, or a recent free of the same address, forgotten now.
            _ => s.live += 1,
        }
        s.live_bytes += size as u64;
    }
    let interval = LOG_INTERVAL.load(Ordering::Relaxed) as u64;
    if seq % interval == 0 {
        let (blocks, bytes) = totals();
        if blocks > MAX_BLOCK.load(Ordering::Relaxed) {
            tracing::warn!(
                blocks,
                bytes,
                "dipu memcheck: {blocks} live blocks ({bytes} bytes) exceed DIPU_MEM_CHECK_MAX_BLOCK={}",
                MAX_BLOCK.load(Ordering::Relaxed)
            );
        }
    }
}

/// Live blocks and bytes over every shard.
fn totals() -> (usize, u64) {
    SHARD_MAPS.iter().fold((0, 0), |(blocks, bytes), m| {
        let s = m.lock();
        (blocks + s.live, bytes + s.live_bytes)
    })
}

/// Marks the record at `ptr` as kept (not forgotten with the old recent
/// frees), or lets it go: a freed record no longer among the recent frees
/// is forgotten then.
pub(crate) fn set_kept(ptr: usize, kept: bool) {
    let mut guard = shard(ptr).lock();
    let s = &mut *guard;
    let Some(e) = s.map.get_mut(&ptr) else {
        return;
    };
    e.kept = kept;
    if !kept {
        if let Some(seq) = e.free.as_ref().map(|f| f.seq) {
            if !s.order.iter().any(|&(p, q)| p == ptr && q == seq) {
                s.map.remove(&ptr);
            }
        }
    }
}

/// Records that the allocation at `ptr` was freed (after the runtime freed
/// it). A pointer the checker does not know (allocated while it was off)
/// is ignored.
pub fn on_free(ptr: usize) {
    if ptr == 0 {
        return;
    }
    let free_backtrace = capture();
    let mut guard = shard(ptr).lock();
    let s = &mut *guard;
    // Unknown, or already freed (the first free is kept).
    let Some(entry) = s.map.get_mut(&ptr).filter(|e| e.free.is_none()) else {
        return;
    };
    s.live -= 1;
    s.live_bytes -= entry.record.size as u64;
    let free_seq = SEQ.fetch_add(1, Ordering::Relaxed);
    entry.free = Some(Free {
        seq: free_seq,
        thread: current_thread(),
        backtrace: free_backtrace,
    });
    s.order.push_back((ptr, free_seq));
    while s.order.len() > FREED_PER_SHARD {
        let Some((old, seq)) = s.order.pop_front() else {
            break;
        };
        // Unless allocated again, or freed again since, or kept.
        let this_free = |e: &Entry| !e.kept && e.free.as_ref().is_some_and(|f| f.seq == seq);
        if s.map.get(&old).is_some_and(this_free) {
            s.map.remove(&old);
        }
    }
}

/// Live blocks the checker holds now.
pub fn records_count() -> usize {
    totals().0
}

fn describe(ptr: usize, r: &Record) -> String {
    format!(
        "{ptr:#x} ({} bytes on {}, stream {}, allocation #{} by thread {})",
        r.size,
        r.location,
        report::stream_name(r.stream),
        r.seq,
        report::thread_name(r.thread)
    )
}

fn trace(label: &str, bt: Option<&Trace>) -> String {
    match bt {
        Some(bt) => format!(
            "\n  {label}:\n{}",
            report::format_frames(&report::resolve(bt), "    ")
        ),
        None => format!("\n  {label}: (no backtrace: set DIPU_MEM_CHECK_ENABLE_BACKTRACE=1)"),
    }
}

/// What the checker knows about `ptr`: a recent free of it, or the live
/// allocation containing it.
fn explain(ptr: usize, what: &str) -> String {
    {
        let s = shard(ptr).lock();
        if let Some(Entry {
            record,
            free: Some(f),
            ..
        }) = s.map.get(&ptr)
        {
            return format!(
                "{what} {ptr:#x} was already freed (free #{} by thread {}); allocation {}{}{}",
                f.seq,
                report::thread_name(f.thread),
                describe(ptr, record),
                trace("first freed at", f.backtrace.as_deref()),
                trace("allocated at", record.backtrace.as_deref()),
            );
        }
    }
    for m in SHARD_MAPS.iter() {
        let s = m.lock();
        let inside = s
            .live()
            .find(|&(start, r)| ptr >= start && ptr < start + r.size.max(1));
        if let Some((start, r)) = inside {
            return format!(
                "{what} {ptr:#x} is {} bytes inside the live allocation {}{}",
                ptr - start,
                describe(start, r),
                trace("allocated at", r.backtrace.as_deref()),
            );
        }
    }
    format!("{what} {ptr:#x} was never allocated through the dipu runtime (or was freed long ago)")
}

fn violation(kind: &str, message: String) -> Error {
    let message = format!("{message}{}", trace("this call at", capture().as_deref()));
    let line = format!("dipu memcheck: {kind}: {message}\n");
    tracing::error!("{}", line.trim_end());
    write_log(&line);
    let mut v = VIOLATIONS.lock();
    if v.len() < MAX_VIOLATIONS {
        v.push(Violation {
            kind: kind.to_owned(),
            message: message.clone(),
        });
    }
    Error::new(ErrorKind::InvalidArgument, message)
}

/// Turns the runtime's refusal `err` of a free of `ptr` into the checker's
/// error: a double free names the first free and the allocation (with
/// their backtraces), an interior pointer the allocation it is inside and
/// the offset. Logs it and keeps it for the report.
pub fn on_bad_free(ptr: usize, err: Error) -> Error {
    let detail = explain(ptr, "freeing");
    let kind = if detail.contains("already freed") {
        "double free"
    } else if detail.contains("inside the live allocation") {
        "free of an interior pointer"
    } else {
        "free of an unknown pointer"
    };
    violation(kind, format!("{err}\n  {detail}"))
}

/// Turns the runtime's refusal `err` of a copy touching `ptr` into the
/// checker's error (with the backtraces of a recent free or of the
/// allocation the range runs out of), logs it and keeps it.
pub fn check_access(ptr: usize, err: Error) -> Error {
    let detail = explain(ptr, "accessing");
    violation("invalid access", format!("{err}\n  {detail}"))
}

/// Appends `text` to `DIPU_MEM_CHECK_LOG_FILE`, or writes it to stderr.
pub(crate) fn write_log(text: &str) {
    let file = LOG_FILE.lock().clone();
    let written = file.and_then(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .ok()
    });
    if written.is_none() {
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
}

pub(crate) fn clear() {
    for m in SHARD_MAPS.iter() {
        *m.lock() = Shard::default();
    }
    VIOLATIONS.lock().clear();
}

pub(crate) fn report() -> Report {
    let mut blocks = Vec::new();
    for m in SHARD_MAPS.iter() {
        let s = m.lock();
        let now = now();
        for (ptr, r) in s.live() {
            blocks.push((
                Block {
                    ptr,
                    size: r.size,
                    location: r.location,
                    stream: r.stream.map(|s| format!("{s:?}")),
                    seq: r.seq,
                    age: Duration::from_nanos(now.saturating_sub(r.time)),
                    thread: report::thread_name(r.thread),
                },
                r.backtrace.as_deref().copied(),
            ));
        }
    }
    Report::build(blocks, VIOLATIONS.lock().clone())
}

/// Checks run at process exit before the report: the runtime registers
/// the checks its shutdown runs (guards, kept blocks, quarantine), which
/// this crate cannot call itself.
static EXIT_CHECKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// How long the checks at exit may take before the report is written
/// without them (a stream that never finishes must not hang the exit).
pub const EXIT_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Registers `check` to run at process exit, before the report (once per
/// call: register each check once). It runs on a thread of its own (the
/// exiting thread's thread-locals may be gone), within
/// [`EXIT_CHECK_TIMEOUT`] for all checks together; a panic in it is
/// caught.
pub fn on_exit(check: fn()) {
    EXIT_CHECKS.lock().push(check);
}

/// Writes `text` to the checker's log (`DIPU_MEM_CHECK_LOG_FILE`, or
/// stderr): for what the runtime has to say outside a violation, such as a
/// check at exit that failed.
pub fn note(text: &str) {
    write_log(text);
}

/// Runs the registered exit checks on a fresh thread, waiting at most
/// [`EXIT_CHECK_TIMEOUT`]; returns whether they finished.
fn run_exit_checks() -> bool {
    let checks: Vec<fn()> = EXIT_CHECKS.lock().clone();
    if checks.is_empty() {
        return true;
    }
    let run = move || {
        for check in checks {
            let _ = std::panic::catch_unwind(check);
        }
    };
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("dipu-memcheck-exit".into())
        .spawn(move || {
            run();
            let _ = done.send(());
        });
    match spawned {
        Ok(_) => finished.recv_timeout(EXIT_CHECK_TIMEOUT).is_ok(),
        // No thread to be had at exit: the checks are skipped rather than
        // run on a thread whose locals may be destroyed.
        Err(_) => false,
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if !run_exit_checks() {
            write_log(&format!(
                "dipu memcheck: the checks at exit (guard bytes, kept blocks, quarantine) did not \
                 finish within {} s (a stream that never finishes?); the report below has what \
                 was found before\n",
                EXIT_CHECK_TIMEOUT.as_secs()
            ));
        }
        let r = report();
        if !r.is_clean() {
            r.write();
        }
    });
}

pub(crate) fn register_at_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C" fn()` that never unwinds
        // (its body is inside catch_unwind) and lives as long as the process.
        let rc = unsafe { libc::atexit(at_exit) };
        if rc != 0 {
            tracing::warn!("dipu memcheck: atexit failed; no report at process exit");
        }
    });
}

/// The allocation at `ptr` (live or recently freed) as a guard violation
/// names it: its description, the free's sequence number and thread, and
/// the backtraces of its allocation and free. `None` when the checker does
/// not know it.
pub(crate) fn allocation_story(ptr: usize) -> Option<String> {
    let s = shard(ptr).lock();
    let e = s.map.get(&ptr)?;
    Some(story(ptr, &e.record, e.free.as_ref()))
}

fn story(ptr: usize, record: &Record, free: Option<&Free>) -> String {
    let free = match free {
        Some(f) => format!(
            "; freed (free #{} by thread {}){}",
            f.seq,
            report::thread_name(f.thread),
            trace("freed at", f.backtrace.as_deref())
        ),
        None => "; still live".to_owned(),
    };
    format!(
        "allocation {}{free}{}",
        describe(ptr, record),
        trace("allocated at", record.backtrace.as_deref()),
    )
}

/// A freed allocation's record taken out of the checker ([`take_freed`])
/// before its address is handed out again, so that a report made later
/// (when a copy of its guards queued on its stream has come back) still
/// names it, with its backtraces.
pub struct FreedRecord {
    ptr: usize,
    record: Record,
    free: Free,
}

impl FreedRecord {
    /// The allocation as a violation names it.
    pub(crate) fn story(&self) -> String {
        story(self.ptr, &self.record, Some(&self.free))
    }
}

impl std::fmt::Debug for FreedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FreedRecord")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("allocation", &self.record.seq)
            .field("free", &self.free.seq)
            .finish()
    }
}

/// Takes the record of the freed allocation at `ptr` out of the checker's
/// maps: `None` when `ptr` is live, unknown or forgotten.
pub fn take_freed(ptr: usize) -> Option<FreedRecord> {
    let mut s = shard(ptr).lock();
    // Live: nothing to take.
    s.map.get(&ptr)?.free.as_ref()?;
    let e = s.map.remove(&ptr)?;
    Some(FreedRecord {
        ptr,
        record: e.record,
        free: e.free?,
    })
}

/// Logs a violation found by a check (not by a call: no backtrace of the
/// checking point) and keeps it for the report.
pub(crate) fn record_violation(kind: &str, message: String) {
    let line = format!("dipu memcheck: {kind}: {message}\n");
    tracing::error!("{}", line.trim_end());
    write_log(&line);
    let mut v = VIOLATIONS.lock();
    if v.len() < MAX_VIOLATIONS {
        v.push(Violation {
            kind: kind.to_owned(),
            message,
        });
    }
}
