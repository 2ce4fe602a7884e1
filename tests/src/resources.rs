//! RAII wrappers around the vendor's unsafe calls, so that checks are safe
//! code: device and host buffers, streams, events, and a gate that holds a
//! stream busy until it is opened.
//!
//! The invariant that makes the asynchronous helpers safe: a buffer's `Drop`
//! first waits for all work on every device (as `cudaFree` does implicitly)
//! and only then frees the memory, so no stream can still be using a buffer
//! when it goes away. A [`Mem`] borrows its buffer, so it cannot outlive it.
//! Checks read host buffers only after synchronizing the stream that wrote
//! them.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use dipu_deviceapi::{
    CopyKind, DeviceApi, Error, ErrorKind, EventHandle, HostCallback, Result, StreamHandle,
};

use crate::check::{ensure, During, Fail, Verdict};

/// Waits for all work on every device, then restores the current device.
fn quiesce(api: &dyn DeviceApi) {
    let Ok(count) = api.device_count() else {
        return;
    };
    let current = api.current_device().ok();
    for device in 0..count {
        if api.set_device(device).is_ok() {
            let _ = api.synchronize_device();
        }
    }
    if let Some(device) = current {
        let _ = api.set_device(device);
    }
}

/// Makes a device current for a while, restoring the previous one on drop.
pub(crate) struct OnDevice<'a> {
    api: &'a dyn DeviceApi,
    previous: Option<i32>,
}

impl<'a> OnDevice<'a> {
    /// Makes `device` current for the calling thread until the guard drops.
    pub(crate) fn switch(api: &'a dyn DeviceApi, device: i32) -> Result<Self> {
        let current = api.current_device()?;
        if current == device {
            return Ok(OnDevice {
                api,
                previous: None,
            });
        }
        api.set_device(device)?;
        Ok(OnDevice {
            api,
            previous: Some(current),
        })
    }
}

impl Drop for OnDevice<'_> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            let _ = self.api.set_device(previous);
        }
    }
}

/// A range of a live buffer: where a copy reads or writes.
#[derive(Clone, Copy)]
pub(crate) struct Mem<'b> {
    ptr: *mut c_void,
    room: usize,
    on_device: bool,
    _buffer: PhantomData<&'b ()>,
}

impl Mem<'_> {
    /// The address.
    pub(crate) fn ptr(self) -> *mut c_void {
        self.ptr
    }

    fn check_room(self, bytes: usize, role: &str) {
        assert!(
            bytes <= self.room,
            "test bug: {role} has {} bytes of room, {bytes} requested",
            self.room
        );
    }
}

/// The direction of a copy from `src` to `dst`.
pub(crate) fn copy_kind(dst: Mem<'_>, src: Mem<'_>) -> CopyKind {
    match (src.on_device, dst.on_device) {
        (false, true) => CopyKind::HostToDevice,
        (true, false) => CopyKind::DeviceToHost,
        (true, true) => CopyKind::DeviceToDevice,
        (false, false) => CopyKind::HostToHost,
    }
}

/// Copies `bytes` from `src` to `dst` with `memcpy`, in the direction their
/// kinds of memory imply.
pub(crate) fn memcpy(api: &dyn DeviceApi, dst: Mem<'_>, src: Mem<'_>, bytes: usize) -> Result<()> {
    dst.check_room(bytes, "the destination");
    src.check_room(bytes, "the source");
    // SAFETY: both ranges lie inside buffers that the `Mem`s borrow, so they
    // are live vendor (or host) allocations of at least `bytes` bytes.
    unsafe { api.memcpy(dst.ptr, src.ptr, bytes, copy_kind(dst, src)) }
}

/// Copies between devices with `memcpy_peer`.
pub(crate) fn memcpy_peer(
    api: &dyn DeviceApi,
    dst: &DeviceBuffer<'_>,
    src: &DeviceBuffer<'_>,
    bytes: usize,
) -> Result<()> {
    dst.all().check_room(bytes, "the destination");
    src.all().check_room(bytes, "the source");
    // SAFETY: both are live device allocations of at least `bytes` bytes on
    // the devices named.
    unsafe { api.memcpy_peer(dst.ptr, dst.device, src.ptr, src.device, bytes) }
}

