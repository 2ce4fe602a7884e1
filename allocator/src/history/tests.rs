use std::sync::Arc;

use dipu_stream::DeviceContext;
use dipu_vendor_host::{HostConfig, HostVendor};

use super::*;
use crate::{Algorithm, AllocatorConfig, BlockState};

pub(super) fn traced(history: &Arc<History>) -> (Box<dyn DeviceAllocator>, dipu_stream::Stream) {
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).unwrap());
    let ctx = DeviceContext::new(vendor).unwrap();
    let segments = Arc::new(SegmentMap::new());
    let inner = crate::new_device_allocator_in(
        ctx,
        0,
        Algorithm::BestFit,
        &AllocatorConfig::default(),
        Arc::clone(&segments),
    )
    .unwrap();
    let stream = ctx.current_stream(0).unwrap();
    (history.wrap(0, inner, segments), stream)
}

fn actions(snap: &MemorySnapshot) -> Vec<Action> {
    snap.device_traces[0].iter().map(|e| e.action).collect()
}

#[test]
fn records_allocations_frees_and_segments_in_order() {
    let history = History::new();
    let (alloc, stream) = traced(&history);
    history.record(100, false);
    let a = alloc.allocate(1000, stream).unwrap();
    let b = alloc.allocate(3000, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    let snap = history.snapshot([alloc.as_ref()]);
    let acts = actions(&snap);
    assert_eq!(acts[0], Action::SegmentAlloc, "{acts:?}");
    assert_eq!(
        &acts[acts.len() - 3..],
        &[Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
    );
    let allocs: Vec<_> = snap.device_traces[0]
        .iter()
        .filter(|e| e.action == Action::Alloc)
        .map(|e| (e.addr, e.size))
        .collect();
    assert_eq!(allocs, vec![(a.ptr as usize, 1000), (b.ptr as usize, 3000)]);
    let free = snap.device_traces[0].last().unwrap();
    assert_eq!((free.addr, free.size), (a.ptr as usize, 1000));
    // The segment map of the snapshot agrees with the allocator.
    assert_eq!(snap.segments.len(), alloc.snapshot().segments.len());
    let live: Vec<_> = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::Allocated)
        .map(|b| (b.address, b.requested_size))
        .collect();
    assert_eq!(live, vec![(b.ptr as usize, 3000)]);
    for s in &snap.segments {
        assert_eq!(s.blocks.iter().map(|b| b.size).sum::<usize>(), s.total_size);
    }
    alloc.free(b.ptr).unwrap();
}

#[test]
fn empty_cache_records_segment_free() {
    let history = History::new();
    let (alloc, stream) = traced(&history);
    history.record(100, false);
    let a = alloc.allocate(5 << 20, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    alloc.empty_cache().unwrap();
    let snap = history.snapshot([alloc.as_ref()]);
    let acts = actions(&snap);
    assert_eq!(acts.first(), Some(&Action::SegmentAlloc));
    assert_eq!(acts.last(), Some(&Action::SegmentFree), "{acts:?}");
    let (first, last) = (
        &snap.device_traces[0][0],
        snap.device_traces[0].last().unwrap(),
    );
    assert_eq!((first.addr, first.size), (last.addr, last.size));
    assert!(snap.segments.is_empty());
}

#[test]
fn off_records_nothing_and_the_ring_keeps_the_last_n() {
    let history = History::new();
    let (alloc, stream) = traced(&history);
    let a = alloc.allocate(100, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    assert_eq!(
        history.snapshot([alloc.as_ref()]).events(),
        0,
        "off by default"
    );
    history.record(5, false);
    let mut last = 0;
    for i in 1..=20 {
        let a = alloc.allocate(100 * i, stream).unwrap();
        last = a.ptr as usize;
        alloc.free(a.ptr).unwrap();
    }
    let snap = history.snapshot([alloc.as_ref()]);
    assert_eq!(snap.events(), 5);
    let e = &snap.device_traces[0];
    assert_eq!(
        (e[2].action, e[2].addr, e[2].size),
        (Action::Alloc, last, 2000)
    );
    assert!(
        !actions(&snap).contains(&Action::SegmentAlloc) || snap.segments.len() > 1,
        "a segment that existed before recording started is not invented"
    );
    history.record(0, false);
    let a = alloc.allocate(100, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    assert_eq!(
        history.snapshot([alloc.as_ref()]).device_traces[0],
        *e,
        "stopped"
    );
}

#[inline(never)]
fn allocate_here(alloc: &dyn DeviceAllocator, stream: dipu_stream::Stream) -> usize {
    alloc.allocate(4096, stream).unwrap().ptr as usize
}

#[test]
fn stacks_name_the_caller_first() {
    let history = History::new();
    let (alloc, stream) = traced(&history);
    history.record(10, true);
    let addr = allocate_here(alloc.as_ref(), stream);
    let snap = history.snapshot([alloc.as_ref()]);
    let e = snap.device_traces[0]
        .iter()
        .find(|e| e.action == Action::Alloc)
        .unwrap();
    assert!(!e.frames.is_empty());
    assert!(e.frames.len() <= MAX_FRAMES);
    assert!(
        e.frames[0].name.contains("allocate_here"),
        "innermost frame is the caller: {:#?}",
        e.frames
    );
    let block = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .find(|b| b.address == addr)
        .unwrap();
    assert_eq!(
        block.frames, e.frames,
        "a live block carries its allocation's stack"
    );
    alloc.free(addr as *mut _).unwrap();
}

#[test]
fn pickle_round_trips_and_bad_bytes_are_errors() {
    let history = History::new();
    let (alloc, stream) = traced(&history);
    history.record(100, true);
    let a = alloc.allocate(1000, stream).unwrap();
    let b = alloc.allocate(70_000, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    let snap = history.snapshot([alloc.as_ref()]);
    let bytes = snap.to_pickle().unwrap();
    assert_eq!(&bytes[..2], &[0x80, 2], "protocol 2");
    assert_eq!(MemorySnapshot::from_pickle(&bytes).unwrap(), snap);
    for junk in [&b""[..], b"\x80\x02K\x05.", b"hello"] {
        let e = MemorySnapshot::from_pickle(junk).unwrap_err();
        assert_eq!(e.kind(), dipu_deviceapi::ErrorKind::InvalidArgument, "{e}");
    }
    alloc.free(b.ptr).unwrap();
}

#[test]
fn env_values_are_checked() {
    assert!(parse_count(ENV_MEM_HISTORY, "abc").is_err());
    assert_eq!(parse_count(ENV_MEM_HISTORY, " 42 ").unwrap(), 42);
}
