//! The fake CUDA runtime (`libcudart`). Each behaviour cites the sentence
//! of NVIDIA's CUDA Runtime API documentation it models.

use std::alloc::Layout;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Arc;

use dipu_fakekit::stream::Event;
use dipu_fakekit::{host, thread};

use crate::errors::*;
use crate::exports::exports;
use crate::state::*;
use crate::types::*;

/// Alignment of fake device and pinned allocations.
const ALIGN: usize = 256;

/// Writes `value` through `out` unless it is null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Result<(), i32> {
    if out.is_null() {
        return Err(cudaErrorInvalidValue);
    }
    // SAFETY: non-null, and valid by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

fn allocate(f: &Fake, bytes: usize, device: Option<i32>) -> Result<usize, i32> {
    if let Some(d) = device {
        if f.cfg.faults.oom() || f.used(d).saturating_add(bytes as u64) > f.cfg.memory {
            return Err(cudaErrorMemoryAllocation);
        }
    } else if f.cfg.faults.oom() {
        return Err(cudaErrorMemoryAllocation);
    }
    let layout = Layout::from_size_align(bytes, ALIGN).map_err(|_| cudaErrorMemoryAllocation)?;
    // SAFETY: a non-zero size (callers handle 0).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(cudaErrorMemoryAllocation);
    }
    Ok(ptr as usize)
}

fn release(ptr: usize, bytes: usize) {
    // SAFETY: `ptr` came from `allocate` with this size and ALIGN.
    unsafe {
        std::alloc::dealloc(
            ptr as *mut u8,
            Layout::from_size_align_unchecked(bytes, ALIGN),
        )
    };
}

/// `cudaMemcpyDefault` resolved from where the pointers are.
fn infer(f: &Fake, dst: usize, src: usize, n: usize) -> c_int {
    let dev = |m: Mem| matches!(m, Mem::Device(_) | Mem::Virtual);
    match (dev(f.classify(src, n)), dev(f.classify(dst, n))) {
        (false, false) => 0,
        (false, true) => 1,
        (true, false) => 2,
        (true, true) => 3,
    }
}

/// Checks a copy's pointers against its kind, for the current device.
fn check_copy(f: &Fake, dst: usize, src: usize, n: usize, kind: c_int) -> Result<c_int, i32> {
    if n == 0 {
        return Ok(kind);
    }
    if dst == 0 || src == 0 {
        return Err(cudaErrorInvalidValue);
    }
    let kind = if kind == 4 {
        infer(f, dst, src, n)
    } else {
        kind
    };
    let d = current_device();
    match kind {
        0 => {}
        1 => f.device_side(dst, n, d, true)?,
        2 => f.device_side(src, n, d, false)?,
        3 => {
            f.device_side(src, n, d, false)?;
            f.device_side(dst, n, d, true)?;
        }
        _ => return Err(cudaErrorInvalidValue),
    }
    Ok(kind)
}

fn stage(src: usize, n: usize) -> Vec<u8> {
    // SAFETY: the caller's source holds `n` readable bytes (checked kind).
    unsafe { std::slice::from_raw_parts(src as *const u8, n) }.to_vec()
}

/// Queues a copy on `q`; pageable host sources are staged first.
fn queue_copy(f: &'static Fake, q: &Queue, dst: usize, src: usize, n: usize, staged: bool) -> u64 {
    if staged {
        let data = stage(src, n);
        f.submit(
            q,
            Box::new(move || {
                // SAFETY: the destination was checked; the data is ours.
                unsafe { Addr(dst).copy_from(Addr(data.as_ptr() as usize), n) }
            }),
        )
    } else {
        f.submit(
            q,
            Box::new(move || {
                // SAFETY: both ranges were checked, and the caller keeps
                // them alive until the stream passes the copy.
                unsafe { Addr(dst).copy_from(Addr(src), n) }
            }),
        )
    }
}

fn stream_text(s: cudaStream_t) -> String {
    format!("stream={s:p}")
}

