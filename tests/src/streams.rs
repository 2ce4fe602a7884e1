//! Streams: in-order execution, queries, priorities, destruction, and host
//! callbacks.
//!
//! A stream is made busy in a vendor-neutral way with a host callback that
//! sleeps, or waits on a [`Gate`] until the check opens it, so work queued
//! behind it really is pending when the check looks.

use std::sync::{Arc, Condvar, Mutex};

use dipu_deviceapi::{ErrorKind, StreamHandle};

use crate::check::{compare, ensure, ensure_eq, expect_err, pattern, During, Fail, Rng, Verdict};
use crate::resources::{DeviceBuffer, Gate, HostBuffer, OwnedStream};
use crate::{Check, Ctx};

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new(
            "streams::async_chain_runs_in_order",
            async_chain_runs_in_order,
        ),
        Check::new("streams::query_busy_then_idle", query_busy_then_idle),
        Check::new("streams::priority_range", priority_range),
        Check::new(
            "streams::destroy_waits_for_queued_work",
            destroy_waits_for_queued_work,
        ),
        Check::new(
            "streams::default_stream_cannot_be_destroyed",
            default_stream_cannot_be_destroyed,
        ),
        Check::new(
            "streams::host_callbacks_run_in_order",
            host_callbacks_run_in_order,
        ),
        Check::new(
            "streams::host_callbacks_see_preceding_work",
            host_callbacks_see_preceding_work,
        ),
    ]
}

/// A long chain of dependent memsets and copies (device to device, host to
/// device, device to host snapshots) queued behind a blocked host callback
/// on one stream ends exactly as the same operations applied in order on the
/// host.
fn async_chain_runs_in_order(ctx: &Ctx<'_>) -> Verdict {
    const LEN: usize = 4096 + 17;
    const BUFFERS: usize = 4;
    const SOURCES: usize = 16;
    const SNAPSHOTS: usize = 32;
    const STEPS: usize = 240;
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let bufs = (0..BUFFERS)
        .map(|_| DeviceBuffer::new(api, LEN))
        .collect::<Result<Vec<_>, _>>()
        .during("malloc")?;
    let mut model = vec![vec![0u8; LEN]; BUFFERS];
    for b in &bufs {
        b.fill(0).during("memset")?;
    }
    let sources = HostBuffer::pinned(api, SOURCES * LEN).during("malloc_host")?;
    let source_data = pattern(500, SOURCES * LEN);
    sources.write(0, &source_data);
    let snapshots = HostBuffer::pinned(api, SNAPSHOTS * LEN).during("malloc_host")?;
    let mut expected_snapshots = Vec::new();

    let gate = Gate::new();
    gate.block(&stream)?;
    let mut rng = Rng::new(42);
    for step in 0..STEPS {
        let target = rng.below(BUFFERS);
        let offset = rng.below(LEN);
        let len = 1 + rng.below(LEN - offset);
        let what = || format!("step {step}");
        match step % 4 {
            0 => {
                let value = (step % 251) as u8 + 1;
                stream
                    .memset(bufs[target].at(offset), value, len)
                    .during(what())?;
                model[target][offset..offset + len].fill(value);
            }
            1 => {
                let from = (target + 1 + rng.below(BUFFERS - 1)) % BUFFERS;
                let src_off = rng.below(LEN - len + 1);
                stream
                    .copy(bufs[target].at(offset), bufs[from].at(src_off), len)
                    .during(what())?;
                let chunk = model[from][src_off..src_off + len].to_vec();
                model[target][offset..offset + len].copy_from_slice(&chunk);
            }
            2 => {
                let src_off = rng.below(SOURCES) * LEN;
                stream
                    .copy(bufs[target].at(offset), sources.at(src_off), len)
                    .during(what())?;
                model[target][offset..offset + len]
                    .copy_from_slice(&source_data[src_off..src_off + len]);
            }
            _ if expected_snapshots.len() < SNAPSHOTS => {
                let slot = expected_snapshots.len() * LEN;
                stream
                    .copy(snapshots.at(slot), bufs[target].all(), LEN)
                    .during(what())?;
                expected_snapshots.push((step, model[target].clone()));
            }
            _ => {}
        }
    }
    ensure!(
        !stream.query().during("stream_query")?,
        "stream_query says the stream is idle while a blocked host callback and {STEPS} operations are queued"
    );
    gate.open();
    stream.synchronize().during("stream_synchronize")?;
    for (i, (step, want)) in expected_snapshots.iter().enumerate() {
        compare(
            &snapshots.read(i * LEN, LEN),
            want,
            format_args!("the device-to-host snapshot taken at step {step}"),
        )?;
    }
    for (i, b) in bufs.iter().enumerate() {
        compare(
            &b.read_all().during("memcpy D2H")?,
            &model[i],
            format_args!("buffer {i} after {STEPS} steps"),
        )?;
    }
    Ok(())
}

