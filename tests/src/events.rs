//! Events: ordering work across streams, queries, re-recording, timing and
//! its errors.

use std::time::Instant;

use dipu_deviceapi::ErrorKind;

use crate::check::{compare, ensure, expect_err, During, Verdict};
use crate::resources::{DeviceBuffer, Gate, HostBuffer, OwnedEvent, OwnedStream};
use crate::{Check, Ctx};

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new("events::cross_stream_wait", cross_stream_wait),
        Check::new("events::query_pending_then_done", query_pending_then_done),
        Check::new(
            "events::rerecord_replaces_capture",
            rerecord_replaces_capture,
        ),
        Check::new("events::wait_on_unrecorded_event", wait_on_unrecorded_event),
        Check::new(
            "events::destroy_with_pending_record",
            destroy_with_pending_record,
        ),
        Check::new("events::elapsed_time", elapsed_time),
        Check::new("events::elapsed_time_errors", elapsed_time_errors),
    ]
}

/// Stream A: a closed gate, then `memset_async(x, 7)`, then a record of an
/// event. Stream B waits for the event, then copies `x` to the host: B is
/// held while the gate is closed (on a vendor that runs streams
/// asynchronously), and once it opens B must see the 7s.
///
/// The negative control, not asserted: without `stream_wait_event`, B's copy
/// may run while A is blocked and read the old contents, but a vendor may
/// also legitimately serialize the streams, so nothing is checked there.
fn cross_stream_wait(ctx: &Ctx<'_>) -> Verdict {
    const LEN: usize = 65536;
    let api = ctx.api;
    let x = DeviceBuffer::new(api, LEN).during("malloc")?;
    x.fill(0).during("memset")?;
    let host = HostBuffer::pinned(api, LEN).during("malloc_host")?;
    let a = OwnedStream::new(api).during("stream_create")?;
    let b = OwnedStream::new(api).during("stream_create")?;
    let event = OwnedEvent::new(api, false).during("event_create")?;
    let gate = Gate::new();
    let held = gate.hold(&a)?;
    a.memset(x.all(), 7, LEN).during("memset_async on A")?;
    a.record(&event).during("event_record on A")?;
    b.wait(&event).during("stream_wait_event on B")?;
    b.copy(host.all(), x.all(), LEN)
        .during("memcpy_async D2H on B")?;
    ensure!(
        !held || !b.query().during("stream_query(B)")?,
        "stream_query(B) is true while B waits for an event behind a blocked stream"
    );
    gate.open();
    b.synchronize().during("stream_synchronize(B)")?;
    compare(
        &host.to_vec(),
        &[7; LEN],
        "stream B's copy after waiting for the event recorded after stream A's memset",
    )?;
    a.synchronize().during("stream_synchronize(A)")?;
    Ok(())
}

/// A never-recorded event is done; a recorded one is pending while its
/// stream is blocked, and done after `event_synchronize`.
fn query_pending_then_done(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let event = OwnedEvent::new(api, false).during("event_create")?;
    ensure!(
        event.query().during("event_query")?,
        "event_query is false for an event never recorded"
    );
    event
        .synchronize()
        .during("event_synchronize of an event never recorded")?;
    let gate = Gate::new();
    gate.block(&stream)?;
    stream.record(&event).during("event_record")?;
    ensure!(
        !event.query().during("event_query")?,
        "event_query is true while the work before the record is blocked"
    );
    gate.open();
    event.synchronize().during("event_synchronize")?;
    ensure!(
        event.query().during("event_query")?,
        "event_query is false after event_synchronize"
    );
    Ok(())
}

/// Recording again replaces the earlier capture: a pending record on a
/// blocked stream is replaced by a record on an idle one.
fn rerecord_replaces_capture(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let blocked = OwnedStream::new(api).during("stream_create")?;
    let idle = OwnedStream::new(api).during("stream_create")?;
    let event = OwnedEvent::new(api, false).during("event_create")?;
    let gate = Gate::new();
    gate.block(&blocked)?;
    blocked
        .record(&event)
        .during("event_record on the blocked stream")?;
    ensure!(
        !event.query().during("event_query")?,
        "event_query is true for a record behind a blocked callback"
    );
    idle.record(&event)
        .during("event_record on an idle stream")?;
    idle.synchronize().during("stream_synchronize")?;
    ensure!(
        event.query().during("event_query")?,
        "event_query is false after re-recording on an idle stream: the new record must replace the pending one"
    );
    event.synchronize().during("event_synchronize")?;
    gate.open();
    blocked.synchronize().during("stream_synchronize")?;
    Ok(())
}

