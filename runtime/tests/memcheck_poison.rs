//! The memory checker's poisoned, quarantined frees
//! (`DIPU_MEM_CHECK_POISON`): a write after free (a copy queued before the
//! free and run after it) is reported once, with the free's backtrace,
//! under every allocator algorithm; a read after free sees the poison;
//! the quarantine holds its bytes and no more, keeps the free's record
//! however many frees come after, gives its blocks back when the
//! allocator runs out, and clean work reports nothing. The checker is
//! process-global: every test holds `LOCK`.

mod common;

use std::ffi::c_void;
use std::sync::mpsc::Sender;

use common::{runtime, setups};
use dipu_runtime::memcheck::{self, MemCheck, POISON_PATTERN};
use dipu_runtime::{Algorithm, CopyKind, Runtime, Stream};
use parking_lot::{Mutex, MutexGuard};

/// Blocks the allocator of device 0 holds as handed out (live ones and the
/// ones the checker holds: `stats` leaves the latter out).
fn held_by_allocator(rt: &Runtime) -> usize {
    let snapshot = rt.allocator(0).unwrap().snapshot();
    let blocks = snapshot.segments.iter().flat_map(|s| &s.blocks);
    let allocated = dipu_allocator::BlockState::Allocated;
    blocks.filter(|b| b.state == allocated).count()
}

static LOCK: Mutex<()> = Mutex::new(());

const GUARD: usize = 64;