/// `stream_query` is true for an empty stream, false while a callback
/// blocks it, and true after `stream_synchronize`.
fn query_busy_then_idle(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let buf = DeviceBuffer::new(api, 4096).during("malloc")?;
    ensure!(
        stream.query().during("stream_query")?,
        "stream_query is false for a new, empty stream"
    );
    let gate = Gate::new();
    gate.block(&stream)?;
    stream.memset(buf.all(), 1, 4096).during("memset_async")?;
    ensure!(
        !stream.query().during("stream_query")?,
        "stream_query is true while a host callback blocks the stream"
    );
    gate.open();
    stream.synchronize().during("stream_synchronize")?;
    ensure!(
        stream.query().during("stream_query")?,
        "stream_query is false after stream_synchronize"
    );
    ensure!(
        OwnedStream::default_stream(api)
            .query()
            .during("stream_query(default)")?,
        "stream_query of the idle default stream is false"
    );
    Ok(())
}

/// `greatest <= least`, and every priority, in range or not, gives a
/// working stream (out-of-range values are clamped).
fn priority_range(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let range = api
        .stream_priority_range()
        .during("stream_priority_range")?;
    ensure!(
        range.greatest <= range.least,
        "stream_priority_range: greatest {} > least {} (lower numbers are more urgent)",
        range.greatest,
        range.least
    );
    let buf = DeviceBuffer::new(api, 64).during("malloc")?;
    let priorities = [
        range.least,
        range.greatest,
        range.greatest + (range.least - range.greatest) / 2,
        range.greatest.saturating_sub(100),
        range.least.saturating_add(100),
        i32::MIN,
        i32::MAX,
    ];
    for (i, priority) in priorities.into_iter().enumerate() {
        let stream = OwnedStream::with_priority(api, priority).during(format_args!(
            "stream_create({priority}) with range {range:?}"
        ))?;
        stream
            .memset(buf.all(), i as u8, 64)
            .during("memset_async")?;
        stream.synchronize().during("stream_synchronize")?;
        compare(
            &buf.read_all().during("memcpy D2H")?,
            &[i as u8; 64],
            format_args!("memset_async on a stream of priority {priority}"),
        )?;
    }
    ctx.note(format!(
        "least {}, greatest {}",
        range.least, range.greatest
    ));
    Ok(())
}

/// Destroying a stream with queued work lets that work finish, and
/// `synchronize_device` waits for it.
fn destroy_waits_for_queued_work(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let buf = DeviceBuffer::new(api, 8192).during("malloc")?;
    buf.fill(0).during("memset")?;
    let stream = api.stream_create(0).during("stream_create")?;
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let flag = Arc::clone(&done);
    // SAFETY: `stream` is live until the `stream_destroy` below, and `buf`
    // outlives the queued work: its drop waits for the device, and below
    // the check also waits for the last callback before returning.
    unsafe {
        api.launch_host_func(stream, crate::check::sleep_callback(30))
            .during("launch_host_func")?;
        api.memset_async(buf.ptr(), 9, 8192, stream)
            .during("memset_async")?;
        api.launch_host_func(
            stream,
            Box::new(move || {
                *flag.0.lock().unwrap() = true;
                flag.1.notify_all();
            }),
        )
        .during("launch_host_func")?;
        api.stream_destroy(stream)
            .during("stream_destroy with queued work")?;
    }
    let synced = api.synchronize_device().during("synchronize_device");
    let ran_by_sync = *done.0.lock().unwrap();
    // Whatever the vendor did, keep `buf` alive until the queued work is over.
    let (guard, _) = done
        .1
        .wait_timeout_while(done.0.lock().unwrap(), Gate::LIMIT, |ran| !*ran)
        .unwrap();
    let ran = *guard;
    drop(guard);
    synced?;
    ensure!(
        ran,
        "a host callback queued before stream_destroy never ran"
    );
    ensure!(
        ran_by_sync,
        "synchronize_device returned before the work queued on a destroyed stream was done"
    );
    compare(
        &buf.read_all().during("memcpy D2H")?,
        &[9; 8192],
        "memset_async queued before stream_destroy",
    )?;
    Ok(())
}

