//! DIOPI: open the vendor's kernel library, look operators up, make
//! contexts, tensor descriptors and generator handles for calling them
//! (docs/diopi.md; the Rust side is the `dipu-diopi` crate, which also
//! exports the diopirt functions the kernel library calls back).

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::path::Path;

use dipu_diopi::{DiopiContext, DiopiGenerator, OwnedTensor, TensorDesc, HOST_DEVICE};
use dipu_runtime::{Error, Result};
use parking_lot::Mutex;

use crate::handles::c_str;
use crate::status::{
    dipu_status, ffi_boundary, non_null, set_last_error, write_c_string, write_out,
};
use crate::stream::{self, dipu_stream};

/// Routes the messages of the diopirt functions and of
/// dipu_launch_host_func_raw to dipu_last_error_message.
fn connect_errors() {
    dipu_diopi::set_error_sink(set_last_error);
}

/// Opens the DIOPI kernel library for the process: `path`, or when `path`
/// is NULL the file DIPU_DIOPI_LIBRARY names, else the library the current
/// vendor ships: libdiopi_impl_<vendor>.so, then libdiopi_impl.so, beside
/// the vendor plugin (a built-in vendor: beside libdipu_runtime.so, then
/// beside the executable). Opening the open library again is DIPU_OK.
/// The library is opened with RTLD_NOW after this library's own symbols
/// were made global, so its diopirt references resolve here.
/// Errors: DIPU_STATUS_VENDOR_LIBRARY_NOT_FOUND (the message names the
/// library and every place looked in), DIPU_STATUS_ABI_MISMATCH when the
/// library needs a symbol the runtime lacks (named in the message),
/// DIPU_STATUS_NOT_A_VENDOR when it cannot be loaded otherwise,
/// DIPU_STATUS_INVALID_ARGUMENT when another library is open. Thread-safe.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_open(path: *const c_char) -> dipu_status {
    ffi_boundary!("dipu_diopi_open", {
        connect_errors();
        if path.is_null() {
            dipu_diopi::open_default()?;
        } else {
            // SAFETY: forwarded caller's contract.
            let path = unsafe { c_str(path, "path") }?;
            dipu_diopi::open(Path::new(path))?;
        }
        Ok(())
    })
}

/// Closes the DIOPI kernel library (a no-op when none is open), so that
/// another may be opened. The file is never unloaded: kernels still
/// queued and function pointers from dipu_diopi_lookup stay valid.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_diopi_close() -> dipu_status {
    ffi_boundary!("dipu_diopi_close", {
        dipu_diopi::close();
        Ok(())
    })
}

/// Copies the path of the open kernel library and a NUL into `buf` of
/// `len` bytes, and the size needed (NUL included) into `*needed` when
/// `needed` is not NULL. `buf` NULL with `len` 0 only asks for the size.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT when no library is open or `buf`
/// is too small (nothing is written to it). Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_library_path(
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_diopi_library_path", {
        let lib = dipu_diopi::require_current()?;
        let path = lib.path().to_string_lossy().into_owned();
        // SAFETY: forwarded caller's contract.
        unsafe { write_c_string(&path, buf, len, needed) }
    })
}

/// Stores the address of the kernel library's function `name` (e.g.
/// "diopiAdd") in `*out`, or NULL when the library does not define it:
/// that means "fall back", and is DIPU_OK. Cast it to the function's type
/// in include/diopi/functions.h (or functions_ext.h).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT when no library is open or for a
/// NULL `name` or `out`. Thread-safe.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string, `out` NULL or valid for
/// writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_lookup(
    name: *const c_char,
    out: *mut *mut c_void,
) -> dipu_status {
    ffi_boundary!("dipu_diopi_lookup", {
        non_null(out, "out")?;
        // SAFETY: forwarded caller's contract.
        let name = unsafe { c_str(name, "name") }?;
        let lib = dipu_diopi::require_current()?;
        let f = lib.symbol(name).unwrap_or(std::ptr::null_mut());
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", f) }
    })
}

