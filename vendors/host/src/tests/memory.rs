//! Devices, budgets, the allocation registry and checked copies.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind, StreamHandle};

use super::{err, host, read, MIB};
use crate::{HostConfig, HostVendor};

#[test]
fn identity_and_properties() {
    let h = host(3, 512 * MIB);
    assert_eq!(h.name(), "host");
    assert_eq!(
        h.version(),
        format!(
            "dipu host vendor {} (simulated, 3 devices x 512 MiB)",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(h.device_count().unwrap(), 3);
    let p = h.device_properties(2).unwrap();
    assert_eq!(p.name, "dipu host device 2");
    assert_eq!(p.total_memory, 512 * MIB);
    assert_eq!((p.major, p.minor), (1, 0));
    assert!(p.multiprocessor_count >= 1);
    assert_eq!(err(h.device_properties(3)).0, ErrorKind::InvalidDevice);
    assert_eq!(err(h.device_properties(-1)).0, ErrorKind::InvalidDevice);
    assert!(h
        .capabilities()
        .contains(dipu_deviceapi::Capabilities::VIRTUAL_MEMORY));
    assert!(h
        .capabilities()
        .contains(dipu_deviceapi::Capabilities::COLLECTIVES));
    assert_eq!(h.comm_unique_id_size(), 128);
    assert_eq!(h.comm_get_unique_id().unwrap().len(), 128);
}

#[test]
fn current_device_is_per_thread_and_per_vendor() {
    let h = host(2, MIB);
    let other = host(1, MIB);
    assert_eq!(h.current_device().unwrap(), 0);
    h.set_device(1).unwrap();
    assert_eq!(h.current_device().unwrap(), 1);
    assert_eq!(other.current_device().unwrap(), 0);
    let (kind, message) = err(h.set_device(2));
    assert_eq!(kind, ErrorKind::InvalidDevice);
    assert!(message.contains("0..2"), "{message}");
    assert_eq!(h.current_device().unwrap(), 1, "unchanged after an error");
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(h.current_device().unwrap(), 0));
    });
}

#[test]
fn oom_at_capacity_and_free_returns_budget() {
    let h = host(2, MIB);
    let a = h.malloc(512 * 1024).unwrap();
    let b = h.malloc(512 * 1024).unwrap();
    assert_eq!(a as usize % 256, 0, "256-byte aligned");
    let info = h.memory_info().unwrap();
    assert_eq!((info.free, info.total), (0, MIB));
    let (kind, message) = err(h.malloc(100));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    for part in [
        "device 0",
        "100 bytes",
        "1.00 MiB in use",
        "1.00 MiB capacity",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message}");
    }
    h.set_device(1).unwrap();
    let c = h.malloc(MIB as usize).expect("device 1 has its own budget");
    assert_eq!(h.memory_info().unwrap().free, 0);
    // SAFETY: every pointer is a live allocation of this vendor.
    unsafe {
        h.free(c).unwrap();
        assert_eq!(h.memory_info().unwrap().free, MIB);
        h.set_device(0).unwrap();
        h.free(a).unwrap();
        assert_eq!(h.memory_info().unwrap().free, 512 * 1024);
        let d = h.malloc(512 * 1024).expect("budget came back");
        h.free(b).unwrap();
        h.free(d).unwrap();
    }
    assert_eq!(h.memory_used(0).unwrap(), 0);
}

#[test]
fn zero_and_impossible_sizes() {
    let h = host(1, MIB);
    assert!(h.malloc(0).unwrap().is_null());
    assert!(h.malloc_host(0).unwrap().is_null());
    assert_eq!(err(h.malloc(usize::MAX)).0, ErrorKind::OutOfMemory);
    assert_eq!(err(h.malloc_host(usize::MAX)).0, ErrorKind::OutOfMemory);
    let huge = HostVendor::new(HostConfig {
        devices: 1,
        memory_per_device: u64::MAX,
        ..HostConfig::default()
    })
    .unwrap();
    assert_eq!(err(huge.malloc(usize::MAX)).0, ErrorKind::OutOfMemory);
    assert_eq!(err(huge.malloc(usize::MAX / 2)).0, ErrorKind::OutOfMemory);
    let (kind, message) = err(huge.malloc(1 << 60));
    assert_eq!(kind, ErrorKind::OutOfMemory);
    assert!(message.contains("host allocator"), "{message}");
    assert_eq!(
        huge.memory_used(0).unwrap(),
        0,
        "failed mallocs cost nothing"
    );
    // SAFETY: null is always accepted by free.
    unsafe {
        h.free(std::ptr::null_mut()).unwrap();
        h.free_host(std::ptr::null_mut()).unwrap();
    }
}

#[test]
fn bad_frees_are_rejected() {
    let h = host(1, MIB);
    let dev = h.malloc(1024).unwrap();
    let pinned = h.malloc_host(1024).unwrap();
    let mut local = 0u64;
    // SAFETY: the vendor checks the pointers; none of the bad ones is
    // dereferenced.
    unsafe {
        let interior = dev.cast::<u8>().add(16).cast::<c_void>();
        let (kind, message) = err(h.free(interior));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(message.contains("16 bytes inside"), "{message}");
        let stack = (&raw mut local).cast::<c_void>();
        let (kind, message) = err(h.free(stack));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(
            message.contains("double free or unknown pointer"),
            "{message}"
        );
        assert!(err(h.free(pinned)).1.contains("free_host"));
        assert!(err(h.free_host(dev)).1.contains("device memory"));
        h.free(dev).unwrap();
        let (kind, message) = err(h.free(dev));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(
            message.contains("double free or unknown pointer"),
            "{message}"
        );
        h.free_host(pinned).unwrap();
        assert!(err(h.free_host(pinned)).1.contains("double free"));
    }
}

