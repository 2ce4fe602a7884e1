//! Streams: order, asynchrony, synchronisation, host callbacks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind, StreamHandle};

use super::{err, gate, host, read, MIB};

const SLOW: Duration = Duration::from_millis(100);

#[test]
fn work_on_a_stream_runs_in_order_and_asynchronously() {
    let h = host(1, MIB);
    let dev = h.malloc(4096).unwrap();
    let mut out = vec![0u8; 4096];
    // SAFETY: `dev` and `out` stay alive until the stream is synchronised.
    unsafe {
        let s = h.stream_create(0).unwrap();
        h.enqueue_kernel(s, SLOW).unwrap();
        h.enqueue_fill(s, dev, 7, 4096, SLOW).unwrap();
        h.memset_async(dev, 1, 2048, s).unwrap();
        h.memcpy_async(
            out.as_mut_ptr().cast(),
            dev,
            4096,
            CopyKind::DeviceToHost,
            s,
        )
        .unwrap();
        assert!(!h.stream_query(s).unwrap(), "the kernel is still running");
        h.stream_synchronize(s).unwrap();
        assert!(h.stream_query(s).unwrap());
        assert!(
            out[..2048].iter().all(|b| *b == 1),
            "memset ran after the fill"
        );
        assert!(out[2048..].iter().all(|b| *b == 7), "copy ran after both");
        h.stream_destroy(s).unwrap();
        h.free(dev).unwrap();
    }
}

#[test]
fn sync_copies_wait_for_the_default_stream_only() {
    let h = host(1, MIB);
    let dev = h.malloc(64).unwrap();
    // SAFETY: `dev` is live; the streams are this vendor's.
    unsafe {
        h.memset(dev, 0, 64).unwrap();
        h.enqueue_fill(StreamHandle::DEFAULT, dev, 5, 64, SLOW)
            .unwrap();
        assert_eq!(read(&h, dev, 64), vec![5; 64], "memcpy waited for the fill");
        // A blocked non-default stream does not hold up a sync copy.
        let s = h.stream_create(0).unwrap();
        let open = gate(&h, s);
        h.memset(dev, 6, 64).unwrap();
        assert_eq!(read(&h, dev, 64), vec![6; 64]);
        assert!(!h.stream_query(s).unwrap());
        drop(open);
        h.stream_synchronize(s).unwrap();
        h.stream_destroy(s).unwrap();
        h.free(dev).unwrap();
    }
}

#[test]
fn synchronize_device_waits_for_every_stream_of_the_device() {
    let h = host(2, MIB);
    let dev = h.malloc(64).unwrap();
    // SAFETY: `dev` is live until freed at the end.
    unsafe {
        let streams: Vec<_> = (0..3).map(|_| h.stream_create(0).unwrap()).collect();
        for (i, s) in streams.iter().enumerate() {
            let part = dev.cast::<u8>().add(i * 16).cast();
            h.enqueue_fill(*s, part, i as u8 + 1, 16, SLOW).unwrap();
        }
        h.set_device(1).unwrap();
        let other = h.stream_create(0).unwrap();
        let open = gate(&h, other);
        h.set_device(0).unwrap();
        h.synchronize_device().unwrap();
        assert!(
            !h.stream_query(other).unwrap(),
            "device 1 was not waited for"
        );
        drop(open);
        assert!(streams.iter().all(|s| h.stream_query(*s).unwrap()));
        assert_eq!(
            &read(&h, dev, 48)[..],
            &[[1u8; 16], [2; 16], [3; 16]].concat()[..]
        );
        for s in streams.into_iter().chain([other]) {
            h.stream_destroy(s).unwrap();
        }
        h.free(dev).unwrap();
    }
}