/// Holds the lock with the checker on (backtraces on), guards of `GUARD`
/// bytes and poison with a quarantine of `quarantine` bytes; all off and
/// cleared when dropped.
struct Poisoned(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Poisoned {
    fn new(quarantine: usize) -> Poisoned {
        let g = LOCK.lock();
        common::forget_checker_variables();
        MemCheck::disable();
        MemCheck::clear();
        memcheck::set_options(GUARD, false);
        memcheck::set_poison(true, quarantine);
        MemCheck::enable(true);
        Poisoned(g)
    }
}

impl Drop for Poisoned {
    fn drop(&mut self) {
        MemCheck::disable();
        MemCheck::clear();
        memcheck::set_options(0, false);
        memcheck::set_poison(false, memcheck::DEFAULT_QUARANTINE_BYTES);
    }
}

/// The byte a buggy kernel writes.
static BAD: [u8; 1] = [0xAB];

/// Queues on `stream` a one-byte copy to `dst`, straight through the
/// vendor (as a buggy kernel would write: no range check).
fn stray_write(rt: &Runtime, dst: usize, stream: &Stream) {
    // SAFETY: `dst` is inside a block the allocator holds (quarantined),
    // and `BAD` is a static that outlives the copy.
    unsafe {
        rt.api()
            .memcpy_async(
                dst as *mut c_void,
                BAD.as_ptr().cast(),
                1,
                CopyKind::HostToDevice,
                stream.raw(),
            )
            .unwrap()
    };
}

/// Keeps `stream` busy until the returned gate is dropped: work queued
/// behind it waits however slow the machine is.
fn hold(rt: &Runtime, stream: &Stream) -> Sender<()> {
    let (gate, wait) = std::sync::mpsc::channel::<()>();
    // SAFETY: `stream` is a live stream of this vendor; the callback only waits.
    unsafe {
        rt.api()
            .launch_host_func(stream.raw(), Box::new(move || _ = wait.recv()))
            .unwrap()
    };
    gate
}

/// The writes after free reported for the allocation at `ptr`.
fn violations_of(ptr: usize) -> Vec<String> {
    let at = format!("{ptr:#x} was written after its free");
    memcheck::report()
        .violations
        .into_iter()
        .filter(|v| v.kind == "write after free" && v.message.starts_with(&at))
        .map(|v| v.message)
        .collect()
}

/// Every write after free reported so far.
fn all_writes_after_free() -> Vec<String> {
    memcheck::report()
        .violations
        .into_iter()
        .filter(|v| v.kind != "out-of-bounds write")
        .map(|v| format!("{}: {}", v.kind, v.message))
        .collect()
}

/// Allocates 4096 bytes on a pool stream, queues on another stream
/// (held busy) a one-byte write at `+offset`, frees, lets the poison fill
/// run, then the write; returns the user's pointer.
fn write_after_free(rt: &Runtime, offset: usize) -> usize {
    let ctx = rt.context();
    let a = ctx.stream_from_pool(0, false).unwrap();
    let other = ctx.new_stream(0, 0).unwrap();
    let p = rt.allocate_raw(4096, a).unwrap();
    let gate = hold(rt, &other);
    // Queued while the block is live (a kernel launched on a stream the
    // allocation was never recorded on), run after its free.
    stray_write(rt, p as usize + offset, &other);
    rt.free_raw(0, p).unwrap();
    a.synchronize().unwrap();
    drop(gate);
    other.synchronize().unwrap();
    p as usize
}

#[test]
fn a_write_after_free_is_reported_once_with_the_free() {
    let _g = Poisoned::new(memcheck::DEFAULT_QUARANTINE_BYTES);
    for (algorithm, expandable) in setups() {
        // Reports of an earlier setup may name the same addresses.
        MemCheck::clear();
        let what = format!("{algorithm} expandable={expandable}");
        let rt = runtime(algorithm, expandable);
        assert_eq!(rt.quarantine_bytes(), Some(64 << 20));
        let p = write_after_free(&rt, 100);
        let stats = rt.stats(0).unwrap();
        assert_eq!(
            stats.allocation.current, 0,
            "{what}: a quarantined block is not counted as allocated"
        );
        assert_eq!(stats.allocated_bytes.current, 0, "{what}");
        assert_eq!(held_by_allocator(&rt), 1, "{what}: but it is held");
        assert!(violations_of(p).is_empty(), "{what}: not checked yet");
        // Leaving the quarantine (emptying the cache lets every block out).
        rt.empty_cache(0).unwrap();
        assert_eq!(rt.stats(0).unwrap().allocation.current, 0, "{what}");
        let v = violations_of(p);
        assert_eq!(v.len(), 1, "{what}: {v:?}");
        let m = &v[0];
        assert!(m.contains("found as it left the quarantine"), "{what}: {m}");
        assert!(
            m.contains("1 of its 4096 bytes changed, offsets +100 to +100"),
            "{what}: {m}"
        );
        assert!(m.contains("bytes found from +100: ab dd dd"), "{what}: {m}");
        assert!(m.contains("(expected 0xdd)"), "{what}: {m}");
        assert!(m.contains("4096 bytes on device 0"), "{what}: {m}");
        assert!(
            m.contains("freed at:") && m.contains("allocated at:"),
            "{what}: {m}"
        );
        assert!(
            m.contains("write_after_free"),
            "{what}: the free's frames: {m}"
        );
        assert_eq!(rt.check_guards().unwrap(), 0, "{what}");
        let report = rt.release_and_report();
        assert!(report.is_clean(), "{what}: {report:?}");
        assert_eq!(violations_of(p).len(), 1, "{what}: reported once");
        assert_eq!(all_writes_after_free().len(), 1, "{what}");
        MemCheck::clear();
    }
}

#[test]
fn a_check_finds_a_write_after_free_in_the_quarantine_once() {
    let _g = Poisoned::new(memcheck::DEFAULT_QUARANTINE_BYTES);
    let rt = runtime(Algorithm::BestFit, false);
    let p = write_after_free(&rt, 4095);
    assert_eq!(rt.check_guards().unwrap(), 1);
    let v = violations_of(p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("found by a check"), "{}", v[0]);
    assert!(v[0].contains("offsets +4095 to +4095"), "{}", v[0]);
    assert_eq!(rt.check_guards().unwrap(), 0, "not again");
    rt.empty_cache(0).unwrap();
    assert_eq!(violations_of(p).len(), 1, "not again as it leaves");
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn a_read_after_free_sees_the_poison() {
    let _g = Poisoned::new(memcheck::DEFAULT_QUARANTINE_BYTES);
    for (algorithm, expandable) in setups() {
        // Reports of an earlier setup may name the same addresses.
        MemCheck::clear();
        let what = format!("{algorithm} expandable={expandable}");
        let rt = runtime(algorithm, expandable);
        let s = rt.context().stream_from_pool(0, false).unwrap();
        let p = rt.allocate_raw(1000, s).unwrap();
        // SAFETY: `p..p + 1000` is the live allocation just made.
        unsafe { rt.api().memset_async(p, 0x11, 1000, s.raw()).unwrap() };
        rt.free_raw(0, p).unwrap();
        // A kernel reading the freed tensor on its stream, after the free.
        let mut seen = vec![0u8; 1000];
        // SAFETY: `p` is in a quarantined block the allocator still holds;
        // `seen` has room for 1000 bytes and outlives the copy (the stream
        // is synchronized below).
        unsafe {
            rt.api()
                .memcpy_async(
                    seen.as_mut_ptr().cast(),
                    p,
                    1000,
                    CopyKind::DeviceToHost,
                    s.raw(),
                )
                .unwrap()
        };
        s.synchronize().unwrap();
        assert!(
            seen.iter().all(|&b| b == POISON_PATTERN),
            "{what}: {:?}",
            &seen[..16]
        );
        let as_f32 = f32::from_ne_bytes(seen[..4].try_into().unwrap());
        assert_eq!(as_f32, f32::from_bits(0xdddd_dddd), "{what}");
        assert!(
            (as_f32 + 1.9984e18).abs() < 1e14,
            "{what}: the float the docs name: {as_f32}"
        );
        let report = rt.release_and_report();
        assert!(report.is_clean(), "{what}: {report:?}");
        assert!(
            all_writes_after_free().is_empty(),
            "{what}: a read is no write"
        );
    }
}

#[test]
fn the_quarantine_holds_its_bytes_and_lets_the_oldest_out() {
    // Room for 10 blocks of 4096 bytes with their guards (512 + 64).
    let block = 4096 + 512 + GUARD;
    let _g = Poisoned::new(10 * block);
    let rt = runtime(Algorithm::BestFit, false);
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let mut held = std::collections::VecDeque::new();
    for i in 0..25 {
        let p = rt.allocate_raw(4096, s).unwrap();
        assert!(
            !held.contains(&p),
            "block {i}: a quarantined block is not reused"
        );
        rt.free_raw(0, p).unwrap();
        held.push_back(p);
        if held.len() > 10 {
            held.pop_front();
        }
        assert_eq!(rt.stats(0).unwrap().allocation.current, 0, "block {i}");
        assert_eq!(held_by_allocator(&rt), (i + 1).min(10), "block {i}");
    }
    // A block larger than the whole quarantine is poisoned, not held.
    let big = rt.allocate_raw(20 * block, s).unwrap();
    rt.free_raw(0, big).unwrap();
    // (Held only until the copy of its guards is judged.)
    assert_eq!(rt.check_guards().unwrap(), 0);
    assert_eq!(held_by_allocator(&rt), 10);
    assert!(all_writes_after_free().is_empty());
    assert!(rt.release_and_report().is_clean());
    assert_eq!(rt.stats(0).unwrap().allocation.current, 0);
}

#[test]
fn the_free_is_named_however_many_frees_came_after() {
    let _g = Poisoned::new(memcheck::DEFAULT_QUARANTINE_BYTES);
    let rt = runtime(Algorithm::BestFit, false);
    let p = write_after_free(&rt, 7);
    let s = rt.context().stream_from_pool(0, false).unwrap();
    // More frees than the checker remembers (4096), all still quarantined.
    let blocks: Vec<_> = (0..5000)
        .map(|_| rt.allocate_raw(256, s).unwrap())
        .collect();
    for b in blocks {
        rt.free_raw(0, b).unwrap();
    }
    rt.empty_cache(0).unwrap();
    let v = violations_of(p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("freed at:"), "{}", v[0]);
    assert!(v[0].contains("write_after_free"), "{}", v[0]);
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn the_quarantine_is_given_back_when_the_allocator_runs_out() {
    let _g = Poisoned::new(memcheck::DEFAULT_QUARANTINE_BYTES);
    let rt = runtime(Algorithm::BestFit, false);
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let total = rt.context().api().memory_info().unwrap().total as f64;
    // 64 MiB for this device: 30 MiB live, 20 MiB quarantined (each with
    // its guards and the allocator's rounding), then 20 MiB more.
    rt.set_memory_fraction(0, (64 << 20) as f64 / total)
        .unwrap();
    let live = rt.allocate_raw(30 << 20, s).unwrap();
    let q = rt.allocate_raw(20 << 20, s).unwrap();
    rt.free_raw(0, q).unwrap();
    assert_eq!(held_by_allocator(&rt), 2, "held");
    assert_eq!(rt.stats(0).unwrap().allocation.current, 1, "one live");
    let more = rt.allocate_raw(20 << 20, s).unwrap();
    assert_eq!(held_by_allocator(&rt), 2, "the quarantine gave way");
    rt.free_raw(0, more).unwrap();
    rt.free_raw(0, live).unwrap();
    assert!(all_writes_after_free().is_empty());
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn clean_work_on_several_streams_reports_nothing() {
    // A small quarantine, so that blocks leave it and are reused often.
    let _g = Poisoned::new(256 << 10);
    common::clean_work_on_two_streams_reports_nothing();
}
