//! The diopirt functions (DIOPI 1.0, `include/diopi/diopirt.h` section by
//! section), exported with C linkage for kernel libraries.
//!
//! Each body runs inside a panic boundary; bad input (a NULL or foreign
//! handle, a NULL out-pointer, a destroyed context) returns
//! `diopiErrorOccurred` with a message in [`crate::last_runtime_error`]
//! (and the C library's `dipu_last_error_message`). Tensor getters read
//! the descriptor on the calling thread: call them before queuing work.

#![allow(non_snake_case, reason = "DIOPI's C names")]

use std::ffi::{c_char, c_void, CStr};
use std::time::Instant;

use dipu_runtime::{Error, Result};

use crate::context::{context_get, DiopiContext};
use crate::error::{diopi_status, non_null, write_out};
use crate::generator::{seed_and_offset, set_seed_and_offset, with_generator};
use crate::tensor::{desc, numel_of, TensorInfo};
use crate::types::{
    ConstTensorHandle, DiopiDevice, DiopiError, DiopiGenerator, DiopiSize, Dtype, TensorDesc,
    TensorHandle, HOST_DEVICE,
};

/// `"DIOPI Version: 1.0.0"`, never NULL.
#[no_mangle]
pub extern "C" fn diopiGetVersion() -> *const c_char {
    c"DIOPI Version: 1.0.0".as_ptr()
}

/// The descriptor behind `th`, its magic checked (see [`desc`]).
///
/// # Safety
/// `th` must be NULL or point at a readable descriptor.
unsafe fn d<'a>(th: ConstTensorHandle) -> Result<&'a TensorDesc> {
    // SAFETY: forwarded caller's contract.
    unsafe { desc(th) }
}

/// Address of element 0 of `th` (storage offset applied).
///
/// # Safety
/// `th` NULL or a descriptor; `pptr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorData(
    th: TensorHandle,
    pptr: *mut *mut c_void,
) -> DiopiError {
    diopi_status("diopiGetTensorData", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        let elem = t.dtype.size().unwrap_or(0);
        let p = t
            .storage
            .cast::<u8>()
            .wrapping_offset(t.storage_offset.wrapping_mul(elem as i64) as isize);
        // SAFETY: the caller's contract.
        unsafe { write_out(pptr, "pptr", p.cast()) }
    })
}

/// [`diopiGetTensorData`] for a const handle.
///
/// # Safety
/// As for [`diopiGetTensorData`].
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorDataConst(
    th: ConstTensorHandle,
    pptr: *mut *const c_void,
) -> DiopiError {
    // SAFETY: same contract; the out types differ only in constness.
    unsafe { diopiGetTensorData(th.cast_mut(), pptr.cast()) }
}

/// The sizes of `th` (pointing into the descriptor's own array).
///
/// # Safety
/// `th` NULL or a descriptor; `size` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorShape(
    th: ConstTensorHandle,
    size: *mut DiopiSize,
) -> DiopiError {
    diopi_status("diopiGetTensorShape", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        let v = DiopiSize {
            data: t.shape,
            len: i64::from(t.ndim),
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(size, "size", v) }
    })
}

/// The strides of `th`, in elements.
///
/// # Safety
/// As for [`diopiGetTensorShape`].
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorStride(
    th: ConstTensorHandle,
    stride: *mut DiopiSize,
) -> DiopiError {
    diopi_status("diopiGetTensorStride", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        let v = DiopiSize {
            data: t.strides,
            len: i64::from(t.ndim),
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(stride, "stride", v) }
    })
}

/// The dtype of `th`.
///
/// # Safety
/// `th` NULL or a descriptor; `dtype` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorDtype(
    th: ConstTensorHandle,
    dtype: *mut Dtype,
) -> DiopiError {
    diopi_status("diopiGetTensorDtype", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        // SAFETY: the caller's contract.
        unsafe { write_out(dtype, "dtype", t.dtype) }
    })
}

/// `diopi_host` for host memory, else `diopi_device`.
///
/// # Safety
/// `th` NULL or a descriptor; `device` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorDevice(
    th: ConstTensorHandle,
    device: *mut DiopiDevice,
) -> DiopiError {
    diopi_status("diopiGetTensorDevice", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        let v = if t.device == HOST_DEVICE {
            DiopiDevice::HOST
        } else {
            DiopiDevice::DEVICE
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(device, "device", v) }
    })
}

