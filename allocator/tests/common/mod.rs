//! Helpers shared by the behavioural tests: a host vendor and context per
//! test, copies in and out of device memory, snapshot checks and a small
//! JSON well-formedness check.
#![allow(dead_code)]

use std::ffi::c_void;
use std::sync::Arc;

use dipu_allocator::{
    new_device_allocator, Algorithm, AllocatorConfig, BlockState, DeviceAllocator, DeviceStats,
    Snapshot, Stat,
};
use dipu_deviceapi::CopyKind;
use dipu_stream::{DeviceContext, DeviceGuard, Stream};
use dipu_vendor_host::{HostConfig, HostVendor};

pub(crate) const KIB: usize = 1 << 10;
pub(crate) const MIB: usize = 1 << 20;

/// The caching algorithms (every algorithm but RAW).
pub(crate) const CACHING: [Algorithm; 3] =
    [Algorithm::Torch, Algorithm::BestFit, Algorithm::BinSize];

/// A host vendor of two devices and a context over it, private to one test
/// (so sticky asynchronous errors and memory counts do not mix).
pub(crate) struct Env {
    pub(crate) vendor: Arc<HostVendor>,
    pub(crate) ctx: &'static DeviceContext,
}

impl Env {
    /// Two devices of `memory` bytes each.
    pub(crate) fn new(memory: u64) -> Env {
        let vendor = Arc::new(
            HostVendor::new(HostConfig {
                devices: 2,
                memory_per_device: memory,
                ..HostConfig::default()
            })
            .unwrap(),
        );
        let ctx = DeviceContext::new(vendor.clone()).unwrap();
        Env { vendor, ctx }
    }

    /// An allocator of `algorithm` for `device` with the default options.
    pub(crate) fn allocator(&self, device: i32, algorithm: Algorithm) -> Box<dyn DeviceAllocator> {
        self.allocator_with(device, algorithm, &AllocatorConfig::default())
    }

    /// An allocator of `algorithm` for `device` with `config`.
    pub(crate) fn allocator_with(
        &self,
        device: i32,
        algorithm: Algorithm,
        config: &AllocatorConfig,
    ) -> Box<dyn DeviceAllocator> {
        let a = new_device_allocator(self.ctx, device, algorithm, config).unwrap();
        assert_eq!(a.algorithm(), algorithm);
        assert_eq!(a.device(), device);
        a
    }

    /// A new stream of `device` (one worker thread, unlike the pool's 32).
    pub(crate) fn stream(&self, device: i32) -> Stream {
        self.ctx.new_stream(device, 0).unwrap()
    }

    /// Copies `data` to device memory at `ptr` of `device` (synchronous).
    pub(crate) fn upload(&self, device: i32, ptr: *mut c_void, data: &[u8]) {
        let _guard = DeviceGuard::new(self.ctx, device).unwrap();
        // SAFETY: `ptr` is a live allocation of at least `data.len()` bytes
        // on `device` (the vendor checks the range and fails otherwise).
        unsafe {
            self.ctx
                .api()
                .memcpy(
                    ptr,
                    data.as_ptr().cast(),
                    data.len(),
                    CopyKind::HostToDevice,
                )
                .unwrap();
        }
    }

    /// Copies `bytes` of device memory at `ptr` of `device` back (synchronous).
    pub(crate) fn download(&self, device: i32, ptr: *const c_void, bytes: usize) -> Vec<u8> {
        let mut out = vec![0u8; bytes];
        let _guard = DeviceGuard::new(self.ctx, device).unwrap();
        // SAFETY: `ptr` is a live allocation of at least `bytes` bytes on
        // `device` (checked by the vendor) and `out` holds `bytes` bytes.
        unsafe {
            self.ctx
                .api()
                .memcpy(out.as_mut_ptr().cast(), ptr, bytes, CopyKind::DeviceToHost)
                .unwrap();
        }
        out
    }

    /// Queues a fill of `bytes` at `ptr` with `value` on `stream`.
    pub(crate) fn memset_async(&self, stream: Stream, ptr: *mut c_void, value: u8, bytes: usize) {
        let _guard = DeviceGuard::new(self.ctx, stream.device()).unwrap();
        // SAFETY: `ptr` is a live allocation of at least `bytes` bytes of
        // the stream's device; the stream handle came from this context.
        unsafe {
            self.ctx
                .api()
                .memset_async(ptr, value, bytes, stream.raw())
                .unwrap();
        }
    }

