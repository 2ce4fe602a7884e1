//! DIOPI contexts: the stream a kernel call uses, and the tensors
//! `diopiRequireTensor` / `diopiRequireBuffer` make for it.
//!
//! A context owns what it hands out until it is destroyed. Device memory
//! comes from the runtime's caching allocator on the context's stream and
//! goes back to it at destroy: stream-ordered, so kernels already queued
//! on that stream may still use it (the allocator reuses the block only
//! for later work on the stream). Host memory and the descriptors are
//! freed by a host function queued on the stream (after a synchronisation
//! where the vendor has none), so queued kernels may read them too.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use dipu_runtime::{Error, Result, Runtime, Stream};
use parking_lot::Mutex;

use crate::error::report_error;
use crate::launch::launch_host_func;
use crate::tensor::{contiguous_strides, span_of, OwnedTensor};
use crate::types::{DiopiDevice, Dtype, TensorHandle, HOST_DEVICE};

/// Host memory of a required tensor (64-byte aligned, zeroed).
struct HostMemory {
    ptr: *mut u8,
    layout: Layout,
}

impl HostMemory {
    fn new(bytes: usize) -> Result<HostMemory> {
        let layout = Layout::from_size_align(bytes.max(1), 64)
            .map_err(|_| Error::invalid_argument(format!("{bytes} bytes of host memory")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::new(
                dipu_runtime::ErrorKind::OutOfMemory,
                format!("no {bytes} bytes of host memory for a required tensor"),
            ));
        }
        Ok(HostMemory { ptr, layout })
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// One tensor a context handed out.
struct Required {
    /// Kept alive: its handle was handed out.
    #[expect(dead_code, reason = "owned for its handle, never read")]
    tensor: OwnedTensor,
    host: Option<HostMemory>,
    /// Device memory from the caching allocator: (device, pointer).
    device: Option<(i32, *mut c_void)>,
}

// SAFETY: the pointers are the context's own allocations; freeing them on
// another thread (a host function) is fine for both allocators.
unsafe impl Send for Required {}

/// `struct diopiContext`: the object a `diopiContextHandle_t` points at.
pub struct DiopiContext {
    rt: Arc<Runtime>,
    stream: Stream,
    owned: Mutex<Vec<Required>>,
}

impl std::fmt::Debug for DiopiContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiopiContext")
            .field("device", &self.stream.device())
            .field("stream", &self.stream.id())
            .field("owned", &self.owned.lock().len())
            .finish()
    }
}

/// `diopiContextHandle_t`.
pub type ContextHandle = *mut DiopiContext;

/// The live contexts by handle: a destroyed or made-up handle is an error,
/// never a dereference.
static LIVE: Mutex<Option<HashMap<usize, Arc<DiopiContext>>>> = Mutex::new(None);

impl DiopiContext {
    /// The stream kernels of this context run on.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// The raw vendor stream: NULL for a default stream.
    pub fn raw_stream(&self) -> *mut c_void {
        self.stream.raw().as_raw() as *mut c_void
    }

    /// The stream as a kernel library enqueues on it (`diopiGetStream`):
    /// the vendor's `native_stream` of the raw handle, asked under the
    /// context's device (the raw value, NULL for a default stream, on
    /// vendors without a queue object to name; OpenCL's default queue).
    pub fn native_stream(&self) -> Result<*mut c_void> {
        let _guard = dipu_runtime::DeviceGuard::new(self.rt.context(), self.stream.device())?;
        let raw = self.rt.api().native_stream(self.stream.raw())?;
        Ok(raw as *mut c_void)
    }

    /// A tensor of `shape` (`strides` None: contiguous) and `dtype` that
    /// lives as long as the context, on the context's device
    /// (`DiopiDevice::DEVICE`) or in host memory; returns its handle.
    pub fn require_tensor(
        &self,
        shape: &[i64],
        strides: Option<&[i64]>,
        dtype: Dtype,
        device: DiopiDevice,
    ) -> Result<TensorHandle> {
        let elem = dtype.size().ok_or_else(|| {
            Error::invalid_argument(format!("a required tensor of unknown dtype {}", dtype.0))
        })?;
        let strides = match strides {
            Some(s) => s.to_vec(),
            None => contiguous_strides(shape),
        };
        if strides.len() != shape.len() {
            return Err(Error::invalid_argument(format!(
                "size {shape:?} and stride {strides:?} differ in length"
            )));
        }
        let bytes = span_of(shape, &strides)
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| n.checked_mul(elem))
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "size {shape:?} with stride {strides:?} is not a valid tensor"
                ))
            })?;
        let (dev, storage, host, device_mem) = match device {
            DiopiDevice::HOST => {
                let m = HostMemory::new(bytes)?;
                (HOST_DEVICE, m.ptr.cast::<c_void>(), Some(m), None)
            }
            DiopiDevice::DEVICE => {
                let d = self.stream.device();
                let ptr = self.rt.allocate_raw(bytes, self.stream)?;
                (d, ptr, None, (!ptr.is_null()).then_some((d, ptr)))
            }
            other => {
                return Err(Error::invalid_argument(format!(
                    "diopiDevice_t {} (0 is diopi_host, 1 diopi_device)",
                    other.0
                )))
            }
        };
        let tensor = OwnedTensor::new(dtype, dev, storage, bytes, 0, shape, Some(&strides));
        let tensor = match tensor {
            Ok(t) => t,
            Err(e) => {
                if let Some((d, p)) = device_mem {
                    let _ = self.rt.free_raw(d, p);
                }
                return Err(e);
            }
        };
        let handle = tensor.handle();
        self.owned.lock().push(Required {
            tensor,
            host,
            device: device_mem,
        });
        Ok(handle)
    }

    /// Bytes and tensors the context holds now (for tests and reports).
    pub fn required_count(&self) -> usize {
        self.owned.lock().len()
    }
}