/// The default stream cannot be destroyed.
fn default_stream_cannot_be_destroyed(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    // SAFETY: the default stream handle is always valid; the vendor must
    // refuse to destroy it.
    let result = unsafe { api.stream_destroy(StreamHandle::DEFAULT) };
    expect_err(
        result,
        &[ErrorKind::InvalidArgument],
        "stream_destroy(DEFAULT)",
    )?;
    let buf = DeviceBuffer::new(api, 16).during("malloc")?;
    let default = OwnedStream::default_stream(api);
    default
        .memset(buf.all(), 4, 16)
        .during("memset_async on the default stream after the refused destroy")?;
    default
        .synchronize()
        .during("stream_synchronize(DEFAULT)")?;
    compare(
        &buf.read_all().during("memcpy D2H")?,
        &[4; 16],
        "the default stream after the refused destroy",
    )?;
    Ok(())
}

/// 100 host callbacks run in the order they were queued.
fn host_callbacks_run_in_order(ctx: &Ctx<'_>) -> Verdict {
    let stream = OwnedStream::new(ctx.api).during("stream_create")?;
    let order = Arc::new(Mutex::new(Vec::new()));
    // All 100 are queued behind a closed gate before the first may run.
    let gate = Gate::new();
    gate.hold(&stream)?;
    for i in 0..100 {
        let order = Arc::clone(&order);
        stream
            .launch(Box::new(move || order.lock().unwrap().push(i)))
            .during(format_args!("launch_host_func #{i}"))?;
    }
    gate.open();
    stream.synchronize().during("stream_synchronize")?;
    let order = order.lock().unwrap().clone();
    ensure_eq!(
        order,
        (0..100).collect::<Vec<_>>(),
        "the order the host callbacks ran in"
    );
    Ok(())
}

/// Host callbacks interleaved with `memset_async` and a device-to-host
/// copy see the memory as the operations before them left it.
fn host_callbacks_see_preceding_work(ctx: &Ctx<'_>) -> Verdict {
    const LEN: usize = 4096;
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let dev = DeviceBuffer::new(api, LEN).during("malloc")?;
    let host = HostBuffer::pinned(api, LEN).during("malloc_host")?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    // Everything is queued behind a closed gate before any of it runs.
    let gate = Gate::new();
    gate.hold(&stream)?;
    for value in 1..=10u8 {
        stream
            .memset(dev.all(), value, LEN)
            .during("memset_async")?;
        stream
            .copy(host.all(), dev.all(), LEN)
            .during("memcpy_async D2H")?;
        // SAFETY: the callback runs on the stream after the copy into `host`
        // is done and before the next copy starts; `host` outlives it (its
        // drop waits for every stream).
        let read = unsafe { host.reader() };
        let seen = Arc::clone(&seen);
        stream
            .launch(Box::new(move || {
                let bytes = read();
                let wrong = bytes.iter().filter(|&&b| b != value).count();
                seen.lock().unwrap().push((value, wrong));
            }))
            .during("launch_host_func")?;
    }
    gate.open();
    stream.synchronize().during("stream_synchronize")?;
    let seen = seen.lock().unwrap().clone();
    ensure_eq!(seen.len(), 10, "host callbacks that ran");
    for (i, (value, wrong)) in seen.into_iter().enumerate() {
        ensure_eq!(value as usize, i + 1, "callback {i} ran out of order");
        if wrong != 0 {
            return Err(Fail(format!(
                "the host callback after memset_async({value}) and its D2H copy saw {wrong} of {LEN} bytes not yet {value}"
            )));
        }
    }
    Ok(())
}