#[test]
fn handles_priorities_and_destroy() {
    let h = host(1, MIB);
    let range = h.stream_priority_range().unwrap();
    assert_eq!((range.least, range.greatest), (0, -5));
    let dev = h.malloc(64).unwrap();
    // SAFETY: `dev` is live; bad handles are rejected before use.
    unsafe {
        let urgent = h.stream_create(-10).unwrap();
        let lazy = h.stream_create(3).unwrap();
        let mid = h.stream_create(-2).unwrap();
        assert_eq!(h.stream_priority(urgent).unwrap(), -5);
        assert_eq!(h.stream_priority(lazy).unwrap(), 0);
        assert_eq!(h.stream_priority(mid).unwrap(), -2);
        assert_eq!(h.stream_priority(StreamHandle::DEFAULT).unwrap(), 0);
        assert_ne!(urgent.as_raw(), 0);
        // Destroy waits for queued work.
        h.enqueue_fill(urgent, dev, 9, 64, SLOW).unwrap();
        h.stream_destroy(urgent).unwrap();
        assert_eq!(read(&h, dev, 64), vec![9; 64]);
        for call in [
            h.stream_synchronize(urgent),
            h.stream_destroy(urgent),
            h.memset_async(dev, 0, 64, urgent),
            h.stream_synchronize(StreamHandle::from_raw(12345)),
            h.stream_destroy(StreamHandle::DEFAULT),
            h.enqueue_kernel(urgent, SLOW),
        ] {
            assert_eq!(err(call).0, ErrorKind::InvalidArgument);
        }
        assert_eq!(err(h.stream_query(urgent)).0, ErrorKind::InvalidArgument);
        h.stream_destroy(lazy).unwrap();
        h.stream_destroy(mid).unwrap();
        h.free(dev).unwrap();
    }
}

#[test]
fn host_callbacks_run_in_stream_order_and_survive_panics() {
    let h = host(1, MIB);
    let seen = Arc::new(Mutex::new(Vec::new()));
    // SAFETY: the stream is this vendor's and alive.
    unsafe {
        let s = h.stream_create(0).unwrap();
        for i in 0..6 {
            if i % 2 == 0 {
                h.enqueue_kernel(s, Duration::from_millis(10)).unwrap();
            }
            let seen = Arc::clone(&seen);
            h.launch_host_func(s, Box::new(move || seen.lock().unwrap().push(i)))
                .unwrap();
            if i == 2 {
                h.launch_host_func(s, Box::new(|| panic!("callback bug")))
                    .unwrap();
            }
        }
        h.stream_synchronize(s).unwrap();
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
        assert!(h.stream_query(s).unwrap());
        h.stream_destroy(s).unwrap();
    }
}

#[test]
fn free_waits_for_queued_work() {
    let h = host(1, MIB);
    let dev = h.malloc(64).unwrap();
    // SAFETY: `dev` is live when the fill is queued; free waits for it.
    unsafe {
        let s = h.stream_create(0).unwrap();
        h.enqueue_fill(s, dev, 1, 64, SLOW).unwrap();
        h.free(dev).unwrap();
        assert!(h.stream_query(s).unwrap(), "cudaFree-like implicit sync");
        h.stream_destroy(s).unwrap();
    }
    assert!(h.take_async_error().is_none());
}

#[test]
fn a_block_changed_while_a_stream_reads_it_is_reported() {
    let h = host(1, MIB);
    let dev = h.malloc(64).unwrap();
    // SAFETY: `dev` stays live; the streams are this vendor's.
    unsafe {
        h.memset(dev, 0, 64).unwrap();
        let reader = h.stream_create(0).unwrap();
        let writer = h.stream_create(0).unwrap();
        // Correct use: the reader is done before anyone writes.
        h.enqueue_expect(reader, dev, 0, 64, Duration::ZERO)
            .unwrap();
        h.stream_synchronize(reader).unwrap();
        // A bug above: the writer reuses the block without waiting.
        let open = gate(&h, reader);
        h.enqueue_expect(reader, dev, 0, 64, SLOW).unwrap();
        h.memset_async(dev, 0xAB, 64, writer).unwrap();
        h.stream_synchronize(writer).unwrap();
        drop(open);
        let (kind, message) = err(h.stream_synchronize(reader));
        assert_eq!(kind, ErrorKind::Internal);
        assert!(message.contains("0xab, not 0x00"), "{message}");
        assert!(
            err(h.synchronize_device()).1.contains("still reading"),
            "sticky"
        );
        let taken = h.take_async_error().expect("kept until taken");
        assert_eq!(taken.kind(), ErrorKind::Internal);
        h.stream_synchronize(reader).unwrap();
        h.stream_destroy(reader).unwrap();
        h.stream_destroy(writer).unwrap();
        h.free(dev).unwrap();
    }
}

