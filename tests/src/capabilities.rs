//! Optional capabilities: a smoke test of each one the vendor reports, and
//! for each one it does not, a check that every method of it answers
//! `Unsupported`.
//!
//! The `Unsupported` checks pass null pointers and zero handles: a vendor
//! that does not implement a capability must answer without touching its
//! arguments (the trait's default methods do exactly that).

use std::ffi::c_void;

use dipu_deviceapi::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceApi, PhysicalMemHandle, ReduceOp,
    StreamHandle,
};

use crate::check::{compare, ensure, ensure_eq, expect_unsupported, pattern, During, Verdict};
use crate::resources::{DeviceBuffer, OwnedStream};
use crate::{Check, Ctx};

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new("capabilities::reported_consistently", reported_consistently),
        Check::new("capabilities::virtual_memory", virtual_memory),
        Check::new("capabilities::collectives", collectives),
    ]
}

/// Capability names are readable, and the communicator id size is non-zero
/// exactly when collectives are reported.
fn reported_consistently(ctx: &Ctx<'_>) -> Verdict {
    let caps = ctx.api.capabilities();
    let names = caps.names();
    ensure!(
        names.iter().all(|n| !n.is_empty()),
        "empty capability name in {names:?}"
    );
    let id_size = ctx.api.comm_unique_id_size();
    ensure_eq!(
        id_size > 0,
        caps.contains(Capabilities::COLLECTIVES),
        "comm_unique_id_size() = {id_size}: non-zero exactly when COLLECTIVES is reported"
    );
    ctx.note(if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    });
    Ok(())
}

/// VIRTUAL_MEMORY: the smoke test, or every method `Unsupported`.
fn virtual_memory(ctx: &Ctx<'_>) -> Verdict {
    if ctx
        .api
        .capabilities()
        .contains(Capabilities::VIRTUAL_MEMORY)
    {
        ctx.note("reported: reserve, create, map, use, unmap, release and free work");
        return vmm_smoke(ctx);
    }
    ctx.note("not reported: every virtual-memory method returns Unsupported");
    let api = ctx.api;
    let chunk = PhysicalMemHandle::from_raw(0);
    let null = std::ptr::null_mut::<c_void>();
    expect_unsupported(api.vmm_granularity(), "vmm_granularity")?;
    expect_unsupported(api.vmm_reserve(1 << 21), "vmm_reserve")?;
    expect_unsupported(api.vmm_create(1 << 21), "vmm_create")?;
    // SAFETY: the vendor reports no virtual memory, so these must return
    // Unsupported without touching the null pointer or the zero handle.
    unsafe {
        expect_unsupported(
            api.vmm_free_reservation(null, 1 << 21),
            "vmm_free_reservation",
        )?;
        expect_unsupported(api.vmm_release(chunk), "vmm_release")?;
        expect_unsupported(api.vmm_map(null, 1 << 21, chunk), "vmm_map")?;
        expect_unsupported(api.vmm_unmap(null, 1 << 21), "vmm_unmap")?;
    }
    Ok(())
}

/// What a virtual-memory check still holds; returned to the vendor on drop
/// (unmapped, released, reservation freed) whatever happened.
struct Vmm<'a> {
    api: &'a dyn DeviceApi,
    reservation: Option<(*mut c_void, usize)>,
    chunks: Vec<PhysicalMemHandle>,
    mapped: Vec<(*mut c_void, usize)>,
}

impl Drop for Vmm<'_> {
    fn drop(&mut self) {
        let _ = self.api.synchronize_device();
        // SAFETY: every entry came from this vendor and is still mapped,
        // created or reserved (the check removes what it returns itself).
        unsafe {
            for (ptr, bytes) in self.mapped.drain(..) {
                let _ = self.api.vmm_unmap(ptr, bytes);
            }
            for chunk in self.chunks.drain(..) {
                let _ = self.api.vmm_release(chunk);
            }
            if let Some((ptr, bytes)) = self.reservation.take() {
                let _ = self.api.vmm_free_reservation(ptr, bytes);
            }
        }
    }
}