    /// Bytes the vendor has in use on `device`.
    pub(crate) fn used(&self, device: i32) -> u64 {
        self.vendor.memory_used(device).unwrap()
    }
}

/// `len` bytes of a pattern that depends on `seed` (cheap to build in debug).
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let chunk: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(31) as u8) ^ seed.wrapping_mul(97).wrapping_add(13))
        .collect();
    let mut out = vec![0u8; len];
    for piece in out.chunks_mut(chunk.len()) {
        piece.copy_from_slice(&chunk[..piece.len()]);
    }
    out
}

/// Checks that `current == allocated - freed` and `peak >= current`.
pub(crate) fn check_stat(name: &str, s: Stat, label: &str) {
    assert_eq!(
        s.current,
        s.allocated - s.freed,
        "{label}: {name}: current is not allocated - freed: {s:?}"
    );
    assert!(
        s.peak >= s.current,
        "{label}: {name}: peak below current: {s:?}"
    );
}

/// Every statistic by name.
pub(crate) fn all_stats(s: &DeviceStats) -> [(&'static str, Stat); 9] {
    [
        ("allocation", s.allocation),
        ("segment", s.segment),
        ("active", s.active),
        ("inactive_split", s.inactive_split),
        ("allocated_bytes", s.allocated_bytes),
        ("reserved_bytes", s.reserved_bytes),
        ("active_bytes", s.active_bytes),
        ("inactive_split_bytes", s.inactive_split_bytes),
        ("requested_bytes", s.requested_bytes),
    ]
}

/// Checks a snapshot's structure against the statistics: segments sorted
/// and disjoint, blocks tiling each segment exactly, free blocks with no
/// requested size, totals matching the statistics.
pub(crate) fn check_snapshot(alloc: &dyn DeviceAllocator, label: &str) -> Snapshot {
    let snap = alloc.snapshot();
    let stats = alloc.stats();
    let mut end = 0usize;
    for seg in &snap.segments {
        assert!(
            seg.address >= end,
            "{label}: segments not sorted or overlapping at {:#x}",
            seg.address
        );
        end = seg.address + seg.size;
        assert_eq!(seg.device, alloc.device(), "{label}: segment device");
        assert!(!seg.blocks.is_empty(), "{label}: segment without blocks");
        let mut at = seg.address;
        for b in &seg.blocks {
            assert_eq!(
                b.address, at,
                "{label}: blocks of segment {:#x} leave a gap or overlap",
                seg.address
            );
            assert!(b.size > 0, "{label}: empty block");
            at += b.size;
            match b.state {
                BlockState::Free => {
                    assert_eq!(b.requested, 0, "{label}: free block with a request")
                }
                BlockState::Allocated | BlockState::Pending => assert!(
                    b.requested <= b.size,
                    "{label}: requested {} above block size {}",
                    b.requested,
                    b.size
                ),
            }
        }
        assert_eq!(
            at,
            seg.address + seg.size,
            "{label}: blocks do not cover segment {:#x}",
            seg.address
        );
    }
    assert_eq!(
        snap.reserved() as u64,
        stats.reserved_bytes.current,
        "{label}: snapshot reserved vs stats"
    );
    assert_eq!(
        snap.segments.len() as u64,
        stats.segment.current,
        "{label}: snapshot segments vs stats"
    );
    assert_eq!(
        snap.bytes_in(BlockState::Allocated) as u64,
        stats.allocated_bytes.current,
        "{label}: snapshot allocated vs stats"
    );
    assert_eq!(
        (snap.bytes_in(BlockState::Allocated) + snap.bytes_in(BlockState::Pending)) as u64,
        stats.active_bytes.current,
        "{label}: snapshot allocated + pending vs active_bytes"
    );
    assert!(
        json_is_well_formed(&snap.to_json()),
        "{label}: snapshot JSON is not well formed: {}",
        snap.to_json()
    );
    snap
}

/// The state of the block that starts at `ptr`, if a snapshot has one.
pub(crate) fn block_state(snap: &Snapshot, ptr: *mut c_void) -> Option<BlockState> {
    snap.segments
        .iter()
        .flat_map(|s| &s.blocks)
        .find(|b| b.address == ptr as usize)
        .map(|b| b.state)
}

/// Whether `text` is one well-formed JSON value (a minimal recursive-descent check).
pub(crate) fn json_is_well_formed(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = 0;
    value(bytes, &mut at) && {
        skip_ws(bytes, &mut at);
        at == bytes.len()
    }
}

fn skip_ws(b: &[u8], at: &mut usize) {
    while *at < b.len() && b[*at].is_ascii_whitespace() {
        *at += 1;
    }
}

fn eat(b: &[u8], at: &mut usize, c: u8) -> bool {
    skip_ws(b, at);
    if b.get(*at) == Some(&c) {
        *at += 1;
        true
    } else {
        false
    }
}

fn string(b: &[u8], at: &mut usize) -> bool {
    if !eat(b, at, b'"') {
        return false;
    }
    while let Some(&c) = b.get(*at) {
        *at += 1;
        match c {
            b'"' => return true,
            b'\\' => *at += 1,
            c if c < 0x20 => return false,
            _ => {}
        }
    }
    false
}

fn sequence(b: &[u8], at: &mut usize, close: u8, mut item: impl FnMut(&mut usize) -> bool) -> bool {
    if eat(b, at, close) {
        return true;
    }
    loop {
        if !item(at) {
            return false;
        }
        if eat(b, at, close) {
            return true;
        }
        if !eat(b, at, b',') {
            return false;
        }
    }
}

fn value(b: &[u8], at: &mut usize) -> bool {
    skip_ws(b, at);
    match b.get(*at) {
        Some(b'{') => {
            *at += 1;
            sequence(b, at, b'}', |at| {
                string(b, at) && eat(b, at, b':') && value(b, at)
            })
        }
        Some(b'[') => {
            *at += 1;
            sequence(b, at, b']', |at| value(b, at))
        }
        Some(b'"') => string(b, at),
        Some(c) if c.is_ascii_digit() || *c == b'-' => {
            let start = *at;
            *at += 1;
            while *at < b.len() && matches!(b[*at], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
            {
                *at += 1;
            }
            std::str::from_utf8(&b[start..*at])
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .is_some()
        }
        _ => ["true", "false", "null"].iter().any(|w| {
            let ok = b[*at..].starts_with(w.as_bytes());
            if ok {
                *at += w.len();
            }
            ok
        }),
    }
}

/// One `#[test]` per algorithm for each named `fn(Algorithm)`: a module of
/// that name with tests `torch`, `bf`, `bs` and `raw`.
#[allow(unused_macros)]
macro_rules! per_algorithm {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn torch() { super::$name(dipu_allocator::Algorithm::Torch) }
            #[test]
            fn bf() { super::$name(dipu_allocator::Algorithm::BestFit) }
            #[test]
            fn bs() { super::$name(dipu_allocator::Algorithm::BinSize) }
            #[test]
            fn raw() { super::$name(dipu_allocator::Algorithm::Raw) }
        }
    )*};
}