/// A synchronous copy runs after everything queued on the default stream
/// before it, whether it runs on the calling thread (idle stream) or is
/// queued: another thread keeps queueing memsets of an increasing value,
/// and each copy must see at least the value queued before it started.
#[test]
fn sync_copies_never_overtake_work_queued_before_them() {
    use std::sync::atomic::{AtomicU8, Ordering};
    for schedule in [crate::Schedule::Auto, crate::Schedule::Block] {
        let h = Arc::new(
            crate::HostVendor::new(crate::HostConfig {
                devices: 1,
                memory_per_device: MIB,
                schedule,
                ..crate::HostConfig::default()
            })
            .unwrap(),
        );
        let dev = h.malloc(64).unwrap() as usize;
        // SAFETY: `dev` is 64 live device bytes.
        unsafe { h.memset(dev as *mut _, 0, 64).unwrap() };
        let queued = Arc::new(AtomicU8::new(0));
        let writer = {
            let (h, queued) = (Arc::clone(&h), Arc::clone(&queued));
            std::thread::spawn(move || {
                for value in 1..=200u8 {
                    // SAFETY: `dev` is 64 live device bytes until the end.
                    unsafe {
                        h.memset_async(dev as *mut _, value, 64, StreamHandle::DEFAULT)
                            .unwrap();
                    }
                    queued.store(value, Ordering::SeqCst);
                    if value % 16 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let mut seen = 0u8;
        while seen < 200 {
            let before = queued.load(Ordering::SeqCst);
            let mut out = [0u8; 64];
            // SAFETY: `dev` is live, `out` 64 host bytes.
            unsafe {
                h.memcpy(
                    out.as_mut_ptr().cast(),
                    dev as *const _,
                    64,
                    CopyKind::DeviceToHost,
                )
                .unwrap();
            }
            assert!(
                out.iter().all(|b| *b == out[0]),
                "{schedule:?}: a copy saw a half-done memset: {out:?}"
            );
            assert!(
                out[0] >= before,
                "{schedule:?}: the copy saw {} though memset {before} was queued before it",
                out[0]
            );
            seen = out[0];
        }
        writer.join().unwrap();
        // SAFETY: nothing uses `dev` any more.
        unsafe { h.free(dev as *mut _).unwrap() };
    }
}

#[test]
fn copies_with_pageable_memory_on_an_idle_stream_are_done_on_return() {
    // Blocking workers: a copy handed to one would still be in flight when
    // the assertions below run.
    let h = crate::HostVendor::new(crate::HostConfig {
        devices: 1,
        memory_per_device: MIB,
        schedule: crate::Schedule::Block,
        ..crate::HostConfig::default()
    })
    .unwrap();
    let dev = h.malloc(4096).unwrap();
    // SAFETY: `dev`, `page` and `pinned` stay alive until the end, and the
    // streams are synchronised before they are freed.
    unsafe {
        let s = h.stream_create(0).unwrap();
        h.memset(dev, 5, 4096).unwrap();
        // idle stream, pageable memory: finished when the call returns
        let mut page = vec![0u8; 4096];
        h.memcpy_async(
            page.as_mut_ptr().cast(),
            dev,
            4096,
            CopyKind::DeviceToHost,
            s,
        )
        .unwrap();
        assert!(
            page.iter().all(|b| *b == 5),
            "the copy to pageable memory is done"
        );
        let src = vec![6u8; 4096];
        h.memcpy_async(dev, src.as_ptr().cast(), 4096, CopyKind::HostToDevice, s)
            .unwrap();
        assert!(h.stream_query(s).unwrap(), "nothing is left queued");
        assert!(read(&h, dev, 4096).iter().all(|b| *b == 6));
        // pinned memory stays asynchronous: behind a slow kernel it is queued
        let pinned = h.malloc_host(4096).unwrap();
        h.enqueue_kernel(s, SLOW).unwrap();
        h.memcpy_async(pinned, dev, 4096, CopyKind::DeviceToHost, s)
            .unwrap();
        assert!(
            !h.stream_query(s).unwrap(),
            "the copy waits behind the kernel"
        );
        // and a pageable copy on a busy stream is queued as well
        h.memcpy_async(
            page.as_mut_ptr().cast(),
            dev,
            4096,
            CopyKind::DeviceToHost,
            s,
        )
        .unwrap();
        assert!(
            !h.stream_query(s).unwrap(),
            "the host did not wait for the kernel"
        );
        h.stream_synchronize(s).unwrap();
        let pinned_bytes = std::slice::from_raw_parts(pinned as *const u8, 4096);
        assert!(pinned_bytes.iter().all(|b| *b == 6) && page.iter().all(|b| *b == 6));
        h.free_host(pinned).unwrap();
        h.stream_destroy(s).unwrap();
        h.free(dev).unwrap();
    }
}
