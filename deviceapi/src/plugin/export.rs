//! The export side of the plugin ABI: builds a [`DipuVendorVTable`] whose
//! functions call an `impl DeviceApi`, catching panics so none crosses the
//! boundary. Used through [`export_vendor!`](crate::export_vendor).

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::abi::*;
use super::convert::{FromAbi, IntoAbi};
use crate::{DeviceApi, Error, ErrorKind, Result, StreamHandle};

/// Turns `impl DeviceApi` into the plugin entry points a loader looks for.
///
/// The argument is an expression of type `Result<T, dipu_deviceapi::Error>`
/// (usually a constructor call), evaluated when the loader creates the
/// vendor; an `Err` becomes the loader's "vendor init failed" error.
///
/// ```text
/// dipu_deviceapi::export_vendor!(MyVendor::new());
/// ```
#[macro_export]
macro_rules! export_vendor {
    ($create:expr) => {
        /// The plugin ABI major version this vendor was built for.
        #[no_mangle]
        pub extern "C" fn dipu_vendor_abi_version() -> u32 {
            $crate::plugin::DIPU_VENDOR_ABI_MAJOR
        }

        /// Creates the vendor; null (with `err` filled) when it cannot start.
        ///
        /// # Safety
        /// `err` is null or points to a writable `DipuVendorError`.
        #[no_mangle]
        pub unsafe extern "C" fn dipu_vendor_create(
            err: *mut $crate::plugin::DipuVendorError,
        ) -> *const $crate::plugin::DipuVendorVTable {
            $crate::plugin::export::create_vtable(err, || $create)
        }
    };
}

/// Runs `create` and returns a leaked vtable for its vendor, or null with
/// `err` filled. Called by the code [`export_vendor!`](crate::export_vendor) generates.
pub fn create_vtable<T: DeviceApi>(
    err: *mut DipuVendorError,
    create: impl FnOnce() -> Result<T>,
) -> *const DipuVendorVTable {
    let mut table = None;
    let status = guard(err, || {
        let vendor = create()?;
        table = Some(Box::leak(Box::new(vtable_for(vendor))) as *const DipuVendorVTable);
        Ok(())
    });
    match table {
        Some(t) if status == 0 => t,
        _ => std::ptr::null(),
    }
}

/// Runs `f`, converting its error or panic into a status code and `err`.
fn guard(err: *mut DipuVendorError, f: impl FnOnce() -> Result<()>) -> i32 {
    let error = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".to_owned());
            Error::new(ErrorKind::Internal, format!("vendor panicked: {what}"))
        }
    };
    // SAFETY: the loader passes null or a pointer to its own live
    // `DipuVendorError`; nothing else aliases it during the call.
    if let Some(out) = unsafe { err.as_mut() } {
        out.kind = error.kind().code();
        out.has_vendor_code = error.vendor_code().is_some() as i32;
        out.vendor_code = error.vendor_code().unwrap_or(0);
        write_c_str(&mut out.message, error.message());
    }
    error.kind().code()
}