exports! {
    /// Error names.
    fn cudaGetErrorName(error: cudaError_t) -> *const c_char {
        runtime_text(error, true)
    }

    /// Error messages.
    fn cudaGetErrorString(error: cudaError_t) -> *const c_char {
        runtime_text(error, false)
    }

    /// "Returns the last error that has been produced by any of the runtime
    /// calls in the same instance of the CUDA Runtime library in the host
    /// thread and resets it to cudaSuccess."
    fn cudaGetLastError() -> cudaError_t {
        last_error(true)
    }

    /// "This call does not reset the error to cudaSuccess like cudaGetLastError()."
    fn cudaPeekAtLastError() -> cudaError_t {
        last_error(false)
    }

    /// The runtime's version: 13.5, or 12.8 when loaded as `libcudart.so.12`.
    fn cudaRuntimeGetVersion(runtimeVersion: *mut c_int) -> cudaError_t {
        // SAFETY: an out-pointer from the caller.
        unsafe { put(runtimeVersion, fake().runtime_version) }.err().unwrap_or(0)
    }

    /// The device count (`DIPU_FAKE_DEVICES`).
    fn cudaGetDeviceCount(count: *mut c_int) -> cudaError_t {
        rt("cudaGetDeviceCount", String::new, |f| {
            // SAFETY: an out-pointer from the caller.
            unsafe { put(count, f.devices.len() as c_int) }
        })
    }

    /// The calling thread's current device.
    fn cudaGetDevice(device: *mut c_int) -> cudaError_t {
        rt("cudaGetDevice", String::new, |_| {
            // SAFETY: an out-pointer from the caller.
            unsafe { put(device, current_device()) }
        })
    }

    /// "Sets device as the current device for the calling host thread.",
    /// and makes its primary context current.
    fn cudaSetDevice(device: c_int) -> cudaError_t {
        rt("cudaSetDevice", || device.to_string(), |f| {
            if !f.valid(device) {
                return Err(cudaErrorInvalidDevice);
            }
            thread::set_current_device(device);
            set_context(primary(device));
            Ok(())
        })
    }

    /// "Blocks until the device has completed all preceding requested tasks."
    fn cudaDeviceSynchronize() -> cudaError_t {
        rt("cudaDeviceSynchronize", String::new, |f| {
            f.drain_device(current_device());
            Ok(())
        })
    }

    /// Compute capability 9.0, 132 multiprocessors.
    fn cudaDeviceGetAttribute(value: *mut c_int, attr: cudaDeviceAttr, device: c_int) -> cudaError_t {
        rt("cudaDeviceGetAttribute", || format!("{attr} {device}"), |f| {
            if !f.valid(device) {
                return Err(cudaErrorInvalidDevice);
            }
            let v = match attr {
                75 => 9,
                76 => 0,
                16 => 132,
                _ => 0,
            };
            // SAFETY: an out-pointer from the caller.
            unsafe { put(value, v) }
        })
    }

    /// Writes only `name` (the first 256 bytes of `struct cudaDeviceProp`).
    fn cudaGetDeviceProperties(prop: *mut cudaDeviceProp, device: c_int) -> cudaError_t {
        rt("cudaGetDeviceProperties", || device.to_string(), |f| {
            if !f.valid(device) {
                return Err(cudaErrorInvalidDevice);
            }
            if prop.is_null() {
                return Err(cudaErrorInvalidValue);
            }
            let name = format!("dipu fake CUDA device {device}\0");
            // SAFETY: the caller's struct starts with `char name[256]`.
            unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), prop.cast::<u8>(), name.len()) };
            Ok(())
        })
    }

    /// Free and total memory of the current device (`DIPU_FAKE_MEMORY`).
    fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> cudaError_t {
        rt("cudaMemGetInfo", String::new, |f| {
            let d = current_device();
            let used = f.used(d).min(f.cfg.memory);
            // SAFETY: out-pointers from the caller.
            unsafe {
                put(free, (f.cfg.memory - used) as usize)?;
                put(total, f.cfg.memory as usize)
            }
        })
    }

    /// Device memory on the current device; `DIPU_FAKE_FAULTS=oom@N` fails the N-th.
    fn cudaMalloc(devPtr: *mut *mut c_void, size: usize) -> cudaError_t {
        rt("cudaMalloc", || size.to_string(), |f| {
            let d = current_device();
            set_context(primary(d));
            if size == 0 {
                // SAFETY: an out-pointer from the caller.
                return unsafe { put(devPtr, std::ptr::null_mut()) };
            }
            let ptr = allocate(f, size, Some(d))?;
            f.device_mem.lock().insert(ptr, (size, d));
            // SAFETY: an out-pointer from the caller.
            unsafe { put(devPtr, ptr as *mut c_void) }
        })
    }

    /// Null is a no-op; an unknown or interior pointer is
    /// cudaErrorInvalidValue. Waits for the device's queued work first.
    fn cudaFree(devPtr: *mut c_void) -> cudaError_t {
        rt("cudaFree", || format!("{devPtr:p}"), |f| {
            if devPtr.is_null() {
                return Ok(());
            }
            let Some(&(n, d)) = f.device_mem.lock().get(&(devPtr as usize)) else {
                return Err(cudaErrorInvalidValue);
            };
            f.drain_device(d);
            f.device_mem.lock().remove(&(devPtr as usize));
            release(devPtr as usize, n);
            Ok(())
        })
    }

    /// Page-locked host memory.
    fn cudaMallocHost(ptr: *mut *mut c_void, size: usize) -> cudaError_t {
        rt("cudaMallocHost", || size.to_string(), |f| {
            if size == 0 {
                // SAFETY: an out-pointer from the caller.
                return unsafe { put(ptr, std::ptr::null_mut()) };
            }
            let p = allocate(f, size, None)?;
            f.pinned.lock().insert(p, size);
            // SAFETY: an out-pointer from the caller.
            unsafe { put(ptr, p as *mut c_void) }
        })
    }

    /// Frees page-locked memory (after the device's queued work).
    fn cudaFreeHost(ptr: *mut c_void) -> cudaError_t {
        rt("cudaFreeHost", || format!("{ptr:p}"), |f| {
            if ptr.is_null() {
                return Ok(());
            }
            let Some(&n) = f.pinned.lock().get(&(ptr as usize)) else {
                return Err(cudaErrorInvalidValue);
            };
            for d in 0..f.devices.len() as i32 {
                f.drain_device(d);
            }
            f.pinned.lock().remove(&(ptr as usize));
            release(ptr as usize, n);
            Ok(())
        })
    }

    /// "this function is asynchronous with respect to the host unless devPtr
    /// refers to pinned host memory": queued on the legacy default stream.
    fn cudaMemset(devPtr: *mut c_void, value: c_int, count: usize) -> cudaError_t {
        rt("cudaMemset", || format!("{devPtr:p} {value} {count}"), |f| {
            memset_on(f, Queue::Legacy(current_device()), devPtr, value, count).map(|_| ())
        })
    }

    /// Queued on `stream`.
    fn cudaMemsetAsync(devPtr: *mut c_void, value: c_int, count: usize, stream: cudaStream_t) -> cudaError_t {
        rt("cudaMemsetAsync", || format!("{devPtr:p} {value} {count} {}", stream_text(stream)), |f| {
            memset_on(f, f.queue(stream)?, devPtr, value, count).map(|_| ())
        })
    }

    /// Host to device from pageable memory returns once staged ("The
    /// function will return once the pageable buffer has been copied to the
    /// staging memory for DMA transfer to device memory, but the DMA to
    /// final destination may not have completed"); device to host returns
    /// once done; device to device returns at once ("For transfers from
    /// device memory to device memory, no host-side synchronization is
    /// performed").
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind) -> cudaError_t {
        rt("cudaMemcpy", || format!("{dst:p} {src:p} {count} kind={kind}"), |f| {
            let (dst, src) = (dst as usize, src as usize);
            let kind = check_copy(f, dst, src, count, kind)?;
            if count == 0 {
                return Ok(());
            }
            let q = Queue::Legacy(current_device());
            let worker = f.worker(&q);
            match kind {
                // "For transfers from any host memory to any host memory,
                // the function is fully synchronous with respect to the host."
                0 => {
                    worker.drain();
                    // SAFETY: host ranges of `count` bytes from the caller.
                    unsafe { Addr(dst).copy_from(Addr(src), count) };
                }
                1 => {
                    // "a stream sync is performed before the copy is initiated"
                    worker.drain();
                    let pinned = f.classify(src, count) == Mem::Pinned;
                    let t = queue_copy(f, &q, dst, src, count, !pinned);
                    if pinned {
                        // "For transfers from pinned host memory to device
                        // memory, the function is synchronous with respect
                        // to the host."
                        worker.wait(t);
                    }
                }
                2 => {
                    let t = queue_copy(f, &q, dst, src, count, false);
                    worker.wait(t);
                }
                _ => {
                    queue_copy(f, &q, dst, src, count, false);
                }
            }
            Ok(())
        })
    }

    /// Queued on `stream`; pageable host sources are staged at the call,
    /// and copies to pageable host memory return once done ("For transfers
    /// between device memory and pageable host memory, the function might
    /// be synchronous with respect to host").
    fn cudaMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        count: usize,
        kind: cudaMemcpyKind,
        stream: cudaStream_t,
    ) -> cudaError_t {
        rt("cudaMemcpyAsync", || format!("{dst:p} {src:p} {count} kind={kind} {}", stream_text(stream)), |f| {
            let q = f.queue(stream)?;
            let (dst, src) = (dst as usize, src as usize);
            let kind = check_copy(f, dst, src, count, kind)?;
            if count == 0 {
                return Ok(());
            }
            let staged = kind == 1 && f.classify(src, count) == Mem::Pageable;
            let t = queue_copy(f, &q, dst, src, count, staged);
            if kind == 2 && f.classify(dst, count) == Mem::Pageable || kind == 0 {
                f.worker(&q).wait(t);
            }
            Ok(())
        })
    }

    /// "Note that this function is asynchronous with respect to the host,
    /// but serialized with respect all pending and future asynchronous work
    /// in to the current device, srcDevice, and dstDevice": waits for the
    /// pending work, queues the copy on the legacy stream and returns.
    fn cudaMemcpyPeer(
        dst: *mut c_void,
        dstDevice: c_int,
        src: *const c_void,
        srcDevice: c_int,
        count: usize,
    ) -> cudaError_t {
        rt("cudaMemcpyPeer", || format!("{dst:p} {dstDevice} {src:p} {srcDevice} {count}"), |f| {
            peer_copy(f, None, dst as usize, dstDevice, src as usize, srcDevice, count)
        })
    }

    /// Queued on `stream`.
    fn cudaMemcpyPeerAsync(
        dst: *mut c_void,
        dstDevice: c_int,
        src: *const c_void,
        srcDevice: c_int,
        count: usize,
        stream: cudaStream_t,
    ) -> cudaError_t {
        rt("cudaMemcpyPeerAsync", || format!("{dst:p} {dstDevice} {src:p} {srcDevice} {count} {}", stream_text(stream)), |f| {
            let q = f.queue(stream)?;
            peer_copy(f, Some(q), dst as usize, dstDevice, src as usize, srcDevice, count)
        })
    }

    /// Where a pointer is: device (`cudaMemoryTypeDevice`), pinned host
    /// (`cudaMemoryTypeHost`) or other host memory ("cudaMemoryTypeUnregistered").
    fn cudaPointerGetAttributes(attributes: *mut cudaPointerAttributes, ptr: *const c_void) -> cudaError_t {
        rt("cudaPointerGetAttributes", || format!("{ptr:p}"), |f| {
            let p = ptr as *mut c_void;
            let (type_, device, dp, hp) = match f.classify(ptr as usize, 1) {
                Mem::Device(d) => (2, d, p, std::ptr::null_mut()),
                Mem::Virtual => (2, current_device(), p, std::ptr::null_mut()),
                Mem::Pinned => (1, current_device(), p, p),
                Mem::Pageable => (0, -2, std::ptr::null_mut(), p),
            };
            // SAFETY: an out-pointer from the caller.
            unsafe {
                put(attributes, PointerAttributes { type_, device, device_pointer: dp, host_pointer: hp, reserved: [0; 8] })
            }
        })
    }

    /// Every pair of distinct devices can access each other.
    #[cfg(not(feature = "old-libraries"))]
    fn cudaDeviceCanAccessPeer(canAccessPeer: *mut c_int, device: c_int, peerDevice: c_int) -> cudaError_t {
        rt("cudaDeviceCanAccessPeer", || format!("{device} {peerDevice}"), |f| {
            if !f.valid(device) || !f.valid(peerDevice) {
                return Err(cudaErrorInvalidDevice);
            }
            // SAFETY: an out-pointer from the caller.
            unsafe { put(canAccessPeer, c_int::from(device != peerDevice)) }
        })
    }

    /// "On success, all allocations from peerDevice will immediately be
    /// accessible by the current device."; twice is
    /// cudaErrorPeerAccessAlreadyEnabled.
    #[cfg(not(feature = "old-libraries"))]
    fn cudaDeviceEnablePeerAccess(peerDevice: c_int, flags: c_uint) -> cudaError_t {
        rt("cudaDeviceEnablePeerAccess", || format!("{peerDevice} {flags}"), |f| {
            let d = current_device();
            if !f.valid(peerDevice) || peerDevice == d {
                return Err(cudaErrorInvalidDevice);
            }
            if flags != 0 {
                return Err(cudaErrorInvalidValue);
            }
            let mut peers = f.devices[d as usize].peers.lock();
            if peers.contains(&peerDevice) {
                return Err(cudaErrorPeerAccessAlreadyEnabled);
            }
            peers.push(peerDevice);
            Ok(())
        })
    }

    /// Priorities 0 (least) to -5 (greatest).
    fn cudaDeviceGetStreamPriorityRange(leastPriority: *mut c_int, greatestPriority: *mut c_int) -> cudaError_t {
        rt("cudaDeviceGetStreamPriorityRange", String::new, |_| {
            // SAFETY: out-pointers from the caller (either may be null).
            unsafe {
                if !leastPriority.is_null() {
                    leastPriority.write(0);
                }
                if !greatestPriority.is_null() {
                    greatestPriority.write(-5);
                }
            }
            Ok(())
        })
    }

    /// A stream with its own worker thread (`DIPU_FAKE_LATENCY_US` per
    /// operation); without `cudaStreamNonBlocking` it synchronises with the
    /// legacy default stream.
    fn cudaStreamCreateWithPriority(pStream: *mut cudaStream_t, flags: c_uint, priority: c_int) -> cudaError_t {
        rt("cudaStreamCreateWithPriority", || format!("flags={flags} {priority}"), |f| {
            if pStream.is_null() || flags > 1 {
                return Err(cudaErrorInvalidValue);
            }
            let d = current_device();
            set_context(primary(d));
            let worker = dipu_fakekit::stream::Worker::new(&format!("fake-cuda-stream-{d}"), f.cfg.latency);
            let handle = f.streams.insert(Arc::new(Stream { device: d, worker, blocking: flags & 1 == 0 }));
            // SAFETY: checked non-null above.
            unsafe { put(pStream, handle as cudaStream_t) }
        })
    }

    /// "In case the device is still doing work in the stream stream when
    /// cudaStreamDestroy() is called, the function will return immediately
    /// and the resources associated with stream will be released
    /// automatically once the device has completed all work in stream."
    fn cudaStreamDestroy(stream: cudaStream_t) -> cudaError_t {
        rt("cudaStreamDestroy", || stream_text(stream), |f| {
            match f.streams.remove(stream as usize) {
                Some(s) => {
                    s.worker.close();
                    if !s.worker.idle() {
                        f.retired.lock().push(s);
                    }
                    Ok(())
                }
                None => Err(cudaErrorInvalidResourceHandle),
            }
        })
    }

    /// "Blocks until stream has completed all operations."
    fn cudaStreamSynchronize(stream: cudaStream_t) -> cudaError_t {
        rt("cudaStreamSynchronize", || stream_text(stream), |f| {
            let q = f.queue(stream)?;
            f.worker(&q).drain();
            Ok(())
        })
    }

    /// "Returns cudaSuccess if all operations in stream have completed, or
    /// cudaErrorNotReady if not."
    fn cudaStreamQuery(stream: cudaStream_t) -> cudaError_t {
        rt("cudaStreamQuery", || stream_text(stream), |f| {
            let q = f.queue(stream)?;
            if f.worker(&q).idle() { Ok(()) } else { Err(cudaErrorNotReady) }
        })
    }

    /// "Makes all future work submitted to stream wait for all work
    /// captured in event." (the record made last before this call).
    fn cudaStreamWaitEvent(stream: cudaStream_t, event: cudaEvent_t, flags: c_uint) -> cudaError_t {
        rt("cudaStreamWaitEvent", || format!("{} event={event:p} {flags}", stream_text(stream)), |f| {
            let q = f.queue(stream)?;
            let e = f.events.get(event as usize).ok_or(cudaErrorInvalidResourceHandle)?;
            f.submit(&q, e.waiter());
            Ok(())
        })
    }

    /// Runs `fn` on the one host-callback thread when the stream reaches
    /// it; the stream waits for it ("The function will be called after
    /// currently enqueued work and will block work added after it."; "Host
    /// functions without a mandated order (such as in independent streams)
    /// execute in undefined order and may be serialized.").
    fn cudaLaunchHostFunc(stream: cudaStream_t, func: cudaHostFn_t, userData: *mut c_void) -> cudaError_t {
        rt("cudaLaunchHostFunc", || stream_text(stream), |f| {
            let q = f.queue(stream)?;
            let func = func.ok_or(cudaErrorInvalidValue)?;
            let data = Addr(userData as usize);
            f.submit(
                &q,
                Box::new(move || {
                    // SAFETY: the caller's host function and its data.
                    host::run(Box::new(move || unsafe { func(data.0 as *mut c_void) }))
                }),
            );
            Ok(())
        })
    }

    /// An event; `cudaEventDisableTiming` (2) keeps no time.
    fn cudaEventCreateWithFlags(event: *mut cudaEvent_t, flags: c_uint) -> cudaError_t {
        rt("cudaEventCreateWithFlags", || flags.to_string(), |f| {
            if event.is_null() || flags & !0b111 != 0 {
                return Err(cudaErrorInvalidValue);
            }
            let handle = f.events.insert(Event::new(flags & 2 == 0));
            // SAFETY: checked non-null above.
            unsafe { put(event, handle as cudaEvent_t) }
        })
    }

    /// "An event may be destroyed before it is complete ... the call does
    /// not block on completion of the event, and any associated resources
    /// will automatically be released asynchronously at completion."
    fn cudaEventDestroy(event: cudaEvent_t) -> cudaError_t {
        rt("cudaEventDestroy", || format!("{event:p}"), |f| {
            f.events.remove(event as usize).map(|_| ()).ok_or(cudaErrorInvalidResourceHandle)
        })
    }

    /// A new record generation, completed when the stream reaches it.
    fn cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t) -> cudaError_t {
        rt("cudaEventRecord", || format!("event={event:p} {}", stream_text(stream)), |f| {
            let q = f.queue(stream)?;
            let e = f.events.get(event as usize).ok_or(cudaErrorInvalidResourceHandle)?;
            e.record(f.worker(&q));
            Ok(())
        })
    }

    /// "Returns cudaSuccess if all captured work has been completed, or
    /// cudaErrorNotReady if any captured work is incomplete." (A
    /// never-recorded event captured nothing: cudaSuccess.)
    fn cudaEventQuery(event: cudaEvent_t) -> cudaError_t {
        rt("cudaEventQuery", || format!("{event:p}"), |f| {
            let e = f.events.get(event as usize).ok_or(cudaErrorInvalidResourceHandle)?;
            if e.query() { Ok(()) } else { Err(cudaErrorNotReady) }
        })
    }

    /// Waits for the last record.
    fn cudaEventSynchronize(event: cudaEvent_t) -> cudaError_t {
        rt("cudaEventSynchronize", || format!("{event:p}"), |f| {
            let e = f.events.get(event as usize).ok_or(cudaErrorInvalidResourceHandle)?;
            e.wait();
            Ok(())
        })
    }

    /// "If cudaEventRecord() has not been called on either event, then
    /// cudaErrorInvalidResourceHandle is returned. ... If either event was
    /// created with the cudaEventDisableTiming flag, then this function
    /// will return cudaErrorInvalidResourceHandle"; pending: cudaErrorNotReady.
    fn cudaEventElapsedTime(ms: *mut f32, start: cudaEvent_t, end: cudaEvent_t) -> cudaError_t {
        rt("cudaEventElapsedTime", || format!("{start:p} {end:p}"), |f| {
            let a = f.events.get(start as usize).ok_or(cudaErrorInvalidResourceHandle)?;
            let b = f.events.get(end as usize).ok_or(cudaErrorInvalidResourceHandle)?;
            if !a.timing || !b.timing || !a.recorded() || !b.recorded() {
                return Err(cudaErrorInvalidResourceHandle);
            }
            let (Some(ta), Some(tb)) = (a.completed_at(), b.completed_at()) else {
                return Err(cudaErrorNotReady);
            };
            let millis = if tb >= ta {
                (tb - ta).as_secs_f32() * 1e3
            } else {
                -((ta - tb).as_secs_f32() * 1e3)
            };
            // SAFETY: an out-pointer from the caller.
            unsafe { put(ms, millis) }
        })
    }
}