/// Elements of `th` (1 for 0-dim; 0 for a NULL handle, as DIPU does).
///
/// # Safety
/// `th` NULL or a descriptor with `ndim` readable sizes; `numel` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorNumel(th: ConstTensorHandle, numel: *mut i64) -> DiopiError {
    diopi_status("diopiGetTensorNumel", || {
        let n = if th.is_null() {
            0
        } else {
            // SAFETY: the caller's contract.
            let t = unsafe { d(th) }?;
            let ndim = usize::try_from(t.ndim).unwrap_or(0);
            if ndim > 0 && t.shape.is_null() {
                return Err(Error::invalid_argument(format!(
                    "tensor {th:p}: {ndim} dimensions but a NULL shape"
                )));
            }
            let shape = if ndim == 0 {
                &[][..]
            } else {
                // SAFETY: not NULL; `ndim` readable sizes by the caller's contract.
                unsafe { std::slice::from_raw_parts(t.shape, ndim) }
            };
            numel_of(shape).ok_or_else(|| {
                Error::invalid_argument(format!("tensor {th:p}: bad shape {shape:?}"))
            })?
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(numel, "numel", n) }
    })
}

/// Bytes of one element of `th`.
///
/// # Safety
/// `th` NULL or a descriptor; `elemsize` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorElemSize(
    th: ConstTensorHandle,
    elemsize: *mut i64,
) -> DiopiError {
    diopi_status("diopiGetTensorElemSize", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        let size = t.dtype.size().ok_or_else(|| {
            Error::invalid_argument(format!("tensor {th:p}: unknown dtype {}", t.dtype.0))
        })?;
        // SAFETY: the caller's contract.
        unsafe { write_out(elemsize, "elemsize", size as i64) }
    })
}

/// Base of the storage of `th`.
///
/// # Safety
/// `th` NULL or a descriptor; `ptr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorStoragePtr(
    th: ConstTensorHandle,
    ptr: *mut *mut c_void,
) -> DiopiError {
    diopi_status("diopiGetTensorStoragePtr", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        // SAFETY: the caller's contract.
        unsafe { write_out(ptr, "pStoragePtr", t.storage) }
    })
}

/// Storage offset of `th`, in elements.
///
/// # Safety
/// `th` NULL or a descriptor; `offset` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorStorageOffset(
    th: ConstTensorHandle,
    offset: *mut i64,
) -> DiopiError {
    diopi_status("diopiGetTensorStorageOffset", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        // SAFETY: the caller's contract.
        unsafe { write_out(offset, "pOffset", t.storage_offset) }
    })
}

/// Bytes of the whole storage of `th`.
///
/// # Safety
/// `th` NULL or a descriptor; `nbytes` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorStorageNbytes(
    th: ConstTensorHandle,
    nbytes: *mut usize,
) -> DiopiError {
    diopi_status("diopiGetTensorStorageNbytes", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        // SAFETY: the caller's contract.
        unsafe { write_out(nbytes, "pNbytes", t.storage_nbytes) }
    })
}

/// The device index of `th` (-1 for host memory).
///
/// # Safety
/// `th` NULL or a descriptor; `index` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetTensorDeviceIndex(
    th: ConstTensorHandle,
    index: *mut i8,
) -> DiopiError {
    diopi_status("diopiGetTensorDeviceIndex", || {
        // SAFETY: the caller's contract.
        let t = unsafe { d(th) }?;
        let i = i8::try_from(t.device).map_err(|_| {
            Error::invalid_argument(format!("device {} does not fit int8", t.device))
        })?;
        // SAFETY: the caller's contract.
        unsafe { write_out(index, "pDevIndex", i) }
    })
}

/// The calling thread's current dipu device.
///
/// # Safety
/// `index` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetCurrentDeviceIndex(index: *mut i8) -> DiopiError {
    diopi_status("diopiGetCurrentDeviceIndex", || {
        let device = dipu_runtime::get()?.current_device()?;
        let i = i8::try_from(device)
            .map_err(|_| Error::invalid_argument(format!("device {device} does not fit int8")))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(index, "pDevIndex", i) }
    })
}

/// False: dipu-rs descriptors are dense.
///
/// # Safety
/// `th` NULL or a descriptor; `sparse` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiIsTensorSparse(
    th: ConstTensorHandle,
    sparse: *mut bool,
) -> DiopiError {
    diopi_status("diopiIsTensorSparse", || {
        // SAFETY: the caller's contract.
        unsafe { d(th) }?;
        // SAFETY: the caller's contract.
        unsafe { write_out(sparse, "isSparse", false) }
    })
}

/// The error of the CSR getters: dipu-rs descriptors are dense.
fn not_sparse(name: &str) -> DiopiError {
    diopi_status(name, || {
        Err(Error::invalid_argument(
            "dipu-rs tensor descriptors are dense (diopiIsTensorSparse is false): no CSR parts",
        ))
    })
}

/// Not available: descriptors are dense (`diopiErrorOccurred`).
#[no_mangle]
pub extern "C" fn diopiGetTensorCrowIndices(
    _th: ConstTensorHandle,
    _out: *mut ConstTensorHandle,
) -> DiopiError {
    not_sparse("diopiGetTensorCrowIndices")
}