/// Device memory from `malloc`, freed on drop.
pub(crate) struct DeviceBuffer<'a> {
    api: &'a dyn DeviceApi,
    ptr: *mut c_void,
    len: usize,
    device: i32,
}

impl<'a> DeviceBuffer<'a> {
    /// Allocates `len` bytes (more than 0) on the current device.
    pub(crate) fn new(api: &'a dyn DeviceApi, len: usize) -> Result<Self> {
        let device = api.current_device()?;
        let ptr = api.malloc(len)?;
        if ptr.is_null() && len > 0 {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("malloc({len}) returned a null pointer and no error"),
            ));
        }
        Ok(DeviceBuffer {
            api,
            ptr,
            len,
            device,
        })
    }

    /// Allocates `len` bytes on `device`, leaving the current device as it was.
    pub(crate) fn on(api: &'a dyn DeviceApi, device: i32, len: usize) -> Result<Self> {
        let _on = OnDevice::switch(api, device)?;
        Self::new(api, len)
    }

    /// The allocation's address.
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The whole buffer as a copy operand.
    pub(crate) fn all(&self) -> Mem<'_> {
        self.at(0)
    }

    /// The buffer from `offset` on, as a copy operand.
    pub(crate) fn at(&self, offset: usize) -> Mem<'_> {
        assert!(
            offset <= self.len,
            "test bug: offset {offset} > {}",
            self.len
        );
        Mem {
            ptr: self.ptr.cast::<u8>().wrapping_add(offset).cast(),
            room: self.len - offset,
            on_device: true,
            _buffer: PhantomData,
        }
    }

    /// Sets every byte to `value` with `memset`.
    pub(crate) fn fill(&self, value: u8) -> Result<()> {
        self.memset(0, value, self.len)
    }

    /// Sets `bytes` bytes from `offset` to `value` with `memset`.
    pub(crate) fn memset(&self, offset: usize, value: u8, bytes: usize) -> Result<()> {
        let dst = self.at(offset);
        dst.check_room(bytes, "the memset range");
        let _on = OnDevice::switch(self.api, self.device)?;
        // SAFETY: the range lies inside this live allocation.
        unsafe { self.api.memset(dst.ptr, value, bytes) }
    }

    /// Writes `data` at `offset` with a host-to-device `memcpy`.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let dst = self.at(offset);
        dst.check_room(data.len(), "the write range");
        let _on = OnDevice::switch(self.api, self.device)?;
        // SAFETY: the destination lies inside this live allocation and the
        // source is a host slice of `data.len()` bytes; the copy is synchronous.
        unsafe {
            self.api.memcpy(
                dst.ptr,
                data.as_ptr().cast(),
                data.len(),
                CopyKind::HostToDevice,
            )
        }
    }

    /// Reads `bytes` bytes from `offset` with a device-to-host `memcpy`.
    pub(crate) fn read(&self, offset: usize, bytes: usize) -> Result<Vec<u8>> {
        let src = self.at(offset);
        src.check_room(bytes, "the read range");
        let mut out = vec![0u8; bytes];
        let _on = OnDevice::switch(self.api, self.device)?;
        // SAFETY: the source lies inside this live allocation and the
        // destination is a host vector of `bytes` bytes; the copy is synchronous.
        unsafe {
            self.api.memcpy(
                out.as_mut_ptr().cast(),
                src.ptr,
                bytes,
                CopyKind::DeviceToHost,
            )
        }?;
        Ok(out)
    }

    /// Reads the whole buffer.
    pub(crate) fn read_all(&self) -> Result<Vec<u8>> {
        self.read(0, self.len)
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        quiesce(self.api);
        // SAFETY: `ptr` came from this vendor's `malloc` and is freed only
        // here; no stream can still use it after `quiesce`.
        let _ = unsafe { self.api.free(self.ptr) };
    }
}

/// Host memory: page-locked from `malloc_host`, or ordinary (pageable)
/// heap memory. Freed on drop.
pub(crate) struct HostBuffer<'a> {
    api: &'a dyn DeviceApi,
    ptr: *mut u8,
    len: usize,
    pinned: bool,
}

