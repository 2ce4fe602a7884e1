//! Events: query, host wait, timing, cross-stream waits.

use std::time::Duration;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind, EventHandle, StreamHandle};

use super::{err, gate, host, read, MIB};

const KERNEL: Duration = Duration::from_millis(50);

#[test]
fn query_and_synchronize_follow_the_last_record() {
    let h = host(1, MIB);
    // SAFETY: streams and events are this vendor's and alive.
    unsafe {
        let s = h.stream_create(0).unwrap();
        let e = h.event_create(false).unwrap();
        assert!(h.event_query(e).unwrap(), "never recorded counts as done");
        h.event_synchronize(e).unwrap();
        let open = gate(&h, s);
        h.event_record(e, s).unwrap();
        assert!(!h.event_query(e).unwrap());
        drop(open);
        h.event_synchronize(e).unwrap();
        assert!(h.event_query(e).unwrap());
        // Re-recording replaces the capture.
        let open = gate(&h, s);
        h.event_record(e, s).unwrap();
        assert!(!h.event_query(e).unwrap());
        drop(open);
        h.event_synchronize(e).unwrap();
        assert!(h.event_query(e).unwrap());
        h.event_destroy(e).unwrap();
        h.stream_destroy(s).unwrap();
    }
}

/// An event and its stream agree: once the event recorded last is done the
/// stream is idle, and once the stream is synchronised the event is done.
/// (They used to be two counters, set one after the other by the worker,
/// so a host could see the event done and the stream still busy.)
#[test]
fn an_event_done_means_its_stream_is_idle_and_back() {
    let h = host(1, MIB);
    // SAFETY: streams and events are this vendor's and alive.
    unsafe {
        let s = h.stream_create(0).unwrap();
        let e = h.event_create(true).unwrap();
        for round in 0..3000 {
            h.launch_host_func(s, Box::new(|| {})).unwrap();
            h.event_record(e, s).unwrap();
            if round % 2 == 0 {
                h.event_synchronize(e).unwrap();
                assert!(
                    h.stream_query(s).unwrap(),
                    "round {round}: event done, stream busy"
                );
            } else {
                h.stream_synchronize(s).unwrap();
                assert!(
                    h.event_query(e).unwrap(),
                    "round {round}: stream idle, event not done"
                );
                h.event_elapsed_ms(e, e).unwrap();
            }
        }
        h.event_destroy(e).unwrap();
        h.stream_destroy(s).unwrap();
    }
}

#[test]
fn elapsed_time_covers_the_kernel() {
    let h = host(1, MIB);
    // SAFETY: streams and events are this vendor's and alive.
    unsafe {
        let (start, end) = (h.event_create(true).unwrap(), h.event_create(true).unwrap());
        h.event_record(start, StreamHandle::DEFAULT).unwrap();
        h.enqueue_kernel(StreamHandle::DEFAULT, KERNEL).unwrap();
        h.event_record(end, StreamHandle::DEFAULT).unwrap();
        h.event_synchronize(end).unwrap();
        let ms = h.event_elapsed_ms(start, end).unwrap();
        assert!(ms >= KERNEL.as_secs_f32() * 1e3, "{ms} ms");
        let back = h.event_elapsed_ms(end, start).unwrap();
        assert!(back <= -KERNEL.as_secs_f32() * 1e3, "negative: {back} ms");
        h.event_destroy(start).unwrap();
        h.event_destroy(end).unwrap();
    }
}

#[test]
fn elapsed_time_errors() {
    let h = host(1, MIB);
    // SAFETY: streams and events are this vendor's; bad handles are rejected.
    unsafe {
        let s = h.stream_create(0).unwrap();
        let timed = h.event_create(true).unwrap();
        let plain = h.event_create(false).unwrap();
        let unrecorded = h.event_create(true).unwrap();
        h.event_record(timed, s).unwrap();
        h.event_record(plain, s).unwrap();
        h.stream_synchronize(s).unwrap();
        let (kind, message) = err(h.event_elapsed_ms(timed, plain));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(message.contains("without timing"), "{message}");
        let (kind, message) = err(h.event_elapsed_ms(timed, unrecorded));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(message.contains("never recorded"), "{message}");
        let open = gate(&h, s);
        h.event_record(unrecorded, s).unwrap();
        assert_eq!(
            err(h.event_elapsed_ms(timed, unrecorded)).0,
            ErrorKind::NotReady
        );
        drop(open);
        h.event_synchronize(unrecorded).unwrap();
        assert!(h.event_elapsed_ms(timed, unrecorded).unwrap() >= 0.0);
        h.event_destroy(plain).unwrap();
        let gone = [
            h.event_query(plain).map(drop),
            h.event_synchronize(plain),
            h.event_record(plain, s),
            h.event_destroy(plain),
            h.event_elapsed_ms(timed, plain).map(drop),
            h.stream_wait_event(s, plain),
            h.event_query(EventHandle::from_raw(999)).map(drop),
        ];
        for call in gone {
            assert_eq!(err(call).0, ErrorKind::InvalidArgument);
        }
        h.stream_destroy(s).unwrap();
    }
}