/// Not available: descriptors are dense (`diopiErrorOccurred`).
#[no_mangle]
pub extern "C" fn diopiGetTensorColIndices(
    _th: ConstTensorHandle,
    _out: *mut ConstTensorHandle,
) -> DiopiError {
    not_sparse("diopiGetTensorColIndices")
}

/// Not available: descriptors are dense (`diopiErrorOccurred`).
#[no_mangle]
pub extern "C" fn diopiGetTensorValues(
    _th: ConstTensorHandle,
    _out: *mut ConstTensorHandle,
) -> DiopiError {
    not_sparse("diopiGetTensorValues")
}

/// The vendor stream of `ctx` as a kernel library enqueues on it: the
/// vendor's `native_stream` (the raw handle, NULL for a device's default
/// stream, except where the vendor names its default queue: OpenCL).
///
/// # Safety
/// `stream` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGetStream(
    ctx: *mut DiopiContext,
    stream: *mut *mut c_void,
) -> DiopiError {
    diopi_status("diopiGetStream", || {
        let c = context_get(ctx)?;
        let native = c.native_stream()?;
        // SAFETY: the caller's contract.
        unsafe { write_out(stream, "stream", native) }
    })
}

/// A tensor of `size` (`stride` NULL: contiguous) that lives as long as `ctx`.
///
/// # Safety
/// `tensor` NULL or writable; `size` and `stride` NULL or pointing at a
/// `diopiSize_t` whose data is readable.
#[no_mangle]
pub unsafe extern "C" fn diopiRequireTensor(
    ctx: *mut DiopiContext,
    tensor: *mut TensorHandle,
    size: *const DiopiSize,
    stride: *const DiopiSize,
    dtype: Dtype,
    device: DiopiDevice,
) -> DiopiError {
    diopi_status("diopiRequireTensor", || {
        non_null(tensor, "tensor")?;
        non_null(size, "size")?;
        let c = context_get(ctx)?;
        // SAFETY: not NULL (checked); readable by the caller's contract.
        let shape = unsafe { (*size).as_slice() };
        // SAFETY: as above, when not NULL.
        let strides = (!stride.is_null()).then(|| unsafe { (*stride).as_slice() });
        let h = c.require_tensor(shape, strides, dtype, device)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(tensor, "tensor", h) }
    })
}

/// A 1-D int8 tensor of `num_bytes` bytes that lives as long as `ctx`.
///
/// # Safety
/// `tensor` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiRequireBuffer(
    ctx: *mut DiopiContext,
    tensor: *mut TensorHandle,
    num_bytes: i64,
    device: DiopiDevice,
) -> DiopiError {
    diopi_status("diopiRequireBuffer", || {
        non_null(tensor, "tensor")?;
        if num_bytes < 0 {
            return Err(Error::invalid_argument(format!(
                "num_bytes {num_bytes} is negative"
            )));
        }
        let c = context_get(ctx)?;
        let h = c.require_tensor(&[num_bytes], None, Dtype::INT8, device)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(tensor, "tensor", h) }
    })
}

/// The generator's state as a 24-byte uint8 host tensor owned by `ctx`
/// (dipu-rs's layout: magic "DPRG", version, seed, offset).
///
/// # Safety
/// `data` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGeneratorGetState(
    ctx: *mut DiopiContext,
    generator: *const DiopiGenerator,
    data: *mut TensorHandle,
) -> DiopiError {
    diopi_status("diopiGeneratorGetState", || {
        non_null(data, "data")?;
        let c = context_get(ctx)?;
        let state = with_generator(generator, |_, g| Ok(g.get_state()))?;
        let h = c.require_tensor(&[state.len() as i64], None, Dtype::UINT8, DiopiDevice::HOST)?;
        // SAFETY: a host tensor of `state.len()` bytes we just made.
        unsafe {
            std::ptr::copy_nonoverlapping(state.as_ptr(), (*h).storage.cast::<u8>(), state.len())
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(data, "data", h) }
    })
}

/// Restores the generator from a state tensor of diopiGeneratorGetState
/// (a contiguous uint8 host tensor).
///
/// # Safety
/// `state` NULL or a descriptor of readable host memory.
#[no_mangle]
pub unsafe extern "C" fn diopiGeneratorSetState(
    generator: *mut DiopiGenerator,
    state: ConstTensorHandle,
) -> DiopiError {
    diopi_status("diopiGeneratorSetState", || {
        // SAFETY: the caller's contract.
        let info = unsafe { TensorInfo::read(state) }?;
        if info.device != HOST_DEVICE || info.dtype.size() != Some(1) || !info.is_contiguous() {
            return Err(Error::invalid_argument(
                "a generator state is a contiguous uint8 tensor in host memory",
            ));
        }
        let n = info.numel() as usize;
        // SAFETY: `read` checked that the tensor lies inside its storage,
        // host memory the caller keeps valid.
        let bytes = unsafe { std::slice::from_raw_parts(info.data().cast::<u8>(), n) };
        with_generator(generator, |_, g| g.set_state(bytes))
    })
}