impl<'a> HostBuffer<'a> {
    /// `len` zeroed bytes of page-locked memory from `malloc_host`.
    pub(crate) fn pinned(api: &'a dyn DeviceApi, len: usize) -> Result<Self> {
        let ptr = api.malloc_host(len)?.cast::<u8>();
        if ptr.is_null() && len > 0 {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("malloc_host({len}) returned a null pointer and no error"),
            ));
        }
        // SAFETY: a fresh allocation of `len` writable bytes.
        unsafe { ptr.write_bytes(0, len) };
        Ok(HostBuffer {
            api,
            ptr,
            len,
            pinned: true,
        })
    }

    /// `len` zeroed bytes of ordinary heap memory.
    pub(crate) fn pageable(api: &'a dyn DeviceApi, len: usize) -> Self {
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        HostBuffer {
            api,
            ptr,
            len,
            pinned: false,
        }
    }

    /// Either kind, chosen by `pinned`.
    pub(crate) fn new(api: &'a dyn DeviceApi, len: usize, pinned: bool) -> Result<Self> {
        if pinned {
            Self::pinned(api, len)
        } else {
            Ok(Self::pageable(api, len))
        }
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The whole buffer as a copy operand.
    pub(crate) fn all(&self) -> Mem<'_> {
        self.at(0)
    }

    /// The buffer from `offset` on, as a copy operand.
    pub(crate) fn at(&self, offset: usize) -> Mem<'_> {
        assert!(
            offset <= self.len,
            "test bug: offset {offset} > {}",
            self.len
        );
        Mem {
            ptr: self.ptr.wrapping_add(offset).cast(),
            room: self.len - offset,
            on_device: false,
            _buffer: PhantomData,
        }
    }

    /// Copies `data` in at `offset` (no stream may be using the range).
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        self.at(offset).check_room(data.len(), "the write range");
        // SAFETY: the range lies inside this live allocation, and the checks
        // write host buffers only while no stream uses them.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
    }

    /// Copies `bytes` bytes out from `offset` (after the streams writing it
    /// were synchronized).
    pub(crate) fn read(&self, offset: usize, bytes: usize) -> Vec<u8> {
        self.at(offset).check_room(bytes, "the read range");
        let mut out = vec![0u8; bytes];
        // SAFETY: the range lies inside this live allocation, and the checks
        // read host buffers only after the streams writing them are done.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), bytes) };
        out
    }

    /// The whole buffer's bytes.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.read(0, self.len)
    }

    /// A function that reads the buffer's bytes, for a host callback.
    ///
    /// # Safety
    ///
    /// The function must only run while the buffer is alive, e.g. in a host
    /// callback on a stream (the buffer's drop waits for every stream), and
    /// only after the stream work writing the buffer is done.
    pub(crate) unsafe fn reader(&self) -> impl Fn() -> Vec<u8> + Send + 'static {
        let (addr, len) = (self.ptr as usize, self.len);
        move || {
            let mut out = vec![0u8; len];
            // SAFETY: the caller of `reader` promised the buffer is alive and
            // no longer written while this runs.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), len) };
            out
        }
    }
}

impl Drop for HostBuffer<'_> {
    fn drop(&mut self) {
        quiesce(self.api);
        if self.pinned {
            // SAFETY: `ptr` came from this vendor's `malloc_host` and is freed
            // only here; no stream can still use it after `quiesce`.
            let _ = unsafe { self.api.free_host(self.ptr.cast()) };
        } else {
            let slice = std::ptr::slice_from_raw_parts_mut(self.ptr, self.len);
            // SAFETY: `ptr` and `len` came from `Box::into_raw` of a boxed
            // slice in `pageable` and are reclaimed only here.
            drop(unsafe { Box::from_raw(slice) });
        }
    }
}

/// A stream from `stream_create` (destroyed on drop), or the default stream.
pub(crate) struct OwnedStream<'a> {
    api: &'a dyn DeviceApi,
    handle: StreamHandle,
    owned: bool,
}

impl<'a> OwnedStream<'a> {
    /// Creates a stream on the current device.
    pub(crate) fn new(api: &'a dyn DeviceApi) -> Result<Self> {
        Self::with_priority(api, 0)
    }

