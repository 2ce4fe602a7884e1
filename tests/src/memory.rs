//! Memory: allocation, freeing, accounting, and the errors for requests a
//! vendor must refuse.
//!
//! `double_free_is_an_error` and `interior_pointer_free_is_an_error` hand the
//! vendor pointers it must reject. They are safe against vendors that
//! validate pointers, as the trait asks: the host vendor checks every pointer
//! against its registry, and CUDA's `cudaFree` (like CNRT's and ACL's frees)
//! reports `cudaErrorInvalidValue` for both. The freed pointer is passed back
//! before anything else is allocated, so it cannot belong to anyone else.

use dipu_deviceapi::ErrorKind;

use crate::check::{compare, ensure, ensure_eq, expect_err, pattern, During, Verdict, MIB};
use crate::resources::{DeviceBuffer, HostBuffer, OnDevice};
use crate::{Check, Ctx};

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new("memory::malloc_and_free", malloc_and_free),
        Check::new("memory::zero_bytes_and_null", zero_bytes_and_null),
        Check::new(
            "memory::impossible_sizes_fail_cleanly",
            impossible_sizes_fail_cleanly,
        ),
        Check::new(
            "memory::memory_info_tracks_allocations",
            memory_info_tracks_allocations,
        ),
        Check::new("memory::double_free_is_an_error", double_free_is_an_error),
        Check::new(
            "memory::interior_pointer_free_is_an_error",
            interior_pointer_free_is_an_error,
        ),
        Check::new("memory::pinned_host_memory", pinned_host_memory),
    ]
}