/// The generator's seed and Philox offset (the handle is mutable, as
/// DIOPI declares it, though only read).
///
/// # Safety
/// `seed` and `offset` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiGeneratorGetSeedAndOffset(
    generator: *mut DiopiGenerator,
    seed: *mut u64,
    offset: *mut u64,
) -> DiopiError {
    diopi_status("diopiGeneratorGetSeedAndOffset", || {
        non_null(seed, "ptrSeed")?;
        non_null(offset, "ptrOffset")?;
        let (s, o) = seed_and_offset(generator)?;
        // SAFETY: the caller's contract.
        unsafe {
            write_out(seed, "ptrSeed", s)?;
            write_out(offset, "ptrOffset", o)
        }
    })
}

/// Sets the generator's seed and Philox offset (a kernel writes back the
/// advanced offset this way).
#[no_mangle]
pub extern "C" fn diopiGeneratorSetSeedAndOffset(
    generator: *mut DiopiGenerator,
    seed: u64,
    offset: u64,
) -> DiopiError {
    diopi_status("diopiGeneratorSetSeedAndOffset", || {
        set_seed_and_offset(generator, seed, offset)
    })
}

/// A profiler range: its name and start.
struct Record {
    name: String,
    start: Instant,
}

/// Starts a named range; `*record` receives it (end it with diopiRecordEnd).
///
/// # Safety
/// `name` NULL or a NUL-terminated string; `record` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn diopiRecordStart(
    name: *const c_char,
    record: *mut *mut c_void,
) -> DiopiError {
    diopi_status("diopiRecordStart", || {
        non_null(record, "record")?;
        let name = if name.is_null() {
            String::new()
        } else {
            // SAFETY: NUL-terminated by the caller's contract.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        let r = Box::into_raw(Box::new(Record {
            name,
            start: Instant::now(),
        }));
        // SAFETY: the caller's contract.
        unsafe { write_out(record, "record", r.cast()) }
    })
}

/// Ends the range `*record` (logged at trace level), frees it and sets
/// `*record` to NULL. A NULL `*record` is a no-op.
///
/// # Safety
/// `record` NULL or pointing at NULL or at a record of diopiRecordStart.
#[no_mangle]
pub unsafe extern "C" fn diopiRecordEnd(record: *mut *mut c_void) -> DiopiError {
    diopi_status("diopiRecordEnd", || {
        non_null(record, "record")?;
        // SAFETY: the caller's contract.
        let r = unsafe { record.replace(std::ptr::null_mut()) };
        if !r.is_null() {
            // SAFETY: made by diopiRecordStart, freed once (we NULLed the slot).
            let r = unsafe { Box::from_raw(r.cast::<Record>()) };
            tracing::trace!("diopi range {}: {:?}", r.name, r.start.elapsed());
        }
        Ok(())
    })
}

/// Keeps every exported function in the program that links this crate
/// (and so exports them all with `-rdynamic`) even if it calls none:
/// called before a kernel library is opened.
#[inline(never)]
pub fn keep_exports() {
    let table: [*const c_void; 28] = [
        diopiGetVersion as *const c_void,
        diopiGetTensorData as *const c_void,
        diopiGetTensorDataConst as *const c_void,
        diopiGetTensorShape as *const c_void,
        diopiGetTensorStride as *const c_void,
        diopiGetTensorDtype as *const c_void,
        diopiGetTensorDevice as *const c_void,
        diopiGetTensorNumel as *const c_void,
        diopiGetTensorElemSize as *const c_void,
        diopiGetTensorStoragePtr as *const c_void,
        diopiGetTensorStorageOffset as *const c_void,
        diopiGetTensorStorageNbytes as *const c_void,
        diopiGetTensorDeviceIndex as *const c_void,
        diopiGetCurrentDeviceIndex as *const c_void,
        diopiIsTensorSparse as *const c_void,
        diopiGetTensorCrowIndices as *const c_void,
        diopiGetTensorColIndices as *const c_void,
        diopiGetTensorValues as *const c_void,
        diopiGetStream as *const c_void,
        diopiRequireTensor as *const c_void,
        diopiRequireBuffer as *const c_void,
        diopiGeneratorGetState as *const c_void,
        diopiGeneratorSetState as *const c_void,
        diopiGeneratorGetSeedAndOffset as *const c_void,
        diopiGeneratorSetSeedAndOffset as *const c_void,
        diopiRecordStart as *const c_void,
        diopiRecordEnd as *const c_void,
        crate::launch::dipu_launch_host_func_raw as *const c_void,
    ];
    std::hint::black_box(table);
}