    /// Creates a stream with `priority` on the current device.
    pub(crate) fn with_priority(api: &'a dyn DeviceApi, priority: i32) -> Result<Self> {
        let handle = api.stream_create(priority)?;
        Ok(OwnedStream {
            api,
            handle,
            owned: true,
        })
    }

    /// The current device's default stream (never destroyed by this wrapper).
    pub(crate) fn default_stream(api: &'a dyn DeviceApi) -> Self {
        OwnedStream {
            api,
            handle: StreamHandle::DEFAULT,
            owned: false,
        }
    }

    /// The vendor's handle.
    pub(crate) fn handle(&self) -> StreamHandle {
        self.handle
    }

    /// `stream_synchronize`.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: the handle is live while `self` is.
        unsafe { self.api.stream_synchronize(self.handle) }
    }

    /// `stream_query`: whether all queued work is done.
    pub(crate) fn query(&self) -> Result<bool> {
        // SAFETY: the handle is live while `self` is.
        unsafe { self.api.stream_query(self.handle) }
    }

    /// `memset_async` of `bytes` bytes of device memory at `dst`.
    pub(crate) fn memset(&self, dst: Mem<'_>, value: u8, bytes: usize) -> Result<()> {
        assert!(dst.on_device, "test bug: memset of host memory");
        dst.check_room(bytes, "the memset range");
        // SAFETY: the range lies in a live device buffer whose drop waits for
        // every stream, and the stream handle is live.
        unsafe { self.api.memset_async(dst.ptr, value, bytes, self.handle) }
    }

    /// `memcpy_async` of `bytes` bytes from `src` to `dst`.
    pub(crate) fn copy(&self, dst: Mem<'_>, src: Mem<'_>, bytes: usize) -> Result<()> {
        dst.check_room(bytes, "the destination");
        src.check_room(bytes, "the source");
        // SAFETY: both ranges lie in live buffers whose drops wait for every
        // stream, and the stream handle is live.
        unsafe {
            self.api
                .memcpy_async(dst.ptr, src.ptr, bytes, copy_kind(dst, src), self.handle)
        }
    }

    /// `memcpy_peer_async` of `bytes` bytes between two device buffers.
    pub(crate) fn copy_peer(
        &self,
        dst: &DeviceBuffer<'_>,
        src: &DeviceBuffer<'_>,
        bytes: usize,
    ) -> Result<()> {
        dst.all().check_room(bytes, "the destination");
        src.all().check_room(bytes, "the source");
        // SAFETY: both are live device buffers whose drops wait for every
        // stream, and the stream handle is live.
        unsafe {
            self.api
                .memcpy_peer_async(dst.ptr, dst.device, src.ptr, src.device, bytes, self.handle)
        }
    }

    /// `launch_host_func`.
    pub(crate) fn launch(&self, callback: HostCallback) -> Result<()> {
        // SAFETY: the stream handle is live.
        unsafe { self.api.launch_host_func(self.handle, callback) }
    }

    /// Keeps the stream busy for `ms` with a sleeping host callback.
    pub(crate) fn sleep(&self, ms: u64) -> Result<()> {
        self.launch(crate::check::sleep_callback(ms))
    }

    /// `event_record` of `event` on this stream.
    pub(crate) fn record(&self, event: &OwnedEvent<'_>) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { self.api.event_record(event.handle, self.handle) }
    }

    /// `stream_wait_event` for `event`.
    pub(crate) fn wait(&self, event: &OwnedEvent<'_>) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { self.api.stream_wait_event(self.handle, event.handle) }
    }
}

impl Drop for OwnedStream<'_> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the handle came from `stream_create` and is destroyed
            // only here.
            unsafe {
                let _ = self.api.stream_synchronize(self.handle);
                let _ = self.api.stream_destroy(self.handle);
            }
        }
    }
}

/// An event from `event_create`, destroyed on drop.
pub(crate) struct OwnedEvent<'a> {
    api: &'a dyn DeviceApi,
    handle: EventHandle,
}