fn memset_on(
    f: &'static Fake,
    q: Queue,
    ptr: *mut c_void,
    value: c_int,
    count: usize,
) -> Result<u64, i32> {
    let device = match &q {
        Queue::Legacy(d) => *d,
        Queue::Created(s) => s.device,
    };
    if count == 0 {
        return Ok(0);
    }
    f.device_side(ptr as usize, count, device, true)?;
    let at = Addr(ptr as usize);
    Ok(f.submit(
        &q,
        Box::new(move || {
            // SAFETY: checked device memory the caller keeps alive until
            // the stream passes the fill.
            unsafe { std::ptr::write_bytes(at.0 as *mut u8, value as u8, count) }
        }),
    ))
}

/// A peer copy: with peer access enabled from `dst_dev` to `src_dev` the
/// destination device reads the source directly (and so needs access to
/// it); otherwise it is staged through the host, each device touching only
/// its own memory.
fn peer_copy(
    f: &'static Fake,
    q: Option<Queue>,
    dst: usize,
    dst_dev: c_int,
    src: usize,
    src_dev: c_int,
    n: usize,
) -> Result<(), i32> {
    if !f.valid(dst_dev) || !f.valid(src_dev) {
        return Err(cudaErrorInvalidDevice);
    }
    if n == 0 {
        return Ok(());
    }
    let direct = dst_dev != src_dev && f.devices[dst_dev as usize].peers.lock().contains(&src_dev);
    let reader = if direct { dst_dev } else { src_dev };
    f.device_side(src, n, reader, false)?;
    f.device_side(dst, n, dst_dev, true)?;
    let q = match q {
        Some(q) => q,
        None => {
            for d in [current_device(), src_dev, dst_dev] {
                f.drain_device(d);
            }
            Queue::Legacy(current_device())
        }
    };
    queue_copy(f, &q, dst, src, n, false);
    Ok(())
}
