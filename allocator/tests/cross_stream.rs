//! Cross-stream safety on the host vendor (issue 4): a block used by
//! another stream (`record_stream`) and freed while that stream still reads
//! it must not be reused until the reader is done. A slow reader on s2
//! (`enqueue_expect`) turns any premature reuse (a fill on s1 of the
//! re-allocated memory) into the vendor's asynchronous error. The negative
//! control shows the detector fires when `record_stream` is left out.

#[macro_use]
mod common;

use std::ffi::c_void;
use std::time::Duration;

use common::{Env, MIB};
use dipu_allocator::{Algorithm, BlockState, DeviceAllocator};
use dipu_stream::Stream;

const SIZE: usize = MIB;
const READER: Duration = Duration::from_millis(20);
/// Re-allocations while the reader runs: an odd number, so that for
/// TORCH and BF (2 MiB segments for 1 MiB requests) they fill whole
/// segments and A is the only free block once released.
const REALLOCS: usize = 3;

per_algorithm!(reuse_waits_for_the_other_stream);
per_caching_algorithm!(without_record_stream_the_reader_sees_corruption);

/// A on s1 filled with 0xAB, read slowly on s2 after `record_stream`.
/// With `hold`, s2 is held (before the reader) until the returned gate is
/// dropped, so the test decides when s2's work may finish, whatever the
/// machine's speed.
fn setup(
    env: &Env,
    alloc: &dyn DeviceAllocator,
    s1: Stream,
    s2: Stream,
    record: bool,
    hold: bool,
) -> (*mut c_void, Option<std::sync::mpsc::Sender<()>>) {
    let a = alloc.allocate(SIZE, s1).unwrap();
    env.memset_async(s1, a.ptr, 0xAB, SIZE);
    s1.synchronize().unwrap();
    if record {
        alloc.record_stream(a.ptr, s2).unwrap();
    }
    let gate = hold.then(|| {
        let (gate, wait) = std::sync::mpsc::channel::<()>();
        // SAFETY: s2 is a live pooled stream; the callback only waits.
        unsafe {
            env.ctx
                .api()
                .launch_host_func(s2.raw(), Box::new(move || _ = wait.recv()))
                .unwrap()
        };
        gate
    });
    // SAFETY: `a` is SIZE live bytes of device 0 and s2 a live stream; the
    // block is freed only through the allocator, which must wait for s2.
    unsafe {
        env.vendor
            .enqueue_expect(s2.raw(), a.ptr, 0xAB, SIZE, READER)
            .unwrap();
    }
    (a.ptr, gate)
}

fn overlaps(x: *mut c_void, y: *mut c_void) -> bool {
    let (x, y) = (x as usize, y as usize);
    x < y + SIZE && y < x + SIZE
}

fn reuse_waits_for_the_other_stream(alg: Algorithm) {
    let env = Env::new(256 << 20);
    let alloc = env.allocator(0, alg);
    let (s1, s2) = (env.stream(0), env.stream(0));
    // RAW's free waits for s2 itself, so only the caching algorithms hold it.
    let (a, gate) = setup(&env, alloc.as_ref(), s1, s2, true, alg != Algorithm::Raw);
    alloc.free(a).unwrap();
    if alg == Algorithm::Raw {
        // RAW frees to the vendor, after waiting for s2.
        assert!(
            s2.query().unwrap(),
            "{alg}: free returned while s2 still read the block"
        );
    } else {
        let snap = common::check_snapshot(alloc.as_ref(), &format!("{alg} after free"));
        assert_eq!(
            common::block_state(&snap, a),
            Some(BlockState::Pending),
            "{alg}: A must be pending right after free"
        );
        assert_eq!(
            alloc.stats().active.current,
            1,
            "{alg}: a pending block stays active"
        );
    }
    // Phase 1: re-allocate the same size on s1 and overwrite it with 0xCD.
    let mut again = Vec::new();
    for i in 0..REALLOCS {
        let b = alloc.allocate(SIZE, s1).unwrap();
        if alg != Algorithm::Raw {
            assert!(
                !overlaps(b.ptr, a),
                "{alg}: re-allocation {i} returned {:p}, overlapping A {a:p} while s2 still reads A",
                b.ptr
            );
        }
        env.memset_async(s1, b.ptr, 0xCD, SIZE);
        again.push(b.ptr);
    }
    s1.synchronize().unwrap();
    if alg != Algorithm::Raw {
        assert!(!s2.query().unwrap(), "{alg}: s2 is still held");
    }
    drop(gate);
    s2.synchronize()
        .unwrap_or_else(|e| panic!("{alg}: s2 reported an error: {e}"));
    if let Some(e) = env.vendor.take_async_error() {
        panic!("{alg}: A was overwritten while s2 still read it: {e}");
    }
    // Phase 2: s2 is done; the next allocation releases A and reuses it.
    if alg != Algorithm::Raw {
        let c = alloc.allocate(SIZE, s1).unwrap();
        assert_eq!(c.ptr, a, "{alg}: A was not reused once s2 finished");
        let snap = common::check_snapshot(alloc.as_ref(), &format!("{alg} after reuse"));
        assert_eq!(
            common::block_state(&snap, a),
            Some(BlockState::Allocated),
            "{alg}: A reused"
        );
        assert_eq!(
            alloc.stats().active.current,
            REALLOCS as u64 + 1,
            "{alg}: A no longer pending"
        );
        again.push(c.ptr);
    }
    for p in again {
        alloc.free(p).unwrap();
    }
    assert_eq!(alloc.stats().allocated_bytes.current, 0, "{alg}: all freed");
    assert_eq!(
        alloc.stats().active_bytes.current,
        0,
        "{alg}: nothing pending"
    );
}

/// The same scenario without `record_stream`: the block goes straight back
/// to s1's cache, the re-allocation gets A, the fill lands while s2 reads,
/// and the detector reports it. Proves the test above can fail.
fn without_record_stream_the_reader_sees_corruption(alg: Algorithm) {
    let env = Env::new(256 << 20);
    let alloc = env.allocator(0, alg);
    let (s1, s2) = (env.stream(0), env.stream(0));
    let (a, gate) = setup(&env, alloc.as_ref(), s1, s2, false, true);
    alloc.free(a).unwrap();
    let b = alloc.allocate(SIZE, s1).unwrap();
    assert_eq!(b.ptr, a, "{alg}: without record_stream A is reused at once");
    env.memset_async(s1, b.ptr, 0xCD, SIZE);
    // Waits for the fill; may already report the reader's (sticky) error.
    let _ = s1.synchronize();
    drop(gate);
    assert!(
        s2.synchronize().is_err(),
        "{alg}: the sticky error shows on synchronize"
    );
    let e = env
        .vendor
        .take_async_error()
        .unwrap_or_else(|| panic!("{alg}: the detector missed a reuse during the read"));
    assert!(
        e.message().contains("expect kernel"),
        "{alg}: unexpected error: {e}"
    );
    alloc.free(b.ptr).unwrap();
}
