//! The stream layer on the host vendor: pools, current streams, guards,
//! events and cross-stream ordering, checked by causality, not by timing.

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind};
use dipu_stream::{
    DeviceContext, DeviceGuard, Event, EventFlag, MultiStreamGuard, OptionalDeviceGuard,
    StreamGuard, StreamKind, STREAMS_PER_POOL,
};
use dipu_vendor_host::{HostConfig, HostVendor};

fn setup() -> (Arc<HostVendor>, &'static DeviceContext) {
    let vendor = Arc::new(HostVendor::new(HostConfig::default()).expect("host vendor"));
    let ctx = DeviceContext::new(vendor.clone()).expect("context");
    (vendor, ctx)
}

/// Device memory of `bytes` on `device`, freed on drop.
struct DeviceBuffer<'a> {
    ctx: &'a DeviceContext,
    ptr: *mut c_void,
}

impl<'a> DeviceBuffer<'a> {
    fn new(ctx: &'a DeviceContext, device: i32, bytes: usize) -> Self {
        let _guard = DeviceGuard::new(ctx, device).unwrap();
        DeviceBuffer {
            ctx,
            ptr: ctx.api().malloc(bytes).unwrap(),
        }
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by this vendor in `new` and freed once.
        unsafe { self.ctx.api().free(self.ptr) }.unwrap();
    }
}

/// Holds `stream` until the returned gate is dropped or sent to: work queued
/// behind it stays pending for as long as the test needs, however slow the machine.
fn hold(ctx: &DeviceContext, stream: &dipu_stream::Stream) -> mpsc::Sender<()> {
    let (gate, wait) = mpsc::channel::<()>();
    // SAFETY: pooled and default streams live for the process.
    unsafe {
        ctx.api()
            .launch_host_func(stream.raw(), Box::new(move || _ = wait.recv()))
            .unwrap()
    };
    gate
}

#[test]
fn pools_hand_out_32_streams_round_robin_per_priority() {
    let (vendor, ctx) = setup();
    let normal: Vec<_> = (0..STREAMS_PER_POOL + 1)
        .map(|_| ctx.stream_from_pool(1, false).unwrap())
        .collect();
    let distinct: HashSet<_> = normal[..STREAMS_PER_POOL].iter().collect();
    assert_eq!(distinct.len(), STREAMS_PER_POOL);
    assert_eq!(
        normal[STREAMS_PER_POOL], normal[0],
        "the 33rd stream is the first again"
    );
    assert!(normal.iter().all(|s| s.device() == 1
        && s.id().kind()
            == StreamKind::Pool {
                high_priority: false
            }));
    let high = ctx.stream_from_pool(1, true).unwrap();
    assert_eq!(
        high.id().kind(),
        StreamKind::Pool {
            high_priority: true
        }
    );
    assert!(!distinct.contains(&high));
    let greatest = vendor.stream_priority_range().unwrap().greatest;
    // SAFETY: pooled streams of this vendor live for the process.
    unsafe {
        assert_eq!(vendor.stream_priority(high.raw()).unwrap(), greatest);
        assert_eq!(vendor.stream_priority(normal[0].raw()).unwrap(), 0);
    }
    let own = ctx.new_stream(0, -100).unwrap();
    assert_eq!(own.id().kind(), StreamKind::Created);
    // SAFETY: as above.
    let own_priority = unsafe { vendor.stream_priority(own.raw()) }.unwrap();
    assert_eq!(own_priority, greatest, "clamped");
    assert_eq!(
        ctx.stream_from_pool(2, false).unwrap_err().kind(),
        ErrorKind::InvalidDevice
    );
    assert_eq!(
        ctx.new_stream(-1, 0).unwrap_err().kind(),
        ErrorKind::InvalidDevice
    );
}