#[test]
fn destroying_an_event_with_a_pending_record_is_safe() {
    let h = host(1, MIB);
    // SAFETY: streams and events are this vendor's and alive.
    unsafe {
        let s = h.stream_create(0).unwrap();
        let e = h.event_create(true).unwrap();
        let other = h.stream_create(0).unwrap();
        let open = gate(&h, s);
        h.event_record(e, s).unwrap();
        h.stream_wait_event(other, e).unwrap();
        h.event_destroy(e).unwrap();
        drop(open);
        h.stream_synchronize(s).unwrap();
        h.stream_synchronize(other).unwrap();
        h.stream_destroy(s).unwrap();
        h.stream_destroy(other).unwrap();
    }
}

#[test]
fn record_needs_a_stream_of_the_events_device() {
    let h = host(2, MIB);
    // SAFETY: streams and events are this vendor's and alive.
    unsafe {
        let e = h.event_create(false).unwrap();
        h.set_device(1).unwrap();
        let (kind, message) = err(h.event_record(e, StreamHandle::DEFAULT));
        assert_eq!(kind, ErrorKind::InvalidArgument);
        assert!(message.contains("belongs to device 0"), "{message}");
        assert!(
            h.event_query(e).unwrap(),
            "a failed record leaves no capture"
        );
        h.event_destroy(e).unwrap();
    }
}

#[test]
fn stream_wait_event_orders_streams() {
    let h = host(1, MIB);
    let dev = h.malloc(4096).unwrap();
    let mut out = vec![0u8; 4096];
    // SAFETY: `dev` and `out` stay alive until the streams are synchronised.
    unsafe {
        h.memset(dev, 0, 4096).unwrap();
        let (a, b) = (h.stream_create(0).unwrap(), h.stream_create(0).unwrap());
        let e = h.event_create(false).unwrap();
        h.enqueue_fill(a, dev, 9, 4096, KERNEL).unwrap();
        h.event_record(e, a).unwrap();
        h.stream_wait_event(b, e).unwrap();
        h.memcpy_async(
            out.as_mut_ptr().cast(),
            dev,
            4096,
            CopyKind::DeviceToHost,
            b,
        )
        .unwrap();
        // The host does not wait.
        assert!(!h.stream_query(b).unwrap());
        h.stream_synchronize(b).unwrap();
        assert!(out.iter().all(|x| *x == 9), "b's copy saw a's fill");
        // A later record does not affect a wait already queued.
        let open = gate(&h, a);
        h.enqueue_fill(a, dev, 1, 4096, Duration::ZERO).unwrap();
        h.stream_wait_event(b, e).unwrap(); // e's last record is done
        h.memcpy_async(
            out.as_mut_ptr().cast(),
            dev,
            4096,
            CopyKind::DeviceToHost,
            b,
        )
        .unwrap();
        h.stream_synchronize(b).unwrap();
        assert!(
            out.iter().all(|x| *x == 9),
            "the gated fill has not run yet"
        );
        drop(open);
        h.stream_synchronize(a).unwrap();
        for s in [a, b] {
            h.stream_destroy(s).unwrap();
        }
        h.event_destroy(e).unwrap();
        h.free(dev).unwrap();
    }
}

#[test]
fn a_missed_wait_shows_stale_data() {
    let h = host(1, MIB);
    let dev = h.malloc(64).unwrap();
    // SAFETY: `dev` is live; the streams are this vendor's.
    unsafe {
        h.memset(dev, 0, 64).unwrap();
        let (a, b) = (h.stream_create(0).unwrap(), h.stream_create(0).unwrap());
        let open = gate(&h, a);
        h.enqueue_fill(a, dev, 9, 64, Duration::ZERO).unwrap();
        let mut out = [0xFFu8; 64];
        h.memcpy_async(out.as_mut_ptr().cast(), dev, 64, CopyKind::DeviceToHost, b)
            .unwrap();
        h.stream_synchronize(b).unwrap();
        assert_eq!(out, [0; 64], "without a wait, b runs before a's fill");
        drop(open);
        h.stream_synchronize(a).unwrap();
        assert_eq!(read(&h, dev, 64), vec![9; 64]);
        h.stream_destroy(a).unwrap();
        h.stream_destroy(b).unwrap();
        h.free(dev).unwrap();
    }
}

#[test]
fn waits_work_across_devices() {
    let h = host(2, MIB);
    let on0 = h.malloc(64).unwrap();
    // SAFETY: all memory, streams and events are live.
    unsafe {
        h.memset(on0, 0, 64).unwrap();
        let a = h.stream_create(0).unwrap();
        let e = h.event_create(false).unwrap();
        h.enqueue_fill(a, on0, 4, 64, KERNEL).unwrap();
        h.event_record(e, a).unwrap();
        h.set_device(1).unwrap();
        let on1 = h.malloc(64).unwrap();
        let b = h.stream_create(0).unwrap();
        h.stream_wait_event(b, e).unwrap();
        h.memcpy_peer_async(on1, 1, on0, 0, 64, b).unwrap();
        h.stream_synchronize(b).unwrap();
        assert_eq!(read(&h, on1, 64), vec![4; 64]);
        h.stream_destroy(b).unwrap();
        h.free(on1).unwrap();
        h.set_device(0).unwrap();
        h.stream_destroy(a).unwrap();
        h.event_destroy(e).unwrap();
        h.free(on0).unwrap();
    }
}