/// Like `per_algorithm!`, for the caching algorithms only.
#[allow(unused_macros)]
macro_rules! per_caching_algorithm {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn torch() { super::$name(dipu_allocator::Algorithm::Torch) }
            #[test]
            fn bf() { super::$name(dipu_allocator::Algorithm::BestFit) }
            #[test]
            fn bs() { super::$name(dipu_allocator::Algorithm::BinSize) }
        }
    )*};
}

/// Keeps `stream` busy until the returned gate is dropped (work queued
/// behind it stays pending however slow the machine), or, for RAW (whose
/// free waits for the stream itself), with 300 ms of simulated work.
pub(crate) fn hold(env: &Env, stream: Stream, raw: bool) -> Option<std::sync::mpsc::Sender<()>> {
    if raw {
        // SAFETY: `stream` is a live stream of this vendor.
        unsafe {
            env.vendor
                .enqueue_kernel(stream.raw(), std::time::Duration::from_millis(300))
                .unwrap()
        };
        return None;
    }
    let (gate, wait) = std::sync::mpsc::channel::<()>();
    // SAFETY: `stream` is a live stream of this vendor; the callback only waits.
    unsafe {
        env.ctx
            .api()
            .launch_host_func(stream.raw(), Box::new(move || _ = wait.recv()))
            .unwrap()
    };
    Some(gate)
}