#[test]
fn pooled_streams_run_concurrently() {
    // Stream a's work waits for a signal that only stream b's later work
    // sends: it finishes only if the two streams really run side by side.
    let (_, ctx) = setup();
    let a = ctx.stream_from_pool(0, false).unwrap();
    let b = ctx.stream_from_pool(0, false).unwrap();
    assert_ne!(a, b);
    let (tx, rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<bool>();
    // SAFETY: pooled streams live for the process.
    unsafe {
        ctx.api()
            .launch_host_func(
                a.raw(),
                Box::new(move || {
                    done_tx
                        .send(rx.recv_timeout(Duration::from_secs(20)).is_ok())
                        .unwrap()
                }),
            )
            .unwrap();
        ctx.api()
            .launch_host_func(b.raw(), Box::new(move || tx.send(()).unwrap()))
            .unwrap();
    }
    assert!(
        done_rx.recv().unwrap(),
        "stream a never saw stream b's signal: the streams are serialised"
    );
    a.synchronize().unwrap();
    b.synchronize().unwrap();
}

#[test]
fn a_stream_waiting_on_an_event_sees_the_other_streams_writes() {
    let (vendor, ctx) = setup();
    for (producer_device, consumer_device) in [(0, 0), (0, 1)] {
        let producer = ctx.stream_from_pool(producer_device, false).unwrap();
        let consumer = ctx.stream_from_pool(consumer_device, true).unwrap();
        let buf = DeviceBuffer::new(ctx, producer_device, 1 << 16);
        let mut host = vec![0u8; 1 << 16];
        let mut written = Event::new(ctx, EventFlag::NoTiming);
        {
            let _g = StreamGuard::new(producer).unwrap();
            // SAFETY: buf is live device memory of the producer's device.
            unsafe {
                vendor.enqueue_fill(
                    producer.raw(),
                    buf.ptr,
                    7,
                    1 << 16,
                    Duration::from_millis(50),
                )
            }
            .unwrap();
        }
        written.record(&producer).unwrap();
        consumer.wait(&written).unwrap();
        {
            let _g = StreamGuard::new(consumer).unwrap();
            // SAFETY: both buffers are live and outlive the synchronize below.
            unsafe {
                ctx.api()
                    .memcpy_async(
                        host.as_mut_ptr().cast(),
                        buf.ptr,
                        host.len(),
                        CopyKind::DeviceToHost,
                        consumer.raw(),
                    )
                    .unwrap()
            };
        }
        consumer.synchronize().unwrap();
        assert!(
            host.iter().all(|&b| b == 7),
            "device {consumer_device} read before the write on device {producer_device}"
        );
    }
}

#[test]
fn current_stream_is_per_thread_and_per_device() {
    let (_, ctx) = setup();
    assert_eq!(
        ctx.current_stream(0).unwrap(),
        ctx.default_stream(0).unwrap()
    );
    let s = ctx.stream_from_pool(1, false).unwrap();
    ctx.set_current_stream(s);
    assert_eq!(ctx.current_stream(1).unwrap(), s);
    assert_eq!(
        ctx.current_stream(0).unwrap(),
        ctx.default_stream(0).unwrap(),
        "device 0 unchanged"
    );
    assert_eq!(
        ctx.current_device().unwrap(),
        0,
        "setting a stream does not change the device"
    );
    std::thread::scope(|scope| {
        scope.spawn(|| {
            assert_eq!(
                ctx.current_stream(1).unwrap(),
                ctx.default_stream(1).unwrap(),
                "a new thread starts at defaults"
            );
            assert_eq!(ctx.current_device().unwrap(), 0);
        });
    });
    assert_eq!(
        ctx.current_stream(5).unwrap_err().kind(),
        ErrorKind::InvalidDevice
    );
}

#[test]
fn guards_restore_device_and_streams_even_on_panic() {
    let (_, ctx) = setup();
    let s1 = ctx.stream_from_pool(1, false).unwrap();
    let s0 = ctx.stream_from_pool(0, true).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _device = DeviceGuard::new(ctx, 1).unwrap();
        let _stream = StreamGuard::new(s0).unwrap();
        let _multi = MultiStreamGuard::new(&[s1]);
        assert_eq!(
            ctx.current_device().unwrap(),
            0,
            "the stream guard moved to s0's device"
        );
        assert_eq!(ctx.current_stream(0).unwrap(), s0);
        assert_eq!(ctx.current_stream(1).unwrap(), s1);
        panic!("unwinding through three guards");
    }));
    assert!(result.is_err());
    assert_eq!(ctx.current_device().unwrap(), 0);
    assert_eq!(
        ctx.current_stream(0).unwrap(),
        ctx.default_stream(0).unwrap()
    );
    assert_eq!(
        ctx.current_stream(1).unwrap(),
        ctx.default_stream(1).unwrap()
    );

    ctx.set_device(1).unwrap();
    {
        let mut g = DeviceGuard::new(ctx, 0).unwrap();
        assert_eq!((g.original_device(), g.current_device()), (1, 0));
        g.set_index(1).unwrap();
        g.set_index(0).unwrap();
    }
    assert_eq!(ctx.current_device().unwrap(), 1);
    assert_eq!(
        DeviceGuard::new(ctx, 9).unwrap_err().kind(),
        ErrorKind::InvalidDevice
    );
    assert_eq!(
        ctx.current_device().unwrap(),
        1,
        "a failed guard changes nothing"
    );
    {
        let mut g = OptionalDeviceGuard::new(ctx, None).unwrap();
        assert_eq!(g.original_device(), None);
        g.set_index(0).unwrap();
        assert_eq!(
            (g.original_device(), g.current_device()),
            (Some(1), Some(0))
        );
        g.reset();
        assert_eq!(ctx.current_device().unwrap(), 1, "reset restores at once");
        g.set_index(0).unwrap();
    }
    assert_eq!(ctx.current_device().unwrap(), 1);
    ctx.set_device(0).unwrap();
}