/// Creates a DIOPI context on `stream` and stores it in `*out`: kernels
/// called with it run on that stream (diopiGetStream returns the vendor's
/// raw stream, NULL for a default stream), and it owns what
/// diopiRequireTensor and diopiRequireBuffer allocate (device memory from
/// the caching allocator on the stream, host memory for diopi_host) until
/// dipu_diopi_context_destroy.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown stream or a NULL
/// `out`, DIPU_STATUS_INVALID_DEVICE. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_context_create(
    stream: dipu_stream,
    out: *mut *mut DiopiContext,
) -> dipu_status {
    ffi_boundary!("dipu_diopi_context_create", {
        connect_errors();
        non_null(out, "out")?;
        let rt = dipu_runtime::get()?;
        let s = stream::from_c(&rt, stream)?;
        let ctx = dipu_diopi::context_create(s)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", ctx) }
    })
}

/// Destroys a context: device memory it required goes back to the caching
/// allocator stream-ordered (kernels queued on its stream may still use
/// it), host memory and descriptors are freed once the stream's queued
/// work is done. NULL is a no-op.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a destroyed or made-up
/// context (nothing happens). Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_diopi_context_destroy(ctx: *mut DiopiContext) -> dipu_status {
    ffi_boundary!("dipu_diopi_context_destroy", {
        dipu_diopi::context_destroy(ctx)
    })
}

/// Descriptors made by dipu_diopi_tensor_create, by handle.
static TENSORS: Mutex<Option<HashMap<usize, OwnedTensor>>> = Mutex::new(None);

/// Checks a device descriptor's storage against the runtime's allocations:
/// memory the runtime knows must belong to the descriptor's device and
/// hold the tensor.
fn check_storage(t: &OwnedTensor) -> Result<()> {
    let info = t.info();
    let rt = dipu_runtime::get()?;
    if info.device != HOST_DEVICE {
        rt.check_device(info.device)?;
    }
    if info.storage.is_null() {
        return Ok(());
    }
    let Some(a) = rt.find_allocation(info.storage) else {
        return Ok(()); // memory the runtime does not manage: the caller's
    };
    if info.device == HOST_DEVICE {
        return Err(Error::invalid_argument(format!(
            "the descriptor says host memory (device -1) but its storage {:p} is device memory \
             of device {}",
            info.storage, a.device
        )));
    }
    if a.device != info.device {
        return Err(Error::invalid_argument(format!(
            "the descriptor says device {} but its storage {:p} is memory of device {}",
            info.device, info.storage, a.device
        )));
    }
    let start = info.storage as usize;
    let end = start.checked_add(info.storage_nbytes);
    if end.is_none_or(|end| end > a.addr + a.len) {
        return Err(Error::invalid_argument(format!(
            "the descriptor's storage {:p} of {} bytes runs past its allocation of {} bytes \
             at {:#x}",
            info.storage, info.storage_nbytes, a.len, a.addr
        )));
    }
    Ok(())
}

/// Copies the descriptor `desc` (and its shape and stride arrays) into a
/// new tensor handle stored in `*out`, valid until
/// dipu_diopi_tensor_destroy. The memory it describes stays the caller's.
/// A descriptor filled on the stack may also be passed to kernels directly.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for NULL, a magic other than
/// DIPU_DIOPI_TENSOR_MAGIC, an unknown dtype, a negative size or stride, a
/// tensor reaching past its storage, or device memory of another device
/// than `device` says; DIPU_STATUS_INVALID_DEVICE. Thread-safe.
///
/// # Safety
/// `desc` must be NULL or a readable descriptor whose shape and strides
/// hold `ndim` entries; `out` NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_tensor_create(
    desc: *const TensorDesc,
    out: *mut *mut TensorDesc,
) -> dipu_status {
    ffi_boundary!("dipu_diopi_tensor_create", {
        non_null(out, "out")?;
        // SAFETY: forwarded caller's contract.
        let t = unsafe { OwnedTensor::copy_of(desc) }?;
        check_storage(&t)?;
        let handle = t.handle();
        TENSORS
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(handle as usize, t);
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", handle) }
    })
}