impl Drop for DiopiContext {
    fn drop(&mut self) {
        let mut owned = std::mem::take(&mut *self.owned.lock());
        for r in &mut owned {
            if let Some((device, ptr)) = r.device.take() {
                // Stream-ordered: the block was allocated on our stream.
                if let Err(e) = self.rt.free_raw(device, ptr) {
                    report_error("diopi context destroy: freeing a required tensor", &e);
                }
            }
        }
        let has_host = owned.iter().any(|r| r.host.is_some());
        if owned.is_empty() {
            return;
        }
        if !has_host {
            drop(owned);
            return;
        }
        // Host memory goes after the work queued on the stream so far.
        let slot = Arc::new(Mutex::new(Some(owned)));
        let queued = Arc::clone(&slot);
        let result = launch_host_func(self.stream, Box::new(move || drop(queued.lock().take())));
        if result.is_err() {
            if let Err(e) = self.stream.synchronize() {
                report_error("diopi context destroy: synchronizing the stream", &e);
            }
            drop(slot.lock().take());
        }
    }
}

/// Makes a context on `stream` and returns its handle (destroy it with
/// [`context_destroy`]; [`Context`] does both for Rust callers).
pub fn context_create(stream: Stream) -> Result<ContextHandle> {
    let rt = dipu_runtime::get()?;
    if !std::ptr::eq(stream.context(), rt.context()) {
        return Err(Error::invalid_argument(
            "the stream belongs to another runtime (was the runtime shut down and initialised anew?)",
        ));
    }
    let ctx = Arc::new(DiopiContext {
        rt,
        stream,
        owned: Mutex::new(Vec::new()),
    });
    let handle = Arc::as_ptr(&ctx).cast_mut();
    LIVE.lock()
        .get_or_insert_with(HashMap::new)
        .insert(handle as usize, ctx);
    Ok(handle)
}

/// The live context `handle` names (an `InvalidArgument` error for NULL,
/// a destroyed or a made-up handle).
pub fn context_get(handle: *const DiopiContext) -> Result<Arc<DiopiContext>> {
    if handle.is_null() {
        return Err(Error::invalid_argument("the context handle is NULL"));
    }
    LIVE.lock()
        .as_ref()
        .and_then(|m| m.get(&(handle as usize)).cloned())
        .ok_or_else(|| unknown(handle))
}

fn unknown(handle: *const DiopiContext) -> Error {
    Error::invalid_argument(format!(
        "context {handle:p} is not a live DIOPI context (never created, or already destroyed)"
    ))
}

/// Destroys the context `handle`: what it required is freed
/// stream-ordered (see the module docs). NULL is a no-op; a destroyed or
/// made-up handle is an `InvalidArgument` error.
pub fn context_destroy(handle: ContextHandle) -> Result<()> {
    if handle.is_null() {
        return Ok(());
    }
    let ctx = LIVE
        .lock()
        .as_mut()
        .and_then(|m| m.remove(&(handle as usize)))
        .ok_or_else(|| unknown(handle))?;
    drop(ctx);
    Ok(())
}

/// A DIOPI context for Rust callers: created on a stream, destroyed when
/// dropped (or by [`Context::destroy`], which returns errors).
#[derive(Debug)]
pub struct Context {
    handle: ContextHandle,
    stream: Stream,
}

// SAFETY: the handle is a key into the registry of live contexts, whose
// objects are thread-safe.
unsafe impl Send for Context {}
// SAFETY: as for Send.
unsafe impl Sync for Context {}

impl Context {
    /// A context whose kernels run on `stream`.
    pub fn new(stream: Stream) -> Result<Context> {
        Ok(Context {
            handle: context_create(stream)?,
            stream,
        })
    }

    /// The `diopiContextHandle_t` to pass to kernels.
    pub fn handle(&self) -> ContextHandle {
        self.handle
    }

    /// The context's stream.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Tensors the context required so far (`diopiRequireTensor` and
    /// `diopiRequireBuffer` results, generator states).
    pub fn required_count(&self) -> usize {
        context_get(self.handle).map_or(0, |c| c.required_count())
    }

    /// Destroys the context now (what dropping it does), returning errors.
    pub fn destroy(mut self) -> Result<()> {
        let h = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        context_destroy(h)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Err(e) = context_destroy(self.handle) {
            report_error("dropping a diopi Context", &e);
        }
    }
}