#[test]
fn events_are_created_lazily_on_the_recording_streams_device() {
    let (_, ctx) = setup();
    let mut e = Event::new(ctx, EventFlag::NoTiming);
    assert_eq!((e.device(), e.was_recorded()), (None, false));
    assert!(e.query().unwrap(), "a never-recorded event is complete");
    e.synchronize().unwrap();
    e.block(&ctx.default_stream(0).unwrap()).unwrap();
    let s1 = ctx.stream_from_pool(1, false).unwrap();
    let gate = hold(ctx, &s1);
    e.record(&s1).unwrap();
    assert_eq!(e.device(), Some(1));
    assert!(!e.query().unwrap(), "pending while the stream is held");
    let wrong = e
        .record(&ctx.stream_from_pool(0, false).unwrap())
        .unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::InvalidArgument);
    assert!(
        wrong.message().contains("device 1") && wrong.message().contains("device 0"),
        "{wrong}"
    );
    drop(gate);
    e.synchronize().unwrap();
    assert!(e.query().unwrap());
    assert_eq!(
        ctx.current_device().unwrap(),
        0,
        "recording on device 1 restored device 0"
    );
}

#[test]
fn timing_events_measure_simulated_kernels() {
    let (vendor, ctx) = setup();
    let s = ctx.stream_from_pool(0, false).unwrap();
    let mut start = Event::new(ctx, EventFlag::Timing);
    let mut end = Event::new(ctx, EventFlag::Timing);
    start.record(&s).unwrap();
    // SAFETY: pooled streams live for the process.
    unsafe { vendor.enqueue_kernel(s.raw(), Duration::from_millis(30)) }.unwrap();
    end.record(&s).unwrap();
    end.synchronize().unwrap();
    let ms = start.elapsed_time(&end).unwrap();
    assert!(ms >= 29.0, "a 30 ms kernel measured {ms} ms");
    let plain = Event::new(ctx, EventFlag::NoTiming);
    assert_eq!(
        start.elapsed_time(&plain).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn pooled_events_are_reused_and_order_streams() {
    let (_, ctx) = setup();
    let first = ctx.pooled_event(1).unwrap().raw();
    let again = ctx.pooled_event(1).unwrap();
    assert_eq!(again.raw(), first, "a returned event is handed out again");
    let s = ctx.stream_from_pool(1, false).unwrap();
    let other = ctx.pooled_event(1).unwrap();
    assert_ne!(
        other.raw(),
        again.raw(),
        "a held event is not handed out twice"
    );
    let gate = hold(ctx, &s);
    again.record(&s).unwrap();
    assert!(!again.query().unwrap());
    let default0 = ctx.default_stream(0).unwrap();
    again.block(&default0).unwrap();
    assert!(
        !default0.query().unwrap(),
        "device 0's default stream waits for the held stream"
    );
    drop(gate);
    default0.synchronize().unwrap();
    assert!(
        again.query().unwrap(),
        "device 0's default stream waited for device 1's kernel"
    );
    assert_eq!(
        again
            .record(&ctx.default_stream(0).unwrap())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        ctx.pooled_event(2).unwrap_err().kind(),
        ErrorKind::InvalidDevice
    );
}

#[test]
fn stress_threads_share_pooled_streams_and_events() {
    // Eight threads, each 40 rounds: fill a buffer on one pooled stream
    // (slowly), hand it over through an event to another pooled stream of
    // another device, copy it back and check every byte.
    let (vendor, ctx) = setup();
    std::thread::scope(|scope| {
        for t in 0..8u8 {
            let vendor = &vendor;
            scope.spawn(move || {
                let device = i32::from(t % 2);
                let buf = DeviceBuffer::new(ctx, device, 4096);
                let mut host = vec![0u8; 4096];
                let mut ready = Event::new(ctx, EventFlag::NoTiming);
                for round in 0..40u8 {
                    let value = t.wrapping_mul(31).wrapping_add(round);
                    let producer = ctx.stream_from_pool(device, round % 3 == 0).unwrap();
                    let consumer = ctx.stream_from_pool(1 - device, false).unwrap();
                    {
                        let _g = StreamGuard::new(producer).unwrap();
                        // SAFETY: buf is live device memory of `device`.
                        unsafe {
                            vendor.enqueue_fill(
                                producer.raw(),
                                buf.ptr,
                                value,
                                4096,
                                Duration::from_micros(200),
                            )
                        }
                        .unwrap();
                    }
                    if ready.device().is_some_and(|d| d != device) {
                        ready = Event::new(ctx, EventFlag::NoTiming);
                    }
                    ready.record(&producer).unwrap();
                    consumer.wait(&ready).unwrap();
                    let _g = StreamGuard::new(consumer).unwrap();
                    // SAFETY: both buffers outlive the synchronize below.
                    unsafe {
                        ctx.api()
                            .memcpy_async(
                                host.as_mut_ptr().cast(),
                                buf.ptr,
                                4096,
                                CopyKind::DeviceToHost,
                                consumer.raw(),
                            )
                            .unwrap()
                    };
                    consumer.synchronize().unwrap();
                    assert!(
                        host.iter().all(|&b| b == value),
                        "thread {t} round {round}: stale data"
                    );
                    // The next round's fill must not overwrite before this copy ran: it did (synchronized).
                }
                ctx.synchronize_device(device).unwrap();
            });
        }
    });
    assert!(vendor.take_async_error().is_none());
}

#[test]
fn two_contexts_keep_separate_current_devices() {
    let (_, a) = setup();
    let (_, b) = setup();
    a.set_device(1).unwrap();
    assert_eq!(b.current_device().unwrap(), 0, "b is untouched by a");
    b.set_device(1).unwrap();
    b.set_device(0).unwrap();
    assert_eq!(
        a.current_device().unwrap(),
        1,
        "a kept its device while b was used"
    );
    {
        let _ga = DeviceGuard::new(a, 0).unwrap();
        let _gb = DeviceGuard::new(b, 1).unwrap();
        assert_eq!(
            (a.current_device().unwrap(), b.current_device().unwrap()),
            (0, 1)
        );
    }
    assert_eq!(
        (a.current_device().unwrap(), b.current_device().unwrap()),
        (1, 0)
    );
    assert_eq!(a.api().current_device().unwrap(), 1, "the vendor agrees");
    a.set_device(0).unwrap();
}