/// Destroys a handle of dipu_diopi_tensor_create (not the memory it
/// describes). NULL is a no-op.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a handle it did not make or
/// already destroyed. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_diopi_tensor_destroy(tensor: *mut TensorDesc) -> dipu_status {
    ffi_boundary!("dipu_diopi_tensor_destroy", {
        if tensor.is_null() {
            return Ok(());
        }
        let removed = TENSORS
            .lock()
            .as_mut()
            .and_then(|m| m.remove(&(tensor as usize)));
        match removed {
            Some(t) => {
                drop(t);
                Ok(())
            }
            None => Err(Error::invalid_argument(format!(
                "tensor {tensor:p} is not a live handle of dipu_diopi_tensor_create"
            ))),
        }
    })
}

/// Stores the generator handle of `device` in `*out`: the device's
/// default Philox generator (the one dipu_generator_* functions use).
/// Kernels read its seed and offset with diopiGeneratorGetSeedAndOffset
/// and write the advanced offset back with diopiGeneratorSetSeedAndOffset.
/// The handle is the same on every call and never needs freeing.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_generator(
    device: i32,
    out: *mut *mut DiopiGenerator,
) -> dipu_status {
    ffi_boundary!("dipu_diopi_generator", {
        non_null(out, "out")?;
        let g = dipu_diopi::generator(device)?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", g) }
    })
}

/// Copies the kernel library's diopiGetLastErrorString() and a NUL into
/// `buf` of `len` bytes, and the size needed into `*needed` when `needed`
/// is not NULL ("" when the library has no such function). `buf` NULL
/// with `len` 0 only asks for the size.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT when no library is open or `buf`
/// is too small. Thread-safe as far as the library's function is.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_diopi_last_error(
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_diopi_last_error", {
        let lib = dipu_diopi::require_current()?;
        let msg = lib.last_error().unwrap_or_default();
        // SAFETY: forwarded caller's contract.
        unsafe { write_c_string(&msg, buf, len, needed) }
    })
}

/// The C callback and its argument, moved to the thread that runs it.
struct HostFn(unsafe extern "C" fn(*mut c_void), *mut c_void);

// SAFETY: the caller of dipu_launch_host_func promises that `fn(user)` may
// run on another thread (documented).
unsafe impl Send for HostFn {}

/// Queues `func(user)` on `stream`: it runs on a host thread after the
/// work queued earlier on the stream, and later work waits for it, like
/// cudaLaunchHostFunc. `func` must not call the runtime. (A kernel library
/// holding only diopiGetStream's raw stream uses
/// dipu_launch_host_func_raw.)
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown stream or a NULL
/// `func`, DIPU_STATUS_UNSUPPORTED when the vendor has no host functions.
/// Thread-safe.
///
/// # Safety
/// `func(user)` must be safe to call once, on any thread.
#[no_mangle]
pub unsafe extern "C" fn dipu_launch_host_func(
    stream: dipu_stream,
    func: Option<unsafe extern "C" fn(*mut c_void)>,
    user: *mut c_void,
) -> dipu_status {
    ffi_boundary!("dipu_launch_host_func", {
        let func = func.ok_or_else(|| Error::invalid_argument("func is NULL"))?;
        let rt = dipu_runtime::get()?;
        let s = stream::from_c(&rt, stream)?;
        let cb = HostFn(func, user);
        dipu_diopi::launch_host_func(
            s,
            Box::new(move || {
                let cb = cb;
                // SAFETY: the caller's contract.
                unsafe { (cb.0)(cb.1) }
            }),
        )
    })
}