/// Writes `value` through an out-pointer, rejecting null.
///
/// # Safety
/// `out` is null or valid for a write of `V`.
unsafe fn put<V>(out: *mut V, value: V) -> Result<()> {
    if out.is_null() {
        return Err(Error::invalid_argument("null out-pointer passed to vendor"));
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// A host function and its data, moved to the thread that runs it.
struct HostFn(DipuHostFn, *mut c_void);
// SAFETY: the ABI requires `user_data` to be usable from any thread, since
// vendors run host functions on their own threads (as CUDA does).
unsafe impl Send for HostFn {}

/// The callback that calls a C host function once.
fn host_callback(call: HostFn) -> crate::HostCallback {
    Box::new(move || {
        let call = call;
        // SAFETY: the plugin ABI promises `func(user_data)` is called exactly
        // once; this closure is the only place that calls it, and runs once.
        unsafe { (call.0)(call.1) }
    })
}

/// Defines `extern "C"` thunks over `&T`: `name(args) |vendor| body`.
macro_rules! thunks {
    ($($name:ident($($arg:ident: $ty:ty),*) |$v:ident| $body:expr;)*) => {$(
        unsafe extern "C" fn $name<T: DeviceApi>(pd: *mut c_void, $($arg: $ty,)* err: DipuErr) -> i32 {
            guard(err, || {
                // SAFETY: the loader passes back this table's `private_data`,
                // a live `T` released only by `release`; pointer, handle and
                // out-pointer arguments are valid per the ABI contract.
                unsafe {
                    let $v: &T = &*pd.cast::<T>();
                    $body
                }
            })
        }
    )*};
}

// The table functions whose two sides are not one value each way (see
// `for_each_device_method!`): written by hand.
thunks! {
    describe(out: *mut DipuVendorInfo) |v| {
        let mut info = DipuVendorInfo { name: [0; 64], version: [0; 256], capabilities: v.capabilities().bits(), comm_unique_id_size: v.comm_unique_id_size() as u64 };
        write_c_str(&mut info.name, v.name());
        write_c_str(&mut info.version, &v.version());
        put(out, info)
    };
    device_properties(device: i32, out: *mut DipuVendorDeviceProperties) |v| {
        let p = v.device_properties(device)?;
        let mut c = DipuVendorDeviceProperties { name: [0; 256], total_memory: p.total_memory, major: p.major, minor: p.minor, multiprocessor_count: p.multiprocessor_count };
        write_c_str(&mut c.name, &p.name);
        put(out, c)
    };
    memory_info(free: *mut u64, total: *mut u64) |v| {
        let m = v.memory_info()?;
        put(free, m.free)?;
        put(total, m.total)
    };
    stream_priority_range(least: *mut i32, greatest: *mut i32) |v| {
        let r = v.stream_priority_range()?;
        put(least, r.least)?;
        put(greatest, r.greatest)
    };
    launch_host_func(stream: u64, func: DipuHostFn, user_data: *mut c_void) |v| {
        v.launch_host_func(StreamHandle::from_raw(stream), host_callback(HostFn(func, user_data)))
    };
    comm_get_unique_id(out: *mut u8, len: usize) |v| {
        let id = v.comm_get_unique_id()?;
        if out.is_null() || len != id.len() {
            return Err(Error::invalid_argument(format!("unique id buffer of {len} bytes, the vendor's id has {}", id.len())));
        }
        std::ptr::copy_nonoverlapping(id.as_ptr(), out, len);
        Ok(())
    };
    comm_init_rank(world_size: i32, unique_id: *const u8, len: usize, rank: i32, out: *mut u64) |v| {
        if unique_id.is_null() {
            return Err(Error::invalid_argument("null unique id"));
        }
        let id = std::slice::from_raw_parts(unique_id, len);
        put(out, v.comm_init_rank(world_size, id, rank)?.as_raw())
    };
    native_stream(stream: u64, out: *mut u64) |v| {
        put(out, v.native_stream(StreamHandle::from_raw(stream))?)
    };
    version_full(buf: *mut c_char, cap: usize, needed: *mut usize) |v| {
        let version = v.version();
        let bytes = version.as_bytes();
        put(needed, bytes.len() + 1)?;
        if cap > 0 {
            if buf.is_null() {
                return Err(Error::invalid_argument("version_full: null buffer with a capacity"));
            }
            let n = bytes.len().min(cap - 1);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
        Ok(())
    };
}

/// One thunk of a `plain` method: its C arguments converted to Rust ones,
/// the result written through the out-pointer if it has one.
macro_rules! plain_thunk {
    (plain $name:ident($($cn:ident: $ct:ty),*) -> $on:ident: $ot:ty) => {
        thunks! {
            $name($($cn: $ct,)* $on: $ot) |v| put($on, v.$name($(FromAbi::from_abi($cn)?),*)?.into_abi());
        }
    };
    (plain $name:ident($($cn:ident: $ct:ty),*)) => {
        thunks! {
            $name($($cn: $ct),*) |v| v.$name($(FromAbi::from_abi($cn)?),*);
        }
    };
    ($other:ident $name:ident($($cn:ident: $ct:ty),*) $(-> $on:ident: $ot:ty)?) => {};
}

/// The thunks of the `plain` methods, and [`vtable_for`] with every entry.
macro_rules! export_side {
    ($(
        $(#[$doc:meta])*
        $kind:ident $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;
            c($($cn:ident: $ct:ty),*) $(-> $on:ident: $ot:ty)?;
    )*) => {
        $(plain_thunk!($kind $name($($cn: $ct),*) $(-> $on: $ot)?);)*

        /// The full table for `vendor`, which it now owns.
        fn vtable_for<T: DeviceApi>(vendor: T) -> DipuVendorVTable {
            DipuVendorVTable {
                abi_major: DIPU_VENDOR_ABI_MAJOR,
                struct_size: std::mem::size_of::<DipuVendorVTable>() as u32,
                private_data: Box::into_raw(Box::new(vendor)).cast(),
                release: Some(release::<T>),
                describe: Some(describe::<T>),
                $($name: Some($name::<T>),)*
            }
        }
    };
}

crate::for_each_device_method!(export_side);

/// Frees the vendor behind `private_data`.
unsafe extern "C" fn release<T: DeviceApi>(pd: *mut c_void) {
    if pd.is_null() {
        return;
    }
    // SAFETY: `pd` came from `Box::into_raw` in `vtable_for::<T>` and the
    // loader calls `release` once.
    let vendor = unsafe { Box::from_raw(pd.cast::<T>()) };
    // A panic in `T::drop` must not cross the boundary.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(vendor)));
}
