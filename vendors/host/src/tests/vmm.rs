//! Virtual memory: reserve, create, map, use, unmap, release.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind, PhysicalMemHandle};

use super::{err, host, read, MIB};

const GRAN: usize = 2 << 20;

fn at(base: *mut c_void, offset: usize) -> *mut c_void {
    base.cast::<u8>().wrapping_add(offset).cast()
}

#[test]
fn reserve_create_map_use_unmap_release() {
    let h = host(1, 64 * MIB);
    assert_eq!(h.vmm_granularity().unwrap(), GRAN);
    let base = h.vmm_reserve(4 * GRAN).unwrap();
    assert_eq!(base as usize % GRAN, 0, "aligned to the granularity");
    let c0 = h.vmm_create(GRAN).unwrap();
    let c1 = h.vmm_create(GRAN).unwrap();
    assert_eq!(h.memory_used(0).unwrap(), 2 * GRAN as u64);
    // SAFETY: all pointers are inside the reservation and mapped before use.
    unsafe {
        assert_eq!(
            err(h.memset(base, 1, 16)).0,
            ErrorKind::InvalidArgument,
            "reserved but unmapped"
        );
        h.vmm_map(base, GRAN, c0).unwrap();
        h.vmm_map(at(base, GRAN), GRAN, c1).unwrap();
        // A copy may span adjacent mappings, as expandable segments need.
        let span = at(base, GRAN - 8);
        h.memset(span, 7, 16).unwrap();
        assert_eq!(read(&h, span, 16), vec![7; 16]);
        let src = vec![3u8; GRAN];
        h.memcpy(
            at(base, GRAN / 2),
            src.as_ptr().cast(),
            GRAN,
            CopyKind::HostToDevice,
        )
        .unwrap();
        assert_eq!(*base.cast::<u8>().add(GRAN / 2), 3, "host-visible memory");
        let past = h.memset(at(base, GRAN), 0, GRAN + 1);
        assert!(err(past).1.contains("past the end"));
        assert!(err(h.free(base)).1.contains("vmm_unmap"));

        // Unmapping keeps the reservation; the chunk keeps its data.
        h.vmm_unmap(base, 2 * GRAN).unwrap();
        assert_eq!(err(h.memset(base, 0, 1)).0, ErrorKind::InvalidArgument);
        h.vmm_map(at(base, 3 * GRAN), GRAN, c0).unwrap();
        assert_eq!(read(&h, at(base, 4 * GRAN - 8), 8), vec![3; 8]);
        assert_eq!(
            read(&h, at(base, 3 * GRAN), 8),
            vec![0; 8],
            "fresh chunks are zeroed"
        );
        h.vmm_unmap(at(base, 3 * GRAN), GRAN).unwrap();

        h.vmm_release(c0).unwrap();
        h.vmm_release(c1).unwrap();
        assert_eq!(h.memory_used(0).unwrap(), 0);
        h.vmm_free_reservation(base, 4 * GRAN).unwrap();
    }
    assert!(h.take_async_error().is_none());
}

#[test]
fn release_while_mapped_returns_memory_on_unmap() {
    let h = host(1, 64 * MIB);
    let base = h.vmm_reserve(2 * GRAN).unwrap();
    let c = h.vmm_create(2 * GRAN).unwrap();
    // SAFETY: the mapping lies inside the reservation.
    unsafe {
        h.vmm_map(base, 2 * GRAN, c).unwrap();
        h.vmm_release(c).unwrap();
        assert_eq!(h.memory_used(0).unwrap(), 2 * GRAN as u64, "still mapped");
        h.memset(base, 1, 2 * GRAN).unwrap();
        assert_eq!(
            err(h.vmm_map(base, 2 * GRAN, c)).0,
            ErrorKind::InvalidArgument
        );
        assert_eq!(err(h.vmm_release(c)).0, ErrorKind::InvalidArgument);
        h.vmm_unmap(base, 2 * GRAN).unwrap();
        assert_eq!(h.memory_used(0).unwrap(), 0);
        h.vmm_free_reservation(base, 2 * GRAN).unwrap();
    }
}