/// Allocations of several sizes are distinct, usable and freed.
fn malloc_and_free(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let mut buffers = Vec::new();
    for (i, size) in [1, 4096, MIB + 13].into_iter().enumerate() {
        let buf = DeviceBuffer::new(api, size).during(format_args!("malloc({size})"))?;
        ensure!(
            buffers
                .iter()
                .all(|b: &DeviceBuffer<'_>| b.ptr() != buf.ptr()),
            "malloc({size}) returned {:p}, which is already allocated",
            buf.ptr()
        );
        let data = pattern(i as u64, size);
        buf.write(0, &data)
            .during(format_args!("memcpy H2D of {size} bytes"))?;
        compare(
            &buf.read_all().during("memcpy D2H")?,
            &data,
            format_args!("read back of a {size}-byte allocation"),
        )?;
        buffers.push(buf);
    }
    // Freed in reverse by drop; free errors are checked by the raw frees
    // of the next checks.
    drop(buffers);
    Ok(())
}

/// `malloc(0)` succeeds (null or not) and can be freed; freeing null is a no-op.
fn zero_bytes_and_null(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let p = api.malloc(0).during("malloc(0)")?;
    // SAFETY: `p` came from `malloc(0)` (null, or a vendor pointer).
    unsafe { api.free(p) }.during(format_args!("free({p:p}) of malloc(0)'s pointer"))?;
    // SAFETY: null is explicitly a no-op for `free`.
    unsafe { api.free(std::ptr::null_mut()) }.during("free(null)")?;
    // SAFETY: null is explicitly a no-op for `free_host`.
    unsafe { api.free_host(std::ptr::null_mut()) }.during("free_host(null)")?;
    if p.is_null() {
        ctx.note("malloc(0) returned null");
    }
    Ok(())
}

/// Requests no device can satisfy fail with an error and a message, and the
/// vendor keeps working afterwards.
fn impossible_sizes_fail_cleanly(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let total = api
        .device_properties(0)
        .during("device_properties(0)")?
        .total_memory;
    let twice = usize::try_from(total.saturating_mul(2)).unwrap_or(usize::MAX);
    let oom_or_arg = [ErrorKind::OutOfMemory, ErrorKind::InvalidArgument];
    expect_err(api.malloc(usize::MAX), &oom_or_arg, "malloc(usize::MAX)")?;
    expect_err(
        api.malloc(twice),
        &[ErrorKind::OutOfMemory],
        format_args!("malloc({twice}), twice the device's total memory"),
    )?;
    expect_err(
        api.malloc_host(usize::MAX),
        &oom_or_arg,
        "malloc_host(usize::MAX)",
    )?;
    let buf = DeviceBuffer::new(api, 4096).during("malloc(4096) after the failed requests")?;
    buf.fill(0x5A).during("memset")?;
    compare(
        &buf.read_all().during("memcpy D2H")?,
        &[0x5A; 4096],
        "memset after failures",
    )?;
    Ok(())
}

/// An allocation lowers the device's free memory by at least its size, and
/// freeing it gives the memory back; on every device.
fn memory_info_tracks_allocations(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    for device in 0..ctx.device_count {
        let _on = OnDevice::switch(api, device).during(format_args!("set_device({device})"))?;
        let before = api.memory_info().during("memory_info")?;
        let bytes = ((before.free / 8) as usize).clamp(1, 32 * MIB);
        let buf = DeviceBuffer::new(api, bytes).during(format_args!("malloc({bytes})"))?;
        let during = api.memory_info().during("memory_info")?;
        ensure!(
            during.free + bytes as u64 <= before.free,
            "device {device}: free memory went from {} to {} after malloc({bytes}): it must drop by at least {bytes}",
            before.free,
            during.free
        );
        ensure_eq!(
            during.total,
            before.total,
            "device {device}: total memory after malloc"
        );
        drop(buf);
        let after = api.memory_info().during("memory_info")?;
        ensure!(
            after.free >= during.free + bytes as u64,
            "device {device}: free memory went from {} to {} after freeing {bytes} bytes: they must come back",
            during.free,
            after.free
        );
    }
    Ok(())
}

/// Freeing a pointer twice is an error, not a crash.
fn double_free_is_an_error(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    // A second live allocation keeps the vendor from handing the freed
    // address straight back to anyone (nothing is allocated in between anyway).
    let _keep = DeviceBuffer::new(api, 256).during("malloc(256)")?;
    let p = api.malloc(4096).during("malloc(4096)")?;
    // SAFETY: `p` is a live allocation from `malloc`.
    unsafe { api.free(p) }.during("the first free")?;
    // SAFETY: `p` was freed just above and nothing was allocated since, so no
    // one else owns it; the vendor validates pointers and must reject it
    // (see the module documentation).
    let second = unsafe { api.free(p) };
    expect_err(
        second,
        &[ErrorKind::InvalidArgument],
        format_args!("the second free({p:p})"),
    )?;
    Ok(())
}

/// Freeing a pointer into the middle of a live allocation is an error, and
/// the allocation stays intact and freeable.
fn interior_pointer_free_is_an_error(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let buf = DeviceBuffer::new(api, 4096).during("malloc(4096)")?;
    let data = pattern(3, 4096);
    buf.write(0, &data).during("memcpy H2D")?;
    let interior = buf.at(1).ptr();
    // SAFETY: `interior` points into a live allocation, so the vendor can
    // look it up and must reject it (see the module documentation); it was
    // never returned by `malloc`.
    let result = unsafe { api.free(interior) };
    expect_err(
        result,
        &[ErrorKind::InvalidArgument],
        format_args!("free({interior:p}), one byte into a live allocation"),
    )?;
    compare(
        &buf.read_all()
            .during("memcpy D2H after the rejected free")?,
        &data,
        "the allocation after a rejected interior free",
    )?;
    // SAFETY: an unknown pointer for `free_host` too: it is device memory
    // interior, never returned by `malloc_host`.
    let result = unsafe { api.free_host(interior) };
    expect_err(
        result,
        &[ErrorKind::InvalidArgument],
        format_args!("free_host({interior:p}), a device pointer's interior"),
    )?;
    Ok(())
}

/// Page-locked host memory is writable, distinct and freed.
fn pinned_host_memory(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let a = HostBuffer::pinned(api, 3 * 4096 + 5).during("malloc_host")?;
    let b = HostBuffer::pinned(api, 17).during("malloc_host")?;
    ensure!(
        a.all().ptr() != b.all().ptr(),
        "malloc_host returned the same pointer twice"
    );
    let data = pattern(11, a.len());
    a.write(0, &data);
    compare(&a.to_vec(), &data, "pinned memory read back")?;
    ensure!(
        b.to_vec().iter().all(|&x| x == 0),
        "a fresh pinned buffer was written through another"
    );
    Ok(())
}