/// Reserve 4 granules, back the first two with two chunks, use them as one
/// range (memset, copies across the chunk boundary, a stream), release a
/// chunk while it is still mapped, unmap, and watch `memory_info` follow.
fn vmm_smoke(ctx: &Ctx<'_>) -> Verdict {
    let api = ctx.api;
    let g = api.vmm_granularity().during("vmm_granularity")?;
    ensure!(g > 0, "vmm_granularity is 0");
    let before = api.memory_info().during("memory_info")?;
    let mut vmm = Vmm {
        api,
        reservation: None,
        chunks: Vec::new(),
        mapped: Vec::new(),
    };
    let base = api
        .vmm_reserve(4 * g)
        .during(format_args!("vmm_reserve({})", 4 * g))?;
    ensure!(!base.is_null(), "vmm_reserve returned null");
    vmm.reservation = Some((base, 4 * g));
    let second = base.cast::<u8>().wrapping_add(g).cast::<c_void>();
    for _ in 0..2 {
        let chunk = api.vmm_create(g).during(format_args!("vmm_create({g})"))?;
        vmm.chunks.push(chunk);
    }
    let created = api.memory_info().during("memory_info")?;
    ensure!(
        created.free + 2 * g as u64 <= before.free,
        "free memory went from {} to {} after creating two {g}-byte chunks",
        before.free,
        created.free
    );
    for (ptr, chunk) in [(base, vmm.chunks[0]), (second, vmm.chunks[1])] {
        // SAFETY: `ptr` is granule-aligned inside the live reservation and
        // `chunk` a live chunk of `g` bytes.
        unsafe { api.vmm_map(ptr, g, chunk) }.during(format_args!("vmm_map({ptr:p}, {g})"))?;
        vmm.mapped.push((ptr, g));
    }
    let read = |ptr: *const c_void, bytes: usize| {
        let mut out = vec![0u8; bytes];
        // SAFETY: `ptr..ptr + bytes` lies in the mapped range.
        unsafe { api.memcpy(out.as_mut_ptr().cast(), ptr, bytes, CopyKind::DeviceToHost) }
            .map(|()| out)
            .during("memcpy D2H from mapped memory")
    };
    // SAFETY: the first two granules of the reservation are mapped.
    unsafe { api.memset(base, 0xAB, 2 * g) }.during("memset across both chunks")?;
    compare(
        &read(base, 2 * g)?,
        &vec![0xAB; 2 * g],
        "memset across two mapped chunks",
    )?;
    let data = pattern(9, 200.min(g));
    let across = base
        .cast::<u8>()
        .wrapping_add(g - data.len() / 2)
        .cast::<c_void>();
    // SAFETY: `across` lies in the mapped range with room for `data`.
    unsafe {
        api.memcpy(
            across,
            data.as_ptr().cast(),
            data.len(),
            CopyKind::HostToDevice,
        )
    }
    .during("memcpy H2D across the chunk boundary")?;
    compare(
        &read(across, data.len())?,
        &data,
        "a copy across the chunk boundary",
    )?;
    let plain = DeviceBuffer::new(api, 1000.min(g)).during("malloc")?;
    let plain_data = pattern(10, plain.len());
    plain.write(0, &plain_data).during("memcpy H2D")?;
    let stream = OwnedStream::new(api).during("stream_create")?;
    // SAFETY: `second` starts a mapped granule with room for `plain`, which
    // is live; the stream is synchronized before anything is unmapped.
    unsafe {
        api.memcpy_async(
            second,
            plain.ptr(),
            plain.len(),
            CopyKind::DeviceToDevice,
            stream.handle(),
        )
        .during("memcpy_async D2D into mapped memory")?;
    }
    stream.synchronize().during("stream_synchronize")?;
    compare(
        &read(second, plain.len())?,
        &plain_data,
        "memcpy_async into the second chunk",
    )?;
    // Releasing a mapped chunk keeps its memory until it is unmapped.
    let mapped = api.memory_info().during("memory_info")?;
    let chunk = vmm.chunks.pop().expect("two chunks");
    // SAFETY: a live chunk, released once; its mapping stays valid.
    unsafe { api.vmm_release(chunk) }.during("vmm_release of a still-mapped chunk")?;
    compare(
        &read(second, plain.len())?,
        &plain_data,
        "a mapped chunk after vmm_release",
    )?;
    let still_mapped = api.memory_info().during("memory_info")?;
    ensure!(
        still_mapped.free < mapped.free + g as u64,
        "free memory went from {} to {} when a still-mapped chunk was released: \
         it must come back only once the chunk is also unmapped",
        mapped.free,
        still_mapped.free
    );
    drop(stream);
    drop(plain);
    for (ptr, bytes) in std::mem::take(&mut vmm.mapped) {
        // SAFETY: `ptr` is mapped with `bytes` bytes and no work uses it.
        unsafe { api.vmm_unmap(ptr, bytes) }.during(format_args!("vmm_unmap({ptr:p}, {bytes})"))?;
    }
    for chunk in std::mem::take(&mut vmm.chunks) {
        // SAFETY: a live, now unmapped chunk.
        unsafe { api.vmm_release(chunk) }.during("vmm_release")?;
    }
    let released = api.memory_info().during("memory_info")?;
    ensure!(
        released.free >= created.free + 2 * g as u64,
        "free memory went from {} to {} after unmapping and releasing two {g}-byte chunks",
        created.free,
        released.free
    );
    if let Some((ptr, bytes)) = vmm.reservation.take() {
        // SAFETY: the reservation is live and nothing is mapped in it.
        unsafe { api.vmm_free_reservation(ptr, bytes) }.during("vmm_free_reservation")?;
    }
    ctx.note(format!("granularity {g} bytes"));
    Ok(())
}

