//! Concurrency (issue 4): 8 threads × 500 iterations allocate and free on
//! one device allocator, each on its own stream, filling every block with
//! its own pattern on that stream and checking the pattern just before the
//! free. A shared map of live ranges catches any overlap between threads at
//! once; some blocks are also read on a second stream after
//! `record_stream` and freed without waiting, so deferred frees run
//! concurrently too (a premature reuse becomes the vendor's async error).

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::time::Duration;

use common::{Env, KIB, MIB};
use dipu_allocator::{Algorithm, DeviceAllocator};
use dipu_deviceapi::CopyKind;
use dipu_stream::Stream;
use parking_lot::Mutex;

const THREADS: usize = 8;
const ITERATIONS: usize = 500;
const MAX_LIVE: usize = 8;

per_algorithm!(eight_threads_share_one_allocator);

/// Live ranges of every thread: start → (end, thread).
type Ranges = Mutex<BTreeMap<usize, (usize, usize)>>;

fn claim(ranges: &Ranges, alg: Algorithm, thread: usize, ptr: *mut c_void, bytes: usize) {
    let (start, end) = (ptr as usize, ptr as usize + bytes);
    let mut map = ranges.lock();
    if let Some((&s, &(e, t))) = map.range(..end).next_back() {
        assert!(
            e <= start,
            "{alg}: thread {thread} got {start:#x}..{end:#x}, overlapping {s:#x}..{e:#x} of thread {t}"
        );
    }
    map.insert(start, (end, thread));
}

fn check_and_release(
    env: &Env,
    ranges: &Ranges,
    alg: Algorithm,
    stream: Stream,
    ptr: *mut c_void,
    bytes: usize,
    value: u8,
) {
    let mut back = vec![0u8; bytes];
    // SAFETY: `ptr` is `bytes` live bytes of device 0 owned by this thread;
    // `back` holds `bytes` bytes and outlives the synchronize below.
    unsafe {
        env.ctx
            .api()
            .memcpy_async(
                back.as_mut_ptr().cast(),
                ptr,
                bytes,
                CopyKind::DeviceToHost,
                stream.raw(),
            )
            .unwrap();
    }
    stream.synchronize().unwrap_or_else(|e| {
        panic!("{alg}: asynchronous error (was a block reused while another stream still read it?): {e}")
    });
    if let Some(at) = back.iter().position(|&b| b != value) {
        panic!(
            "{alg}: block {ptr:p} ({bytes} bytes) lost its pattern {value:#04x} at byte {at} ({:#04x}): \
             another thread wrote into it",
            back[at]
        );
    }
    ranges.lock().remove(&(ptr as usize));
}

fn worker(env: &Env, alloc: &dyn DeviceAllocator, ranges: &Ranges, alg: Algorithm, thread: usize) {
    let stream = env.stream(0);
    let side = env.stream(0);
    // Each block gets its own value: thread in the high bits, a counter below.
    let mut count = 0u8;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (thread as u64 + 1);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as usize
    };
    let mut live: Vec<(*mut c_void, usize, u8)> = Vec::new();
    for _ in 0..ITERATIONS {
        let r = next();
        if live.len() < MAX_LIVE && (live.is_empty() || r % 3 != 0) {
            let bytes = if r % 50 == 0 {
                MIB + r % MIB
            } else {
                1 + (r >> 8) % (96 * KIB)
            };
            let a = alloc
                .allocate(bytes, stream)
                .unwrap_or_else(|e| panic!("{alg}: thread {thread}: {e}"));
            claim(ranges, alg, thread, a.ptr, bytes);
            count = count.wrapping_add(1);
            let value = (thread as u8) << 5 | (count % 31 + 1);
            env.memset_async(stream, a.ptr, value, bytes);
            live.push((a.ptr, bytes, value));
        } else {
            let (ptr, bytes, value) = live.swap_remove((r >> 4) % live.len());
            check_and_release(env, ranges, alg, stream, ptr, bytes, value);
            if r % 8 == 1 {
                // Read it on the side stream too, and free without waiting.
                alloc.record_stream(ptr, side).unwrap();
                // SAFETY: `ptr` is `bytes` live bytes of device 0; the
                // allocator may reuse them only after `side` is past this.
                unsafe {
                    env.vendor
                        .enqueue_expect(side.raw(), ptr, value, bytes, Duration::from_millis(2))
                        .unwrap();
                }
            }
            alloc
                .free(ptr)
                .unwrap_or_else(|e| panic!("{alg}: thread {thread}: free: {e}"));
        }
    }
    for (ptr, bytes, value) in live {
        check_and_release(env, ranges, alg, stream, ptr, bytes, value);
        alloc.free(ptr).unwrap();
    }
    side.synchronize()
        .unwrap_or_else(|e| panic!("{alg}: thread {thread}: side stream: {e}"));
}

fn eight_threads_share_one_allocator(alg: Algorithm) {
    let env = Env::new(1 << 30);
    let alloc = env.allocator(0, alg);
    let ranges = Ranges::default();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (env, alloc, ranges) = (&env, alloc.as_ref(), &ranges);
            scope.spawn(move || worker(env, alloc, ranges, alg, thread));
        }
    });
    if let Some(e) = env.vendor.take_async_error() {
        panic!("{alg}: a block was reused while another stream still read it: {e}");
    }
    assert!(ranges.lock().is_empty(), "{alg}: ranges left claimed");
    // One more call lets the allocator release deferred frees that are done.
    let s = env.ctx.default_stream(0).unwrap();
    let probe = alloc.allocate(1, s).unwrap();
    alloc.free(probe.ptr).unwrap();
    let st = alloc.stats();
    assert_eq!(
        st.allocated_bytes.current, 0,
        "{alg}: allocated_bytes after every free"
    );
    assert_eq!(
        st.allocation.current, 0,
        "{alg}: allocations after every free"
    );
    assert_eq!(st.active_bytes.current, 0, "{alg}: nothing still pending");
    assert_eq!(
        st.allocation.allocated,
        (st.allocation.freed),
        "{alg}: allocations vs frees"
    );
    assert!(
        st.allocation.allocated > (THREADS * ITERATIONS / 3) as u64,
        "{alg}: too few allocations ran"
    );
    common::check_snapshot(alloc.as_ref(), &format!("{alg} at the end"));
    alloc.empty_cache().unwrap();
    assert_eq!(env.used(0), 0, "{alg}: every segment given back");
}