#[test]
fn create_counts_against_capacity() {
    let h = host(2, 4 * MIB);
    let a = h.vmm_create(GRAN).unwrap();
    let m = h.malloc(MIB as usize).unwrap();
    let (kind, message) = err(h.vmm_create(GRAN));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(message.contains("device 0"), "{message}");
    assert_eq!(h.memory_info().unwrap().free, MIB);
    h.set_device(1).unwrap();
    let b = h.vmm_create(2 * GRAN).expect("device 1 has its own budget");
    // SAFETY: the handles and pointer are live.
    unsafe {
        h.vmm_release(b).unwrap();
        h.vmm_release(a).unwrap();
        h.free(m).unwrap();
    }
    h.set_device(0).unwrap();
    assert_eq!(h.memory_info().unwrap().free, 4 * MIB);
}

#[test]
fn bad_vmm_arguments_are_rejected() {
    let h = host(1, 64 * MIB);
    for bytes in [0, 1000, GRAN + 1] {
        assert_eq!(err(h.vmm_create(bytes)).0, ErrorKind::InvalidArgument);
        assert_eq!(err(h.vmm_reserve(bytes)).0, ErrorKind::InvalidArgument);
    }
    let base = h.vmm_reserve(2 * GRAN).unwrap();
    let c = h.vmm_create(GRAN).unwrap();
    let big = h.vmm_create(2 * GRAN).unwrap();
    let bad = |r: dipu_deviceapi::Result<()>, needle: &str| {
        let (kind, message) = err(r);
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    };
    // SAFETY: every bad call is rejected before memory is touched; the good
    // ones stay inside the reservation.
    unsafe {
        bad(h.vmm_map(at(base, 4096), GRAN, c), "aligned");
        bad(h.vmm_map(base, 2 * GRAN, c), "whole chunk");
        bad(
            h.vmm_map(at(base, 2 * GRAN), GRAN, c),
            "not inside one reservation",
        );
        bad(
            h.vmm_map(at(base, GRAN), 2 * GRAN, big),
            "not inside one reservation",
        );
        bad(
            h.vmm_map(base, GRAN, PhysicalMemHandle::from_raw(77)),
            "unknown",
        );
        h.vmm_map(base, GRAN, c).unwrap();
        bad(h.vmm_map(base, GRAN, c), "already mapped");
        bad(h.vmm_unmap(base, GRAN / 2), "whole mappings");
        bad(h.vmm_unmap(at(base, GRAN), GRAN), "whole mappings");
        bad(h.vmm_free_reservation(base, 2 * GRAN), "still mapped");
        bad(h.vmm_free_reservation(base, GRAN), "has 4194304 bytes");
        bad(
            h.vmm_free_reservation(at(base, GRAN), GRAN),
            "not the start",
        );
        h.vmm_unmap(base, GRAN).unwrap();
        bad(h.vmm_unmap(base, GRAN), "whole mappings");
        h.vmm_free_reservation(base, 2 * GRAN).unwrap();
        bad(h.vmm_free_reservation(base, 2 * GRAN), "not the start");
        h.vmm_release(c).unwrap();
        h.vmm_release(big).unwrap();
    }
    assert_eq!(h.memory_used(0).unwrap(), 0);
}

#[test]
fn dropping_the_vendor_cleans_up_vmm_state() {
    let h = host(1, 64 * MIB);
    let base = h.vmm_reserve(GRAN).unwrap();
    let c = h.vmm_create(GRAN).unwrap();
    // SAFETY: the mapping lies inside the reservation.
    unsafe { h.vmm_map(base, GRAN, c).unwrap() };
    drop(h);
}

#[test]
fn unmapping_under_queued_work_is_an_async_error_not_a_crash() {
    let h = host(1, 64 * MIB);
    let base = h.vmm_reserve(GRAN).unwrap();
    let c = h.vmm_create(GRAN).unwrap();
    // SAFETY: the memset is checked again when it runs, after the unmap,
    // and refuses to touch the unmapped range.
    unsafe {
        h.vmm_map(base, GRAN, c).unwrap();
        let s = h.stream_create(0).unwrap();
        let open = super::gate(&h, s);
        h.memset_async(base, 1, GRAN, s).unwrap();
        h.vmm_unmap(base, GRAN).unwrap(); // a bug above: no synchronize first
        drop(open);
        let (kind, message) = err(h.stream_synchronize(s));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(message.contains("operation on stream"), "{message}");
        assert!(h.take_async_error().is_some());
        h.stream_destroy(s).unwrap();
        h.vmm_release(c).unwrap();
        h.vmm_free_reservation(base, GRAN).unwrap();
    }
}
