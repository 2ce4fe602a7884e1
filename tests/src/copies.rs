//! Copies and memset: odd sizes, offsets into buffers, every direction,
//! synchronous and on streams, pageable and page-locked host memory, and
//! copies between devices.

use crate::check::{compare, ensure, pattern, During, Verdict, MIB};
use crate::resources::{
    memcpy, memcpy_peer, DeviceBuffer, Gate, HostBuffer, Mem, OnDevice, OwnedStream,
};
use crate::{Check, Ctx};

/// Sizes that catch off-by-one, word-size and page-size mistakes.
const SIZES: [usize; 5] = [1, 3, 4095, 65537, MIB + 13];

/// Slack around each copied range, to catch writes past either end.
const PAD: usize = 64;

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new(
            "copies::memset_odd_sizes_and_offsets",
            memset_odd_sizes_and_offsets,
        ),
        Check::new("copies::round_trip_sync_pageable", |c| {
            round_trip(c, Via::Sync, false)
        }),
        Check::new("copies::round_trip_sync_pinned", |c| {
            round_trip(c, Via::Sync, true)
        }),
        Check::new("copies::round_trip_async_pageable", |c| {
            round_trip(c, Via::Stream, false)
        }),
        Check::new("copies::round_trip_async_pinned", |c| {
            round_trip(c, Via::Stream, true)
        }),
        Check::new("copies::round_trip_default_stream", |c| {
            round_trip(c, Via::DefaultStream, true)
        }),
        Check::new("copies::peer", peer),
    ]
}

/// `memset` of odd sizes, whole and at an offset, read back exactly
/// (including the bytes around the range, which must be untouched).
fn memset_odd_sizes_and_offsets(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    for size in SIZES {
        let buf = DeviceBuffer::new(api, size).during(format_args!("malloc({size})"))?;
        buf.fill(0xA5)
            .during(format_args!("memset of {size} bytes"))?;
        let mut want = vec![0xA5u8; size];
        compare(
            &buf.read_all().during("memcpy D2H")?,
            &want,
            format_args!("memset(0xA5) of {size} bytes"),
        )?;
        let (offset, len) = (size / 3, size - size / 3 - size / 5);
        buf.memset(offset, 0x3C, len)
            .during(format_args!("memset of {len} bytes at offset {offset}"))?;
        want[offset..offset + len].fill(0x3C);
        compare(
            &buf.read_all().during("memcpy D2H")?,
            &want,
            format_args!("memset(0x3C) of {len} bytes at offset {offset} in a {size}-byte buffer"),
        )?;
        let tail = size.min(7);
        compare(
            &buf.read(size - tail, tail)
                .during("memcpy D2H at an offset")?,
            &want[size - tail..],
            format_args!("the last {tail} bytes read at offset {}", size - tail),
        )?;
    }
    Ok(())
}

/// How the copies of a round trip are issued.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// `memcpy`.
    Sync,
    /// `memcpy_async` on a created stream, then `stream_synchronize`.
    Stream,
    /// `memcpy_async` on the default stream, then `stream_synchronize`.
    DefaultStream,
}