#[test]
fn copies_round_trip_and_pinned_memory_is_host_memory() {
    let h = host(1, MIB);
    let dev = h.malloc(256).unwrap();
    let dev2 = h.malloc(256).unwrap();
    let pinned = h.malloc_host(256).unwrap();
    let src: Vec<u8> = (0..=255).collect();
    // SAFETY: all ranges are live and 256 bytes long.
    unsafe {
        h.memcpy(dev, src.as_ptr().cast(), 256, CopyKind::HostToDevice)
            .unwrap();
        h.memcpy(dev2, dev, 256, CopyKind::DeviceToDevice).unwrap();
        h.memcpy(pinned, dev2, 256, CopyKind::DeviceToHost).unwrap();
        assert_eq!(
            std::slice::from_raw_parts(pinned.cast::<u8>(), 256),
            &src[..]
        );
        h.memset(dev2.cast::<u8>().add(128).cast(), 0, 128).unwrap();
        assert_eq!(read(&h, dev2, 256)[..128], src[..128]);
        assert!(read(&h, dev2, 256)[128..].iter().all(|b| *b == 0));
        let mut out = [0u8; 4];
        h.memcpy(out.as_mut_ptr().cast(), pinned, 4, CopyKind::HostToHost)
            .unwrap();
        assert_eq!(out, [0, 1, 2, 3]);
        h.free(dev).unwrap();
        h.free(dev2).unwrap();
        h.free_host(pinned).unwrap();
    }
}

#[test]
fn out_of_range_and_wrong_kind_copies_are_rejected() {
    let h = host(1, MIB);
    let dev = h.malloc(64).unwrap();
    let pinned = h.malloc_host(64).unwrap();
    let mut buf = [0u8; 128];
    let host_ptr = buf.as_mut_ptr().cast::<c_void>();
    let expect_bad = |r: dipu_deviceapi::Result<()>, needle: &str| {
        let (kind, message) = err(r);
        assert_eq!(kind, ErrorKind::InvalidArgument, "{message}");
        assert!(
            message.contains(needle),
            "{needle:?} missing from {message}"
        );
    };
    // SAFETY: every call is rejected before memory is touched.
    unsafe {
        let hex = format!("{:#x}", dev as usize);
        expect_bad(h.memcpy(dev, host_ptr, 65, CopyKind::HostToDevice), &hex);
        expect_bad(
            h.memcpy(dev, host_ptr, 65, CopyKind::HostToDevice),
            "+65 bytes",
        );
        expect_bad(
            h.memcpy(host_ptr, dev, 65, CopyKind::DeviceToHost),
            "source",
        );
        let tail = dev.cast::<u8>().add(32).cast::<c_void>();
        expect_bad(h.memset(tail, 1, 33), "past the end");
        expect_bad(
            h.memset_async(tail, 1, 33, StreamHandle::DEFAULT),
            "past the end",
        );
        // Wrong direction: a host buffer passed as the device side.
        expect_bad(
            h.memcpy(host_ptr, dev, 8, CopyKind::DeviceToDevice),
            "wrong CopyKind",
        );
        expect_bad(
            h.memcpy(pinned, host_ptr, 8, CopyKind::HostToDevice),
            "pinned host memory",
        );
        expect_bad(h.memset(std::ptr::null_mut(), 0, 8), "null");
        expect_bad(
            h.memcpy(host_ptr, std::ptr::null(), 8, CopyKind::HostToHost),
            "null",
        );
        // Zero bytes is a no-op, even with null pointers.
        h.memset(std::ptr::null_mut(), 0, 0).unwrap();
        h.memcpy(
            std::ptr::null_mut(),
            std::ptr::null(),
            0,
            CopyKind::DeviceToDevice,
        )
        .unwrap();
        h.memcpy(dev, host_ptr, 64, CopyKind::HostToDevice).unwrap();
        h.free(dev).unwrap();
        expect_bad(
            h.memcpy(host_ptr, dev, 8, CopyKind::DeviceToHost),
            "already freed",
        );
        h.free_host(pinned).unwrap();
    }
    assert!(h.take_async_error().is_none());
}

#[test]
fn peer_copies_check_each_side_against_its_device() {
    let h = host(2, MIB);
    let on0 = h.malloc(64).unwrap();
    h.set_device(1).unwrap();
    let on1 = h.malloc(64).unwrap();
    // SAFETY: both ranges are live 64-byte device allocations.
    unsafe {
        h.memset(on0, 3, 64).unwrap();
        h.memcpy_peer(on1, 1, on0, 0, 64).unwrap();
        assert_eq!(read(&h, on1, 64), vec![3; 64]);
        h.memset(on1, 4, 64).unwrap();
        h.memcpy_peer_async(on0, 0, on1, 1, 32, StreamHandle::DEFAULT)
            .unwrap();
        h.synchronize_device().unwrap();
        let back = read(&h, on0, 64);
        assert_eq!((back[0], back[31], back[32]), (4, 4, 3));
        let (kind, message) = err(h.memcpy_peer(on1, 0, on0, 0, 8));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(
            message.contains("memory of device 1, not of device 0"),
            "{message}"
        );
        assert_eq!(
            err(h.memcpy_peer(on1, 5, on0, 0, 8)).0,
            ErrorKind::InvalidDevice
        );
        h.free(on1).unwrap();
        h.free(on0).unwrap();
    }
}
