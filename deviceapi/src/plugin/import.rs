//! The import side of the plugin ABI: a vendor table seen as `dyn DeviceApi`.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::abi::*;
use super::convert::{AbiOut, FromAbi, IntoAbi};
use crate::{
    Capabilities, CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, Error, ErrorKind,
    EventHandle, HostCallback, MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result,
    StreamHandle,
};

/// A vendor reached through its C vtable.
pub(crate) struct PluginVendor {
    table: DipuVendorVTable,
    name: String,
    version: String,
    capabilities: Capabilities,
    comm_unique_id_size: usize,
}

// SAFETY: the plugin ABI requires every vendor function to be callable from
// any thread at once (as `DeviceApi: Send + Sync` does for Rust vendors);
// `private_data` is only ever passed back to those functions.
unsafe impl Send for PluginVendor {}
// SAFETY: as above.
unsafe impl Sync for PluginVendor {}

/// Turns a status and filled error into our `Error`.
pub(crate) fn error_from_abi(status: i32, err: &DipuVendorError) -> Error {
    let code = if err.kind != 0 { err.kind } else { status };
    let kind = ErrorKind::from_code(code);
    let mut message = read_c_str(&err.message);
    if message.is_empty() {
        message = format!("vendor returned error code {status} without a message");
    }
    if err.has_vendor_code != 0 {
        Error::vendor(kind, err.vendor_code, message)
    } else {
        Error::new(kind, message)
    }
}

/// Calls table function `$field` with `$args`, or returns `Unsupported`
/// when the plugin does not provide it.
macro_rules! ffi {
    ($self:ident . $field:ident ( $($arg:expr),* )) => {{
        let f = $self.table.$field.ok_or_else(|| {
            Error::unsupported(&$self.name, concat!("`", stringify!($field), "` (missing from its table)"))
        })?;
        let mut err = DipuVendorError::empty();
        // SAFETY: `f` comes from a vendor table whose ABI version was checked
        // at load time, `private_data` is that table's own, and the pointer and
        // handle arguments carry the caller's `DeviceApi` safety contract.
        let status = unsafe { f($self.table.private_data, $($arg,)* &mut err) };
        if status == 0 { Ok(()) } else { Err(error_from_abi(status, &err)) }
    }};
}

impl PluginVendor {
    /// Wraps a table copied out of a plugin and asks it to describe itself.
    pub(crate) fn new(table: DipuVendorVTable) -> Result<Self> {
        let mut vendor = PluginVendor {
            table,
            name: "plugin".to_owned(),
            version: String::new(),
            capabilities: Capabilities::empty(),
            comm_unique_id_size: 0,
        };
        let mut info = DipuVendorInfo {
            name: [0; 64],
            version: [0; 256],
            capabilities: 0,
            comm_unique_id_size: 0,
        };
        let info_ptr: *mut DipuVendorInfo = &mut info;
        let described: Result<()> = (|| ffi!(vendor.describe(info_ptr)))();
        described.map_err(|e| e.context("the vendor's `describe` failed"))?;
        vendor.name = read_c_str(&info.name);
        vendor.version = read_c_str(&info.version);
        if vendor.table.version_full.is_some() {
            vendor.version = vendor
                .version_full()
                .map_err(|e| e.context("the vendor's `version_full` failed"))?;
        }
        vendor.capabilities = Capabilities::from_bits_truncate(info.capabilities);
        vendor.comm_unique_id_size = usize::try_from(info.comm_unique_id_size)
            .map_err(|_| Error::new(ErrorKind::Internal, "unique id size does not fit in usize"))?;
        if vendor.name.is_empty() {
            return Err(Error::new(
                ErrorKind::NotAVendor,
                "the vendor describes itself with an empty name",
            ));
        }
        Ok(vendor)
    }
}

/// The longest version `version_full` may give (anything longer is a
/// broken vendor, not a version).
const MAX_VERSION: usize = 1 << 16;

impl PluginVendor {
    /// The vendor's whole version, through `version_full`: its length
    /// first, then the text.
    fn version_full(&self) -> Result<String> {
        let mut needed = 0usize;
        let needed_ptr: *mut usize = &mut needed;
        ffi!(self.version_full(std::ptr::null_mut(), 0, needed_ptr))?;
        if needed == 0 || needed > MAX_VERSION {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "the vendor's version would take {needed} bytes (1 to {MAX_VERSION} expected)"
                ),
            ));
        }
        let mut buf = vec![0 as std::ffi::c_char; needed];
        let mut again = 0usize;
        let again_ptr: *mut usize = &mut again;
        ffi!(self.version_full(buf.as_mut_ptr(), needed, again_ptr))?;
        if again != needed {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("the vendor's version changed length between two calls ({needed}, then {again} bytes)"),
            ));
        }
        Ok(read_c_str(&buf))
    }
}

impl Drop for PluginVendor {
    fn drop(&mut self) {
        if let Some(release) = self.table.release {
            // SAFETY: called once, with the table's own private data; nothing
            // calls into the table after this.
            unsafe { release(self.table.private_data) };
        }
    }
}