/// Host → device → device → host → host, at different offsets, for every
/// size: the data arrives intact and nothing around the ranges changes.
fn round_trip(ctx: &Ctx<'_>, via: Via, pinned: bool) -> Verdict {
    let api = ctx.api;
    let stream = match via {
        Via::Sync | Via::DefaultStream => OwnedStream::default_stream(api),
        Via::Stream => OwnedStream::new(api).during("stream_create")?,
    };
    let copy = |dst: Mem<'_>, src: Mem<'_>, bytes: usize| match via {
        Via::Sync => memcpy(api, dst, src, bytes),
        Via::Stream | Via::DefaultStream => stream.copy(dst, src, bytes),
    };
    let host = |len| HostBuffer::new(api, len, pinned).during(format_args!("malloc_host({len})"));
    for (i, size) in SIZES.into_iter().enumerate() {
        let data = pattern(100 + i as u64, size);
        let [h_off, a_off, b_off, d_off] = [
            i * 7 % PAD,
            i * 13 % PAD,
            (i * 5 + 1) % PAD,
            (i * 3 + 2) % PAD,
        ];
        let src = host(size + PAD)?;
        src.write(h_off, &data);
        let a = DeviceBuffer::new(api, size + PAD).during("malloc")?;
        let b = DeviceBuffer::new(api, size + PAD).during("malloc")?;
        a.fill(0).during("memset")?;
        b.fill(0).during("memset")?;
        let dst = host(size + PAD)?;
        let dst2 = host(size)?;
        copy(a.at(a_off), src.at(h_off), size)
            .during(format_args!("HostToDevice copy of {size} bytes"))?;
        copy(b.at(b_off), a.at(a_off), size)
            .during(format_args!("DeviceToDevice copy of {size} bytes"))?;
        copy(dst.at(d_off), b.at(b_off), size)
            .during(format_args!("DeviceToHost copy of {size} bytes"))?;
        copy(dst2.all(), dst.at(d_off), size)
            .during(format_args!("HostToHost copy of {size} bytes"))?;
        if via != Via::Sync {
            stream.synchronize().during("stream_synchronize")?;
        }
        let what = format!("{size} bytes through host (offset {h_off}) → device (offset {a_off}) → device (offset {b_off}) → host (offset {d_off})");
        let mut want = vec![0u8; size + PAD];
        want[d_off..d_off + size].copy_from_slice(&data);
        compare(&dst.to_vec(), &want, &what)?;
        compare(
            &dst2.to_vec(),
            &data,
            format_args!("then HostToHost: {what}"),
        )?;
        let mut want_b = vec![0u8; size + PAD];
        want_b[b_off..b_off + size].copy_from_slice(&data);
        compare(
            &b.read_all().during("memcpy D2H")?,
            &want_b,
            format_args!("the whole device buffer after {what}"),
        )?;
    }
    let kind = if pinned { "pinned" } else { "pageable" };
    ctx.note(format!("{kind} host memory, {} sizes", SIZES.len()));
    Ok(())
}

/// `memcpy_peer` from device 0 to 1 and `memcpy_peer_async` back, on a
/// stream of device 0; with one device, between device 0 and itself.
fn peer(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let other = if ctx.device_count >= 2 { 1 } else { 0 };
    if other == 0 {
        ctx.note("single device: peer copy between device 0 and itself");
    }
    let size = 65537;
    let data = pattern(77, size);
    let a = DeviceBuffer::on(api, 0, size).during("malloc on device 0")?;
    let b = DeviceBuffer::on(api, other, size).during(format_args!("malloc on device {other}"))?;
    a.write(0, &data).during("memcpy H2D")?;
    b.fill(0).during("memset")?;
    memcpy_peer(api, &b, &a, size).during(format_args!("memcpy_peer 0 → {other}"))?;
    compare(
        &b.read_all().during("memcpy D2H")?,
        &data,
        format_args!("memcpy_peer 0 → {other}"),
    )?;
    let back = pattern(78, size);
    b.write(0, &back).during("memcpy H2D")?;
    {
        let _on = OnDevice::switch(api, 0).during("set_device(0)")?;
        let stream = OwnedStream::new(api).during("stream_create on device 0")?;
        // Queued behind a closed gate: the copy runs asynchronously.
        let gate = Gate::new();
        gate.hold(&stream)?;
        stream
            .copy_peer(&a, &b, size)
            .during(format_args!("memcpy_peer_async {other} → 0"))?;
        gate.open();
        stream.synchronize().during("stream_synchronize")?;
    }
    compare(
        &a.read_all().during("memcpy D2H")?,
        &back,
        format_args!("memcpy_peer_async {other} → 0"),
    )?;
    ensure!(a.len() == size, "buffer size changed");
    Ok(())
}