/// COLLECTIVES: a one-rank communicator's all-reduce and broadcast, or
/// every method `Unsupported`.
fn collectives(ctx: &Ctx<'_>) -> Verdict {
    if ctx.api.capabilities().contains(Capabilities::COLLECTIVES) {
        ctx.note("reported: a one-rank communicator all-reduces and broadcasts");
        return collectives_smoke(ctx);
    }
    ctx.note("not reported: every collective method returns Unsupported");
    let api = ctx.api;
    let comm = CommHandle::from_raw(0);
    let s = StreamHandle::DEFAULT;
    let (send, recv) = (std::ptr::null::<c_void>(), std::ptr::null_mut::<c_void>());
    let (f32, sum) = (DataType::F32, ReduceOp::Sum);
    expect_unsupported(api.comm_get_unique_id(), "comm_get_unique_id")?;
    expect_unsupported(api.comm_init_rank(1, &[0; 16], 0), "comm_init_rank")?;
    expect_unsupported(api.group_start(), "group_start")?;
    expect_unsupported(api.group_end(), "group_end")?;
    // SAFETY: the vendor reports no collectives, so these must return
    // Unsupported without touching the null buffers or the zero handle.
    unsafe {
        expect_unsupported(api.comm_destroy(comm), "comm_destroy")?;
        expect_unsupported(api.comm_abort(comm), "comm_abort")?;
        expect_unsupported(api.comm_async_error(comm), "comm_async_error")?;
        expect_unsupported(
            api.all_reduce(send, recv, 1, f32, sum, comm, s),
            "all_reduce",
        )?;
        expect_unsupported(api.broadcast(send, recv, 1, f32, 0, comm, s), "broadcast")?;
        expect_unsupported(api.all_gather(send, recv, 1, f32, comm, s), "all_gather")?;
        expect_unsupported(
            api.reduce_scatter(send, recv, 1, f32, sum, comm, s),
            "reduce_scatter",
        )?;
        expect_unsupported(api.reduce(send, recv, 1, f32, sum, 0, comm, s), "reduce")?;
        expect_unsupported(api.send(send, 1, f32, 0, comm, s), "send")?;
        expect_unsupported(api.recv(recv, 1, f32, 0, comm, s), "recv")?;
    }
    Ok(())
}

/// One rank: all-reduce (sum) copies, broadcast from rank 0 copies.
fn collectives_smoke(ctx: &Ctx<'_>) -> Verdict {
    const COUNT: usize = 1024;
    let api = ctx.api;
    let id = api.comm_get_unique_id().during("comm_get_unique_id")?;
    ensure_eq!(
        id.len(),
        api.comm_unique_id_size(),
        "the unique id's length vs comm_unique_id_size"
    );
    let comm = api
        .comm_init_rank(1, &id, 0)
        .during("comm_init_rank(1, id, 0)")?;
    let stream = OwnedStream::new(api).during("stream_create")?;
    let bytes = COUNT * DataType::F32.size_in_bytes();
    let send = DeviceBuffer::new(api, bytes).during("malloc")?;
    let recv = DeviceBuffer::new(api, bytes).during("malloc")?;
    let values: Vec<u8> = (0..COUNT).flat_map(|i| (i as f32).to_le_bytes()).collect();
    send.write(0, &values).during("memcpy H2D")?;
    recv.fill(0).during("memset")?;
    let result = (|| -> Verdict {
        // SAFETY: live buffers of COUNT f32s, a live communicator and stream;
        // the stream is synchronized before the buffers are read or freed.
        unsafe {
            api.all_reduce(
                send.ptr(),
                recv.ptr(),
                COUNT,
                DataType::F32,
                ReduceOp::Sum,
                comm,
                stream.handle(),
            )
            .during("all_reduce")?;
        }
        stream.synchronize().during("stream_synchronize")?;
        compare(
            &recv.read_all().during("memcpy D2H")?,
            &values,
            "a one-rank all_reduce(sum)",
        )?;
        recv.fill(0).during("memset")?;
        api.group_start().during("group_start")?;
        // SAFETY: as above.
        unsafe {
            api.broadcast(
                send.ptr(),
                recv.ptr(),
                COUNT,
                DataType::F32,
                0,
                comm,
                stream.handle(),
            )
            .during("broadcast")?;
        }
        api.group_end().during("group_end")?;
        stream.synchronize().during("stream_synchronize")?;
        compare(
            &recv.read_all().during("memcpy D2H")?,
            &values,
            "a one-rank broadcast in a group",
        )?;
        // SAFETY: a live communicator.
        unsafe { api.comm_async_error(comm) }.during("comm_async_error")?;
        Ok(())
    })();
    // SAFETY: the communicator is live and destroyed once.
    let destroyed = unsafe { api.comm_destroy(comm) }.during("comm_destroy");
    result.and(destroyed)
}