/// Runs a boxed host callback handed to a plugin, catching its panic.
unsafe extern "C" fn run_host_callback(user_data: *mut c_void) {
    // SAFETY: `user_data` is the `Box<HostCallback>` leaked in
    // `launch_host_func`, and the ABI guarantees it is called exactly once.
    let callback = unsafe { Box::from_raw(user_data.cast::<HostCallback>()) };
    if catch_unwind(AssertUnwindSafe(callback)).is_err() {
        tracing::error!("a host callback panicked; the panic was caught at the plugin boundary");
    }
}

fn uid_check(vendor: &PluginVendor, len: usize) -> Result<()> {
    if len != vendor.comm_unique_id_size {
        return Err(Error::invalid_argument(format!(
            "unique id of {len} bytes, vendor `{}` uses {} bytes",
            vendor.name, vendor.comm_unique_id_size
        )));
    }
    Ok(())
}

/// The `special` methods of `for_each_device_method!`, whose two sides
/// are not one value each way: written by hand.
mod by_hand {
    use super::*;

    pub(super) fn device_properties(v: &PluginVendor, device: i32) -> Result<DeviceProperties> {
        let mut p = DipuVendorDeviceProperties {
            name: [0; 256],
            total_memory: 0,
            major: 0,
            minor: 0,
            multiprocessor_count: 0,
        };
        ffi!(v.device_properties(device, &mut p))?;
        Ok(DeviceProperties {
            name: read_c_str(&p.name),
            total_memory: p.total_memory,
            major: p.major,
            minor: p.minor,
            multiprocessor_count: p.multiprocessor_count,
        })
    }

    pub(super) fn memory_info(v: &PluginVendor) -> Result<MemoryInfo> {
        let (mut free, mut total) = (0, 0);
        ffi!(v.memory_info(&mut free, &mut total))?;
        Ok(MemoryInfo { free, total })
    }

    pub(super) fn stream_priority_range(v: &PluginVendor) -> Result<PriorityRange> {
        let (mut least, mut greatest) = (0, 0);
        ffi!(v.stream_priority_range(&mut least, &mut greatest))?;
        Ok(PriorityRange { least, greatest })
    }

    /// # Safety
    /// `stream` is one of this vendor's live streams.
    pub(super) unsafe fn launch_host_func(
        v: &PluginVendor,
        stream: StreamHandle,
        callback: HostCallback,
    ) -> Result<()> {
        let data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        let result = ffi!(v.launch_host_func(stream.as_raw(), run_host_callback, data));
        if result.is_err() {
            // SAFETY: on failure the vendor never calls the function, so the
            // box leaked above is still ours to free.
            drop(unsafe { Box::from_raw(data.cast::<HostCallback>()) });
        }
        result
    }

    /// A plugin older than the entry answers the raw value (the trait's default).
    pub(super) fn native_stream(v: &PluginVendor, stream: StreamHandle) -> Result<u64> {
        if v.table.native_stream.is_none() {
            return Ok(stream.as_raw());
        }
        let mut out = 0;
        ffi!(v.native_stream(stream.as_raw(), &mut out))?;
        Ok(out)
    }

    pub(super) fn comm_get_unique_id(v: &PluginVendor) -> Result<Vec<u8>> {
        let mut id = vec![0u8; v.comm_unique_id_size];
        ffi!(v.comm_get_unique_id(id.as_mut_ptr(), id.len()))?;
        Ok(id)
    }

    pub(super) fn comm_init_rank(
        v: &PluginVendor,
        world_size: i32,
        unique_id: &[u8],
        rank: i32,
    ) -> Result<CommHandle> {
        if v.capabilities.contains(Capabilities::COLLECTIVES) {
            uid_check(v, unique_id.len())?;
        }
        let mut c = 0;
        ffi!(v.comm_init_rank(
            world_size,
            unique_id.as_ptr(),
            unique_id.len(),
            rank,
            &mut c
        ))?;
        Ok(CommHandle::from_raw(c))
    }
}

/// One method of `impl DeviceApi for PluginVendor`: a `plain` one converts
/// each argument to its C value and the out-value back; a `special` one
/// is in [`by_hand`].
macro_rules! import_method {
    (plain $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; c($($c:tt)*) -> $on:ident: $ot:ty;) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            let mut out = AbiOut::zero();
            ffi!(self.$name($($arg.into_abi(),)* std::ptr::addr_of_mut!(out)))?;
            FromAbi::from_abi(out)
        }
    };
    (plain $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; c($($c:tt)*);) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            ffi!(self.$name($($arg.into_abi()),*))
        }
    };
    (special $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            // SAFETY: the arguments are passed on unchanged, so the caller's
            // `DeviceApi` contract carries over.
            #[allow(unused_unsafe)]
            unsafe {
                by_hand::$name(self, $($arg),*)
            }
        }
    };
    (vtable_only $($rest:tt)*) => {};
}

/// `impl DeviceApi for PluginVendor`: the facts from `describe`, and every
/// listed method.
impl DeviceApi for PluginVendor {
    fn name(&self) -> &str {
        &self.name
    }
    fn version(&self) -> String {
        self.version.clone()
    }
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
    fn comm_unique_id_size(&self) -> usize {
        self.comm_unique_id_size
    }
    crate::for_each_device_method!(each import_method);
}