impl<'a> OwnedEvent<'a> {
    /// Creates an event on the current device (`timing` enables elapsed time).
    pub(crate) fn new(api: &'a dyn DeviceApi, timing: bool) -> Result<Self> {
        let handle = api.event_create(timing)?;
        Ok(OwnedEvent { api, handle })
    }

    /// `event_query`: whether the last record is done.
    pub(crate) fn query(&self) -> Result<bool> {
        // SAFETY: the handle is live while `self` is.
        unsafe { self.api.event_query(self.handle) }
    }

    /// `event_synchronize`.
    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: the handle is live while `self` is.
        unsafe { self.api.event_synchronize(self.handle) }
    }

    /// `event_elapsed_ms(self, end)`: milliseconds from this event to `end`.
    pub(crate) fn elapsed_ms(&self, end: &OwnedEvent<'_>) -> Result<f32> {
        // SAFETY: both handles are live.
        unsafe { self.api.event_elapsed_ms(self.handle, end.handle) }
    }
}

impl Drop for OwnedEvent<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from `event_create` and is destroyed only here.
        let _ = unsafe { self.api.event_destroy(self.handle) };
    }
}

/// Holds a stream busy: its callback blocks until the gate is opened (or
/// dropped, or after [`Gate::LIMIT`] as a backstop against a failed check
/// leaving a stream blocked forever; the check then fails, see
/// [`gates_given_up`]).
pub(crate) struct Gate {
    state: Arc<GateState>,
}

struct GateState {
    open: Mutex<bool>,
    cv: Condvar,
    ran_inline: AtomicBool,
}

/// Gate callbacks that waited [`Gate::LIMIT`] and gave up: a check whose
/// run adds to it waited on work queued behind a gate it had not opened.
static GATES_GIVEN_UP: AtomicUsize = AtomicUsize::new(0);

/// How many gate callbacks have given up so far (the suite compares the
/// count before and after each check).
pub(crate) fn gates_given_up() -> usize {
    GATES_GIVEN_UP.load(Ordering::SeqCst)
}

impl Gate {
    /// The longest a gate callback blocks.
    pub(crate) const LIMIT: Duration = Duration::from_secs(10);

    /// A closed gate.
    pub(crate) fn new() -> Self {
        Gate {
            state: Arc::new(GateState {
                open: Mutex::new(false),
                cv: Condvar::new(),
                ran_inline: AtomicBool::new(false),
            }),
        }
    }

    /// Blocks `stream` with a host callback that returns once the gate is
    /// open. Fails if the vendor ran the callback synchronously, inside
    /// `launch_host_func` (then nothing can be pending behind it).
    pub(crate) fn block(&self, stream: &OwnedStream<'_>) -> Verdict {
        let held = self.hold(stream)?;
        ensure!(
            held,
            "launch_host_func ran the host callback synchronously on the calling thread: \
             streams must run their work asynchronously, so that work can be pending"
        );
        Ok(())
    }

    /// Blocks `stream` as [`Gate::block`] does when the vendor runs host
    /// callbacks asynchronously, and returns whether it did: `false` when
    /// the vendor ran the callback inside `launch_host_func` (a check that
    /// holds for such vendors too then goes on with nothing pending).
    pub(crate) fn hold(&self, stream: &OwnedStream<'_>) -> std::result::Result<bool, Fail> {
        let state = Arc::clone(&self.state);
        let launcher = std::thread::current().id();
        stream
            .launch(Box::new(move || {
                if std::thread::current().id() == launcher {
                    // Blocking here would block the check itself.
                    state.ran_inline.store(true, Ordering::SeqCst);
                    return;
                }
                let guard = state.open.lock().unwrap_or_else(|e| e.into_inner());
                let (_open, waited) = state
                    .cv
                    .wait_timeout_while(guard, Self::LIMIT, |open| !*open)
                    .unwrap_or_else(|e| e.into_inner());
                if waited.timed_out() {
                    GATES_GIVEN_UP.fetch_add(1, Ordering::SeqCst);
                }
            }))
            .during("launch_host_func")?;
        Ok(!self.state.ran_inline.load(Ordering::SeqCst))
    }

    /// Lets every callback of this gate return.
    pub(crate) fn open(&self) {
        *self.state.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.state.cv.notify_all();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}
