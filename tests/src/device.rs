//! Devices: counting, selecting (per thread), properties and memory info.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dipu_deviceapi::ErrorKind;

use crate::check::{ensure, ensure_eq, expect_err, During, Verdict};
use crate::resources::OwnedStream;
use crate::{Check, Ctx};

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new("device::set_and_get_every_index", set_and_get_every_index),
        Check::new("device::current_is_per_thread", current_is_per_thread),
        Check::new(
            "device::invalid_index_is_rejected",
            invalid_index_is_rejected,
        ),
        Check::new("device::properties_are_sane", properties_are_sane),
        Check::new(
            "device::memory_info_is_consistent",
            memory_info_is_consistent,
        ),
        Check::new(
            "device::synchronize_waits_for_every_stream",
            synchronize_waits_for_every_stream,
        ),
    ]
}

/// At least one device, or a clean `NoDevice` error with a message.
pub(crate) fn count(ctx: &Ctx<'_>) -> Verdict {
    match ctx.api.device_count() {
        Ok(n) => {
            ensure!(
                n >= 1,
                "device_count returned {n}: it must be at least 1, or the NoDevice error"
            );
            ctx.note(format!("{n} device(s)"));
            Ok(())
        }
        Err(e) => {
            let e = expect_err::<()>(Err(e), &[ErrorKind::NoDevice], "device_count")?;
            ctx.note(format!("no device: {}", e.message()));
            Ok(())
        }
    }
}

/// `set_device(i)` then `current_device() == i`, for every index.
fn set_and_get_every_index(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    ensure_eq!(
        api.current_device().during("current_device")?,
        0,
        "the current device when the check starts (the suite set 0)"
    );
    for device in (0..ctx.device_count).chain([0]) {
        api.set_device(device)
            .during(format_args!("set_device({device})"))?;
        ensure_eq!(
            api.current_device().during("current_device")?,
            device,
            "current_device after set_device({device})"
        );
    }
    Ok(())
}

/// The current device belongs to the thread: a new thread starts at 0 and
/// setting it there does not change other threads.
fn current_is_per_thread(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let last = ctx.device_count - 1;
    api.set_device(last)
        .during(format_args!("set_device({last})"))?;
    let other = std::thread::scope(|s| {
        s.spawn(|| -> Verdict {
            ensure_eq!(
                api.current_device()
                    .during("current_device on a new thread")?,
                0,
                "current_device on a new thread after another thread chose device {last}"
            );
            api.set_device(last).during("set_device on a new thread")?;
            api.set_device(0).during("set_device(0) on a new thread")?;
            ensure_eq!(
                api.current_device().during("current_device")?,
                0,
                "current_device on the new thread"
            );
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(crate::check::Fail("the new thread panicked".into())))
    });
    other?;
    ensure_eq!(
        api.current_device().during("current_device")?,
        last,
        "this thread's current device after another thread set device 0"
    );
    if ctx.device_count == 1 {
        ctx.note("single device: only checked that a new thread starts at 0");
    }
    Ok(())
}

/// `count`, -1 and `i32::MAX` are `InvalidDevice` for `set_device` and
/// `device_properties`, and a failed `set_device` keeps the current device.
fn invalid_index_is_rejected(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    for bad in [ctx.device_count, -1, i32::MAX] {
        expect_err(
            api.set_device(bad),
            &[ErrorKind::InvalidDevice],
            format_args!("set_device({bad})"),
        )?;
        expect_err(
            api.device_properties(bad),
            &[ErrorKind::InvalidDevice],
            format_args!("device_properties({bad})"),
        )?;
        ensure_eq!(
            api.current_device().during("current_device")?,
            0,
            "the current device after the rejected set_device({bad})"
        );
    }
    Ok(())
}

/// Every device has a name, memory and at least one multiprocessor.
fn properties_are_sane(ctx: &Ctx<'_>) -> Verdict {
    for device in 0..ctx.device_count {
        let p = ctx
            .api
            .device_properties(device)
            .during(format_args!("device_properties({device})"))?;
        ensure!(
            !p.name.trim().is_empty(),
            "device {device} has an empty name"
        );
        ensure!(p.total_memory > 0, "device {device} reports total_memory 0");
        ensure!(
            p.multiprocessor_count > 0,
            "device {device} reports {} multiprocessors",
            p.multiprocessor_count
        );
        ensure!(
            p.major >= 0 && p.minor >= 0,
            "device {device} reports version {}.{}",
            p.major,
            p.minor
        );
    }
    Ok(())
}

/// `memory_info` on each device: free ≤ total, total = the properties' total.
fn memory_info_is_consistent(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    for device in 0..ctx.device_count {
        api.set_device(device)
            .during(format_args!("set_device({device})"))?;
        let info = api
            .memory_info()
            .during(format_args!("memory_info on device {device}"))?;
        let props = api
            .device_properties(device)
            .during(format_args!("device_properties({device})"))?;
        ensure!(
            info.free <= info.total,
            "device {device}: memory_info free {} > total {}",
            info.free,
            info.total
        );
        ensure_eq!(
            info.total,
            props.total_memory,
            "device {device}: memory_info total vs device_properties total_memory"
        );
    }
    Ok(())
}

/// `synchronize_device` waits for work queued on a created stream.
fn synchronize_waits_for_every_stream(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let done = Arc::new(AtomicBool::new(false));
    stream.sleep(30).during("launch_host_func (sleep)")?;
    let flag = Arc::clone(&done);
    stream
        .launch(Box::new(move || flag.store(true, Ordering::SeqCst)))
        .during("launch_host_func")?;
    api.synchronize_device().during("synchronize_device")?;
    ensure!(
        done.load(Ordering::SeqCst),
        "synchronize_device returned before a created stream's host callback ran"
    );
    ensure!(
        stream.query().during("stream_query")?,
        "stream_query is false after synchronize_device"
    );
    Ok(())
}
