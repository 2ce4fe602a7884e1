//! The memory checker's guard bytes (`DIPU_MEM_CHECK_GUARD_BYTES`): an
//! asynchronous copy on another stream that writes one byte past the end
//! or before the start of an allocation is reported once, with the right
//! allocation and side, under every allocator algorithm; clean work is
//! not reported; the user's pointer and size are unchanged. The checker is
//! process-global: every test holds `LOCK`.

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use common::{runtime, setups};
use dipu_deviceapi::Capabilities;
use dipu_runtime::memcheck::{self, MemCheck, Side};
use dipu_runtime::{Algorithm, CopyKind, Pool, Runtime, Stream};
use parking_lot::{Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

const GUARD: usize = 64;

/// Holds the lock with the checker on (backtraces on) and guards of
/// `GUARD` bytes; off and cleared when dropped.
struct Guarded(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Guarded {
    fn new() -> Guarded {
        let g = LOCK.lock();
        common::forget_checker_variables();
        MemCheck::disable();
        MemCheck::clear();
        memcheck::set_options(GUARD, false);
        memcheck::set_poison(false, memcheck::DEFAULT_QUARANTINE_BYTES);
        MemCheck::enable(true);
        Guarded(g)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        MemCheck::disable();
        MemCheck::clear();
        memcheck::set_options(0, false);
    }
}

/// The byte a buggy kernel writes.
static BAD: [u8; 1] = [0xAB];

/// Queues on `stream` a one-byte copy to `dst`, straight through the
/// vendor (as a buggy kernel would write: no range check).
fn stray_write(rt: &Runtime, dst: usize, stream: &Stream) {
    // SAFETY: `dst` is inside a block the allocator holds (a guard byte),
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

/// The out-of-bounds writes reported for the allocation at `ptr`.
fn violations_of(ptr: *mut c_void) -> Vec<String> {
    let name = "the guard ";
    let at = format!("of {:#x} was overwritten", ptr as usize);
    memcheck::report()
        .violations
        .into_iter()
        .filter(|v| v.kind == "out-of-bounds write" && v.message.contains(&at))
        .map(|v| {
            assert!(v.message.starts_with(name), "{}", v.message);
            v.message
        })
        .collect()
}

/// Allocates `size` bytes on `alloc_stream`, lets `other` use it
/// (`record_stream`), writes one stray byte on `other` at the side's
/// first outside byte, frees, and checks.
fn overwrite(rt: &Runtime, side: Side, size: usize) -> (*mut c_void, Vec<String>) {
    let ctx = rt.context();
    let alloc_stream = ctx.stream_from_pool(0, false).unwrap();
    let other = ctx.new_stream(0, 0).unwrap();
    let p = rt.allocate_raw(size, alloc_stream).unwrap();
    // The front guard is a multiple of 512 bytes, so the pointer keeps the
    // block's alignment: 512 from the caching algorithms, the vendor's
    // under RAW (64 on the Ascend fake).
    assert_eq!(p as usize % 64, 0, "the user's pointer keeps its alignment");
    let found = rt.find_allocation(p).unwrap();
    assert_eq!(
        (found.addr, found.len),
        (p as usize, size),
        "pointer and size unchanged"
    );
    rt.record_stream_raw(p, other).unwrap();
    let dst = match side {
        Side::After => p as usize + size,
        Side::Before => p as usize - 1,
    };
    assert!(
        rt.find_allocation(dst as *const c_void).is_none(),
        "a guard is not the user's"
    );
    // `other` waits for the allocation's stream (as a framework orders a
    // tensor's use after its producer), then writes the stray byte.
    let ready = ctx.pooled_event(0).unwrap();
    ready.record(&alloc_stream).unwrap();
    ready.block(&other).unwrap();
    stray_write(rt, dst, &other);
    rt.free_raw(0, p).unwrap();
    // Found at the free (when the copy back is done: by this free's own
    // poll, or by this check, which waits for it).
    rt.check_guards().unwrap();
    assert_eq!(rt.check_guards().unwrap(), 0, "nothing new the second time");
    (p, violations_of(p))
}

#[test]
fn a_byte_past_the_end_is_reported_once_with_its_allocation() {
    let _g = Guarded::new();
    for (algorithm, expandable) in setups() {
        // Reports of an earlier setup may name the same addresses.
        MemCheck::clear();
        let rt = runtime(algorithm, expandable);
        assert_eq!(rt.guard_bytes(), Some((512, GUARD)));
        let (p, v) = overwrite(&rt, Side::After, 1000);
        let what = format!("{algorithm} expandable={expandable}");
        assert_eq!(v.len(), 1, "{what}: {v:?}");
        let m = &v[0];
        assert!(m.contains("the guard after the end of"), "{what}: {m}");
        assert!(
            m.contains("offset +1000 (0 bytes past the end)"),
            "{what}: {m}"
        );
        assert!(m.contains("bytes found from there: ab fd"), "{what}: {m}");
        assert!(m.contains("1000 bytes on device 0"), "{what}: {m}");
        assert!(m.contains("found at its free"), "{what}: {m}");
        assert!(
            m.contains("allocated at:") && m.contains("freed at:"),
            "{what}: {m}"
        );
        assert!(m.contains(&format!("{:#x}", p as usize)), "{what}: {m}");
        rt.release_and_report();
    }
}

#[test]
fn a_byte_before_the_start_is_reported_once_with_its_allocation() {
    let _g = Guarded::new();
    for (algorithm, expandable) in setups() {
        // Reports of an earlier setup may name the same addresses.
        MemCheck::clear();
        let rt = runtime(algorithm, expandable);
        let (_, v) = overwrite(&rt, Side::Before, 4096);
        let what = format!("{algorithm} expandable={expandable}");
        assert_eq!(v.len(), 1, "{what}: {v:?}");
        let m = &v[0];
        assert!(m.contains("the guard before the start of"), "{what}: {m}");
        assert!(
            m.contains("offset -1 (1 bytes before the start)"),
            "{what}: {m}"
        );
        assert!(
            m.contains("bytes found from there: ab (expected"),
            "{what}: {m}"
        );
        assert!(m.contains("4096 bytes on device 0"), "{what}: {m}");
        rt.release_and_report();
    }
}

#[test]
fn a_live_overwrite_is_found_by_a_check_and_not_again_at_free() {
    let _g = Guarded::new();
    let rt = runtime(Algorithm::BestFit, false);
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let p = rt.allocate_raw(300, s).unwrap();
    stray_write(&rt, p as usize + 300 + 5, &s);
    assert_eq!(rt.check_guards().unwrap(), 1);
    let v = violations_of(p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("found by a check"), "{}", v[0]);
    assert!(
        v[0].contains("offset +305 (5 bytes past the end)"),
        "{}",
        v[0]
    );
    assert!(v[0].contains("still live"), "{}", v[0]);
    rt.free_raw(0, p).unwrap();
    assert_eq!(rt.check_guards().unwrap(), 0);
    assert_eq!(violations_of(p).len(), 1, "reported once");
    let report = rt.release_and_report();
    assert!(report.is_clean(), "{report:?}");
    assert!(!report.memcheck.unwrap().violations.is_empty());
}

#[test]
fn clean_work_on_several_streams_reports_nothing() {
    let _g = Guarded::new();
    common::clean_work_on_two_streams_reports_nothing();
}

#[test]
fn statistics_count_the_guards_not_the_kept_blocks() {
    let _g = Guarded::new();
    for (algorithm, expandable) in setups() {
        // Reports of an earlier setup may name the same addresses.
        MemCheck::clear();
        let rt = runtime(algorithm, expandable);
        let s = rt.context().stream_from_pool(0, false).unwrap();
        let other = rt.context().new_stream(0, 0).unwrap();
        let p = rt.allocate_raw(1000, s).unwrap();
        let stats = rt.stats(0).unwrap();
        assert_eq!(stats.requested_bytes.current, 1000 + 512 + GUARD as u64);
        assert_eq!(stats.allocation.current, 1);
        // Used on its stream only: kept for reuse, held by the checker and
        // so not counted as allocated.
        rt.free_raw(0, p).unwrap();
        let stats = rt.stats(0).unwrap();
        assert_eq!(stats.allocation.current, 0, "{algorithm}: kept");
        assert_eq!(stats.allocated_bytes.current, 0, "{algorithm}: kept");
        assert_eq!(stats.requested_bytes.current, 0, "{algorithm}: kept");
        // Nor in its pool: the pools still add up to the aggregate.
        for pool in [Pool::Small, Pool::Large] {
            let part = stats.pool(pool);
            assert_eq!(part.allocation.current, 0, "{algorithm} {pool:?}: kept");
            assert_eq!(
                part.allocated_bytes.current, 0,
                "{algorithm} {pool:?}: kept"
            );
            assert_eq!(part.active_bytes.current, 0, "{algorithm} {pool:?}: kept");
            assert_eq!(
                part.requested_bytes.current, 0,
                "{algorithm} {pool:?}: kept"
            );
        }
        assert!(
            stats.reserved_bytes.current > 0,
            "{algorithm}: still reserved"
        );
        // Reused once the stream is idle (its guards checked first).
        s.synchronize().unwrap();
        let again = rt.allocate_raw(1000, s).unwrap();
        assert_eq!(again, p, "{algorithm}: the kept block is reused");
        assert_eq!(rt.stats(0).unwrap().allocation.current, 1);
        // Used on another stream: given back at its free.
        rt.record_stream_raw(again, other).unwrap();
        rt.free_raw(0, again).unwrap();
        let stats = rt.stats(0).unwrap();
        assert_eq!(stats.requested_bytes.current, 0, "{algorithm}");
        assert_eq!(stats.allocation.current, 0, "{algorithm}");
        // Emptying the cache gives kept blocks back.
        let p = rt.allocate_raw(1000, s).unwrap();
        rt.free_raw(0, p).unwrap();
        rt.empty_cache(0).unwrap();
        assert_eq!(rt.stats(0).unwrap().allocation.current, 0, "{algorithm}");
        assert!(rt.release_and_report().is_clean());
    }
}

/// The checker's sequence number of the live allocation at `p`.
fn seq_of(p: *mut c_void) -> u64 {
    let r = memcheck::report();
    let b = r.groups.iter().flat_map(|g| &g.blocks);
    b.filter(|b| b.ptr == p as usize)
        .map(|b| b.seq)
        .next()
        .unwrap()
}

/// Frees `size` bytes (kept), allocates them again on the same stream
/// (the kept block), writes one byte at `+size+1` on that stream, frees,
/// and allocates `size` bytes once more: the kept block's guards are
/// checked before that reuse, naming the allocation that wrote.
fn kept_block_overrun_is_named_at_reuse(size: usize) {
    kept_block_overrun_is_named_at_reuse_on(&runtime(Algorithm::BestFit, false), size);
}

/// As [`kept_block_overrun_is_named_at_reuse`], on `rt`.
fn kept_block_overrun_is_named_at_reuse_on(rt: &Runtime, size: usize) {
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let p = rt.allocate_raw(size, s).unwrap();
    rt.free_raw(0, p).unwrap();
    let q = rt.allocate_raw(size, s).unwrap();
    assert_eq!(q, p, "{size}: kept and reused without a refill");
    let seq = seq_of(q);
    stray_write(rt, q as usize + size + 1, &s);
    rt.free_raw(0, q).unwrap();
    assert!(violations_of(p).is_empty(), "{size}: kept: not checked yet");
    // The next allocation of that size on the idle stream checks the kept
    // block first.
    s.synchronize().unwrap();
    let r = rt.allocate_raw(size, s).unwrap();
    let v = violations_of(p);
    assert_eq!(v.len(), 1, "{size}: {v:?}");
    let at = format!("offset +{} (1 bytes past the end)", size + 1);
    assert!(v[0].contains(&at), "{size}: {}", v[0]);
    assert!(v[0].contains("found at its free"), "{}", v[0]);
    assert!(
        v[0].contains(&format!("allocation #{seq} by thread")),
        "names the allocation that wrote (#{seq}): {}",
        v[0]
    );
    assert!(
        v[0].contains("memcheck_guards::kept_block_overrun_is_named_at_reuse"),
        "with its backtrace: {}",
        v[0]
    );
    assert!(!v[0].contains("kept for reuse"), "{}", v[0]);
    // The new allocation got clean guards (a refilled block).
    rt.free_raw(0, r).unwrap();
    assert_eq!(rt.check_guards().unwrap(), 0);
    assert!(rt.release_and_report().is_clean());
}

/// 2 000 bytes: its two guards are read one by one (the block with its
/// 512-byte-aligned front guard is larger than a whole-block read).
#[test]
fn a_write_in_a_kept_block_is_found_before_its_reuse_naming_the_allocation() {
    let _g = Guarded::new();
    kept_block_overrun_is_named_at_reuse(2000);
}

/// 256 bytes: the block, guards and all, is read in one piece.
#[test]
fn a_write_past_a_small_kept_block_read_whole_is_found_before_its_reuse() {
    let _g = Guarded::new();
    kept_block_overrun_is_named_at_reuse(256);
}

/// A 2 MiB block is kept too (its two guards read one by one).
#[test]
fn a_write_past_a_kept_2_mib_block_is_found_before_its_reuse_naming_the_allocation() {
    let _g = Guarded::new();
    kept_block_overrun_is_named_at_reuse(2 << 20);
}

/// Device memory that the host may not read in place (a discrete device;
/// the host vendor under `DIPU_HOST_ACCESSIBLE_MEMORY=0`): the guards of a
/// kept block are copied back through the vendor before its reuse, and
/// the report still names the allocation that wrote. (With the default
/// host vendor the tests above read them in place.)
#[test]
fn a_kept_block_is_checked_through_copies_when_memory_is_not_host_accessible() {
    let _g = Guarded::new();
    std::env::set_var("DIPU_HOST_ACCESSIBLE_MEMORY", "0");
    let rt = runtime(Algorithm::BestFit, false);
    std::env::remove_var("DIPU_HOST_ACCESSIBLE_MEMORY");
    let caps = rt.api().capabilities();
    assert!(
        !caps.contains(Capabilities::HOST_ACCESSIBLE_MEMORY),
        "{caps:?}"
    );
    for size in [256, 2000, 2 << 20] {
        // The previous size's report may name the address this one gets.
        MemCheck::clear();
        kept_block_overrun_is_named_at_reuse_on(&rt, size);
    }
    if rt.vendor_name() == "host" {
        let default = runtime(Algorithm::BestFit, false);
        let caps = default.api().capabilities();
        assert!(
            caps.contains(Capabilities::HOST_ACCESSIBLE_MEMORY),
            "{caps:?}"
        );
    }
}

/// A kept block whose stream is still busy is handed out at once (no
/// wait for the stream), and a write past the end by the freed
/// allocation, still queued then, is reported once its guards' copy is
/// back, naming that allocation and not the one that has the block now
/// (whose guards were refilled).
#[test]
fn a_kept_block_on_a_busy_stream_is_handed_out_at_once_and_its_overrun_named_later() {
    let _g = Guarded::new();
    let rt = runtime(Algorithm::BestFit, false);
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let size = 3000;
    let p = rt.allocate_raw(size, s).unwrap();
    let seq = seq_of(p);
    // Hold the stream until `open` sends (or is dropped by a failed test),
    // or until `HANG`, so that a reuse that waits for the stream fails
    // below instead of hanging: the hold is then over.
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::clone(&released);
    let hold = Box::new(move || {
        let _ = gate.recv_timeout(HANG);
        done.store(true, std::sync::atomic::Ordering::Release);
    });
    // SAFETY: the stream is live; the callback touches only its flag.
    match unsafe { rt.api().launch_host_func(s.raw(), hold) } {
        Ok(()) => {}
        Err(e) if e.kind() == dipu_runtime::ErrorKind::Unsupported => {
            eprintln!("skipped: the vendor has no host callbacks to hold a stream with");
            rt.free_raw(0, p).unwrap();
            return;
        }
        Err(e) => panic!("{e}"),
    }
    stray_write(&rt, p as usize + size + 1, &s);
    rt.free_raw(0, p).unwrap();
    let q = rt.allocate_raw(size, s).unwrap();
    assert_eq!(q, p, "the kept block, handed out again");
    assert!(
        !released.load(std::sync::atomic::Ordering::Acquire),
        "the allocation waited for the held stream"
    );
    assert!(violations_of(p).is_empty(), "its copy is behind the hold");
    let _ = open.send(());
    s.synchronize().unwrap();
    let seq_q = seq_of(q);
    assert_ne!(seq_q, seq);
    // Judged by the next check (or the next allocation or free that finds
    // the copy back).
    assert_eq!(rt.check_guards().unwrap(), 1);
    let v = violations_of(p);
    assert_eq!(v.len(), 1, "{v:?}");
    let at = format!("offset +{} (1 bytes past the end)", size + 1);
    assert!(v[0].contains(&at), "{}", v[0]);
    assert!(
        v[0].contains(&format!("allocation #{seq} by thread")),
        "names the allocation that wrote (#{seq}, not #{seq_q}): {}",
        v[0]
    );
    assert!(v[0].contains("freed (free #"), "{}", v[0]);
    assert!(
        v[0].contains("freed at:"),
        "with the free's backtrace: {}",
        v[0]
    );
    // The block's new user has fresh guards: nothing more to report.
    rt.free_raw(0, q).unwrap();
    let r = rt.allocate_raw(size, s).unwrap();
    rt.free_raw(0, r).unwrap();
    assert_eq!(rt.check_guards().unwrap(), 0);
    assert_eq!(violations_of(p).len(), 1);
}

#[test]
fn every_reuse_of_a_kept_block_is_checked() {
    let _g = Guarded::new();
    let rt = runtime(Algorithm::BestFit, false);
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let p = rt.allocate_raw(500, s).unwrap();
    rt.free_raw(0, p).unwrap();
    s.synchronize().unwrap();
    let mut seq = 0;
    for i in 1..300 {
        let q = rt.allocate_raw(500, s).unwrap();
        assert_eq!(q, p, "use {i}");
        if i == 200 {
            seq = seq_of(q);
            stray_write(&rt, p as usize - 3, &s);
        }
        rt.free_raw(0, q).unwrap();
        s.synchronize().unwrap();
        if i == 200 {
            break;
        }
    }
    let other = rt.allocate_raw(500, s).unwrap();
    let v = violations_of(p);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains("offset -3 (3 bytes before the start)"),
        "{}",
        v[0]
    );
    assert!(v[0].contains(&format!("allocation #{seq} by")), "{}", v[0]);
    rt.free_raw(0, other).unwrap();
    assert_eq!(rt.check_guards().unwrap(), 0);
    assert!(rt.release_and_report().is_clean());
}

#[test]
fn threads_with_their_own_streams_report_nothing() {
    let _g = Guarded::new();
    let rt = runtime(Algorithm::BestFit, false);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let rt = Arc::clone(&rt);
            std::thread::spawn(move || {
                let s = rt.context().new_stream(0, 0).unwrap();
                for i in 0..300usize {
                    let size = 1 + (i * 131 + t * 17) % 20_000;
                    let p = rt.allocate_raw(size, s).unwrap();
                    // SAFETY: `p..p + size` is the live allocation just made.
                    unsafe { rt.api().memset_async(p, 0xAB, size, s.raw()).unwrap() };
                    rt.free_raw(0, p).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(rt.check_guards().unwrap(), 0);
    let report = rt.release_and_report();
    assert!(report.is_clean(), "{report:?}");
    assert!(report.memcheck.unwrap().violations.is_empty());
}

/// The child's part of [`an_overrun_nobody_checked_is_reported_at_exit`]:
/// with `DIPU_TEST_EXIT_CHILD=<bytes>` (and the checker's variables set by
/// the parent), allocates `bytes`, writes two bytes just past the end on
/// the allocation's stream, frees and exits (`exit`, as a C program's
/// return from `main` does) without any check or shutdown. Without the
/// variable it does nothing.
#[test]
fn exit_child() {
    let Ok(what) = std::env::var("DIPU_TEST_EXIT_CHILD") else {
        return;
    };
    let stuck = what == "stuck";
    let bytes: usize = if stuck { 1000 } else { what.parse().unwrap() };
    let rt = runtime(Algorithm::BestFit, false);
    assert_eq!(
        rt.guard_bytes(),
        Some((512, GUARD)),
        "the parent's variables"
    );
    let s = rt.context().stream_from_pool(0, false).unwrap();
    let p = rt.allocate_raw(bytes, s).unwrap();
    stray_write(&rt, p as usize + bytes, &s);
    stray_write(&rt, p as usize + bytes + 1, &s);
    if stuck {
        // A stream that never finishes: the checks at exit cannot.
        let never = Box::new(|| loop {
            std::thread::park();
        });
        // SAFETY: the stream is live; the callback touches nothing.
        match unsafe { rt.api().launch_host_func(s.raw(), never) } {
            Ok(()) => {}
            Err(e) if e.kind() == dipu_runtime::ErrorKind::Unsupported => {
                println!("no host callbacks on this vendor");
                std::process::exit(0);
            }
            Err(e) => panic!("{e}"),
        }
    }
    rt.free_raw(0, p).unwrap();
    println!("child freed {:#x}", p as usize);
    std::process::exit(0);
}

/// A write past the end of a freed block that nothing checked (no check,
/// no shutdown, no later allocation) is reported at process exit, naming
/// the allocation: a kept block (1000 bytes, 2 and 4 MiB) and one not kept
/// (8 MiB). Runs this test binary again as the child, on the vendor of the
/// environment.
#[test]
fn an_overrun_nobody_checked_is_reported_at_exit() {
    let _g = LOCK.lock();
    for bytes in [1000usize, 2 << 20, 4 << 20, 8 << 20] {
        let dir = std::env::temp_dir().join(format!(
            "dipu-memcheck-exit-{}-{bytes}.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&dir);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "exit_child", "--nocapture", "--test-threads=1"])
            .env("DIPU_TEST_EXIT_CHILD", bytes.to_string())
            .env("DIPU_MEM_CHECK", "1")
            .env("DIPU_MEM_CHECK_ENABLE_BACKTRACE", "1")
            .env("DIPU_MEM_CHECK_GUARD_BYTES", GUARD.to_string())
            .env_remove("DIPU_MEM_CHECK_POISON")
            .env("DIPU_MEM_CHECK_LOG_FILE", &dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{bytes}: {out:?}");
        assert!(stdout.contains("child freed"), "{bytes}: {stdout}");
        let log = std::fs::read_to_string(&dir).unwrap_or_default();
        let _ = std::fs::remove_file(&dir);
        let line = "dipu memcheck: out-of-bounds write: the guard after the end of";
        assert_eq!(log.matches(line).count(), 1, "{bytes}: {log}");
        let at = format!("offset +{bytes} (0 bytes past the end)");
        assert!(log.contains(&at), "{bytes}: {log}");
        assert!(
            log.contains("bytes found from there: ab ab fd"),
            "{bytes}: {log}"
        );
        assert!(log.contains("found at its free"), "{bytes}: {log}");
        assert!(
            log.contains("memcheck_guards::exit_child"),
            "{bytes}: {log}"
        );
        let report = &log[log.find("==== dipu memcheck report").expect(&log)..];
        assert!(
            report.contains("1 invalid frees/accesses"),
            "{bytes}: {report}"
        );
    }
}

/// A stream that never finishes does not hang the exit: the checks give up
/// after `EXIT_CHECK_TIMEOUT` (10 s), the log says so, and the process
/// exits with its status (a child still running after [`HANG`] is killed
/// and fails the test).
#[test]
fn a_stuck_stream_does_not_hang_the_exit() {
    let log = std::env::temp_dir().join(format!("dipu-memcheck-stuck-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let t = std::time::Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "exit_child", "--nocapture", "--test-threads=1"])
        .env("DIPU_TEST_EXIT_CHILD", "stuck")
        .env("DIPU_MEM_CHECK", "1")
        .env("DIPU_MEM_CHECK_GUARD_BYTES", GUARD.to_string())
        .env_remove("DIPU_MEM_CHECK_POISON")
        .env("DIPU_MEM_CHECK_LOG_FILE", &log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its standard output closes when it exits.
    let mut stdout = child.stdout.take().unwrap();
    let (tx, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        let _ = tx.send(out);
    });
    let Ok(stdout) = exited.recv_timeout(HANG) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child still runs after {HANG:?}: its exit hangs");
    };
    let status = child.wait().unwrap();
    let took = t.elapsed();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(status.success(), "{status}: {stdout}");
    if stdout.contains("no host callbacks") {
        eprintln!("skipped: the vendor has no host callbacks to hold a stream with");
        return;
    }
    let limit = memcheck::EXIT_CHECK_TIMEOUT;
    assert!(took >= limit, "it waited for the checks: {took:?}");
    assert!(text.contains("did not finish within 10 s"), "{text}");
}

/// How long a test waits for something that must happen before calling it
/// a hang: never reached by a machine that is merely slow.
const HANG: std::time::Duration = std::time::Duration::from_secs(120);