/// Waiting for an event that was never recorded does not hold a stream up.
fn wait_on_unrecorded_event(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let event = OwnedEvent::new(api, false).during("event_create")?;
    let buf = DeviceBuffer::new(api, 256).during("malloc")?;
    stream
        .wait(&event)
        .during("stream_wait_event on a never-recorded event")?;
    stream.memset(buf.all(), 3, 256).during("memset_async")?;
    stream.synchronize().during("stream_synchronize")?;
    compare(
        &buf.read_all().during("memcpy D2H")?,
        &[3; 256],
        "work after waiting for a never-recorded event",
    )?;
    Ok(())
}

/// Destroying an event whose record is pending is fine; the stream goes on.
fn destroy_with_pending_record(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let buf = DeviceBuffer::new(api, 256).during("malloc")?;
    let gate = Gate::new();
    gate.hold(&stream)?;
    {
        let event = OwnedEvent::new(api, true).during("event_create")?;
        stream.record(&event).during("event_record")?;
        // Destroyed here, while its record waits behind the closed gate
        // (on a vendor that runs streams asynchronously).
    }
    stream.memset(buf.all(), 5, 256).during("memset_async")?;
    gate.open();
    stream.synchronize().during("stream_synchronize")?;
    compare(
        &buf.read_all().during("memcpy D2H")?,
        &[5; 256],
        "work after an event destroyed while pending",
    )?;
    Ok(())
}

/// Timing events around a 50 ms sleep (the subject: work that takes a
/// known least time) measure at least 45 ms and no more than the host saw
/// pass from before the first record to after the second completed, and
/// swapping start and end negates the time.
fn elapsed_time(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let start = OwnedEvent::new(api, true).during("event_create(timing)")?;
    let end = OwnedEvent::new(api, true).during("event_create(timing)")?;
    let host = Instant::now();
    stream.record(&start).during("event_record(start)")?;
    stream.sleep(50).during("launch_host_func (sleep 50 ms)")?;
    stream.record(&end).during("event_record(end)")?;
    end.synchronize().during("event_synchronize(end)")?;
    let host_ms = host.elapsed().as_secs_f32() * 1e3;
    let ms = start
        .elapsed_ms(&end)
        .during("event_elapsed_ms(start, end)")?;
    // Both bounds hold however slow the machine: the device cannot time
    // less than the sleep, nor more than the host waited around it (with
    // 1 ms and 1% for the two clocks' resolutions and rates).
    ensure!(
        ms.is_finite() && ms >= 45.0 && ms <= host_ms * 1.01 + 1.0,
        "event_elapsed_ms around a 50 ms sleep is {ms} ms; expected at least 45 ms \
         and at most the {host_ms:.1} ms the host waited for it"
    );
    let back = end
        .elapsed_ms(&start)
        .during("event_elapsed_ms(end, start)")?;
    ensure!(
        (ms + back).abs() <= 0.5 + ms.abs() * 1e-3,
        "event_elapsed_ms(start, end) = {ms} but (end, start) = {back}: expected its negation"
    );
    let zero = start
        .elapsed_ms(&start)
        .during("event_elapsed_ms(start, start)")?;
    ensure!(
        zero.abs() <= 0.5,
        "event_elapsed_ms of an event with itself is {zero} ms"
    );
    ctx.note(format!("measured {ms:.1} ms around a 50 ms sleep"));
    Ok(())
}

/// Elapsed time with a timing-free event is `InvalidArgument`; with a
/// pending one `NotReady`.
fn elapsed_time_errors(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let start = OwnedEvent::new(api, true).during("event_create(timing)")?;
    let end = OwnedEvent::new(api, true).during("event_create(timing)")?;
    let untimed = OwnedEvent::new(api, false).during("event_create(no timing)")?;
    stream.record(&start).during("event_record")?;
    stream.record(&untimed).during("event_record")?;
    stream.synchronize().during("stream_synchronize")?;
    expect_err(
        start.elapsed_ms(&untimed),
        &[ErrorKind::InvalidArgument],
        "event_elapsed_ms(timing, timing-free)",
    )?;
    expect_err(
        untimed.elapsed_ms(&start),
        &[ErrorKind::InvalidArgument],
        "event_elapsed_ms(timing-free, timing)",
    )?;
    let gate = Gate::new();
    gate.block(&stream)?;
    stream.record(&end).during("event_record(end)")?;
    expect_err(
        start.elapsed_ms(&end),
        &[ErrorKind::NotReady],
        "event_elapsed_ms(start, end) while end is pending",
    )?;
    gate.open();
    end.synchronize().during("event_synchronize")?;
    let ms = start
        .elapsed_ms(&end)
        .during("event_elapsed_ms once end is done")?;
    ensure!(
        ms >= 0.0 && ms.is_finite(),
        "event_elapsed_ms once end is done is {ms}"
    );
    Ok(())
}
