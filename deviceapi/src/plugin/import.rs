//! The import side of the plugin ABI: a vendor table seen as `dyn DeviceApi`.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::abi::*;
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
    fn device_count(&self) -> Result<i32> {
        let mut n = 0;
        ffi!(self.device_count(&mut n))?;
        Ok(n)
    }
    fn current_device(&self) -> Result<i32> {
        let mut d = 0;
        ffi!(self.current_device(&mut d))?;
        Ok(d)
    }
    fn set_device(&self, device: i32) -> Result<()> {
        ffi!(self.set_device(device))
    }
    fn synchronize_device(&self) -> Result<()> {
        ffi!(self.synchronize_device())
    }
    fn device_properties(&self, device: i32) -> Result<DeviceProperties> {
        let mut p = DipuVendorDeviceProperties {
            name: [0; 256],
            total_memory: 0,
            major: 0,
            minor: 0,
            multiprocessor_count: 0,
        };
        ffi!(self.device_properties(device, &mut p))?;
        Ok(DeviceProperties {
            name: read_c_str(&p.name),
            total_memory: p.total_memory,
            major: p.major,
            minor: p.minor,
            multiprocessor_count: p.multiprocessor_count,
        })
    }
    fn memory_info(&self) -> Result<MemoryInfo> {
        let (mut free, mut total) = (0, 0);
        ffi!(self.memory_info(&mut free, &mut total))?;
        Ok(MemoryInfo { free, total })
    }
    fn malloc(&self, bytes: usize) -> Result<*mut c_void> {
        let mut p = std::ptr::null_mut();
        ffi!(self.malloc(bytes, &mut p))?;
        Ok(p)
    }
    unsafe fn free(&self, ptr: *mut c_void) -> Result<()> {
        ffi!(self.free(ptr))
    }
    fn malloc_host(&self, bytes: usize) -> Result<*mut c_void> {
        let mut p = std::ptr::null_mut();
        ffi!(self.malloc_host(bytes, &mut p))?;
        Ok(p)
    }
    unsafe fn free_host(&self, ptr: *mut c_void) -> Result<()> {
        ffi!(self.free_host(ptr))
    }
    unsafe fn memset(&self, ptr: *mut c_void, value: u8, bytes: usize) -> Result<()> {
        ffi!(self.memset(ptr, value, bytes))
    }
    unsafe fn memset_async(
        &self,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.memset_async(ptr, value, bytes, stream.as_raw()))
    }
    unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
    ) -> Result<()> {
        ffi!(self.memcpy(dst, src, bytes, kind as i32))
    }
    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: CopyKind,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.memcpy_async(dst, src, bytes, kind as i32, stream.as_raw()))
    }
    unsafe fn memcpy_peer(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
    ) -> Result<()> {
        ffi!(self.memcpy_peer(dst, dst_device, src, src_device, bytes))
    }
    unsafe fn memcpy_peer_async(
        &self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.memcpy_peer_async(dst, dst_device, src, src_device, bytes, stream.as_raw()))
    }
    fn stream_priority_range(&self) -> Result<PriorityRange> {
        let (mut least, mut greatest) = (0, 0);
        ffi!(self.stream_priority_range(&mut least, &mut greatest))?;
        Ok(PriorityRange { least, greatest })
    }
    fn stream_create(&self, priority: i32) -> Result<StreamHandle> {
        let mut s = 0;
        ffi!(self.stream_create(priority, &mut s))?;
        Ok(StreamHandle::from_raw(s))
    }
    unsafe fn stream_destroy(&self, stream: StreamHandle) -> Result<()> {
        ffi!(self.stream_destroy(stream.as_raw()))
    }
    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> Result<()> {
        ffi!(self.stream_synchronize(stream.as_raw()))
    }
    unsafe fn stream_query(&self, stream: StreamHandle) -> Result<bool> {
        let mut done = 0;
        ffi!(self.stream_query(stream.as_raw(), &mut done))?;
        Ok(done != 0)
    }
    unsafe fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        ffi!(self.stream_wait_event(stream.as_raw(), event.as_raw()))
    }
    unsafe fn launch_host_func(&self, stream: StreamHandle, callback: HostCallback) -> Result<()> {
        let data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        let result = ffi!(self.launch_host_func(stream.as_raw(), run_host_callback, data));
        if result.is_err() {
            // SAFETY: on failure the vendor never calls the function, so the
            // box leaked above is still ours to free.
            drop(unsafe { Box::from_raw(data.cast::<HostCallback>()) });
        }
        result
    }
    fn event_create(&self, timing: bool) -> Result<EventHandle> {
        let mut e = 0;
        ffi!(self.event_create(timing as i32, &mut e))?;
        Ok(EventHandle::from_raw(e))
    }
    unsafe fn event_destroy(&self, event: EventHandle) -> Result<()> {
        ffi!(self.event_destroy(event.as_raw()))
    }
    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        ffi!(self.event_record(event.as_raw(), stream.as_raw()))
    }
    unsafe fn event_query(&self, event: EventHandle) -> Result<bool> {
        let mut done = 0;
        ffi!(self.event_query(event.as_raw(), &mut done))?;
        Ok(done != 0)
    }
    unsafe fn event_synchronize(&self, event: EventHandle) -> Result<()> {
        ffi!(self.event_synchronize(event.as_raw()))
    }
    unsafe fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let mut ms = 0.0;
        ffi!(self.event_elapsed_ms(start.as_raw(), end.as_raw(), &mut ms))?;
        Ok(ms)
    }
    fn comm_unique_id_size(&self) -> usize {
        self.comm_unique_id_size
    }
    fn comm_get_unique_id(&self) -> Result<Vec<u8>> {
        let mut id = vec![0u8; self.comm_unique_id_size];
        ffi!(self.comm_get_unique_id(id.as_mut_ptr(), id.len()))?;
        Ok(id)
    }
    fn comm_init_rank(&self, world_size: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle> {
        if self.capabilities.contains(Capabilities::COLLECTIVES) {
            uid_check(self, unique_id.len())?;
        }
        let mut c = 0;
        ffi!(self.comm_init_rank(
            world_size,
            unique_id.as_ptr(),
            unique_id.len(),
            rank,
            &mut c
        ))?;
        Ok(CommHandle::from_raw(c))
    }
    unsafe fn comm_destroy(&self, comm: CommHandle) -> Result<()> {
        ffi!(self.comm_destroy(comm.as_raw()))
    }
    unsafe fn comm_abort(&self, comm: CommHandle) -> Result<()> {
        ffi!(self.comm_abort(comm.as_raw()))
    }
    unsafe fn comm_async_error(&self, comm: CommHandle) -> Result<()> {
        ffi!(self.comm_async_error(comm.as_raw()))
    }
    unsafe fn all_reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.all_reduce(
            send,
            recv,
            count,
            dtype as i32,
            op as i32,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    unsafe fn broadcast(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        root: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.broadcast(
            send,
            recv,
            count,
            dtype as i32,
            root,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    unsafe fn all_gather(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        dtype: DataType,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.all_gather(
            send,
            recv,
            send_count,
            dtype as i32,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    unsafe fn reduce_scatter(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        dtype: DataType,
        op: ReduceOp,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.reduce_scatter(
            send,
            recv,
            recv_count,
            dtype as i32,
            op as i32,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    unsafe fn reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.reduce(
            send,
            recv,
            count,
            dtype as i32,
            op as i32,
            root,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    unsafe fn send(
        &self,
        buf: *const c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.send(
            buf,
            count,
            dtype as i32,
            peer,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    unsafe fn recv(
        &self,
        buf: *mut c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        ffi!(self.recv(
            buf,
            count,
            dtype as i32,
            peer,
            comm.as_raw(),
            stream.as_raw()
        ))
    }
    fn group_start(&self) -> Result<()> {
        ffi!(self.group_start())
    }
    fn group_end(&self) -> Result<()> {
        ffi!(self.group_end())
    }
    fn vmm_granularity(&self) -> Result<usize> {
        let mut g = 0;
        ffi!(self.vmm_granularity(&mut g))?;
        Ok(g)
    }
    fn vmm_reserve(&self, bytes: usize) -> Result<*mut c_void> {
        let mut p = std::ptr::null_mut();
        ffi!(self.vmm_reserve(bytes, &mut p))?;
        Ok(p)
    }
    unsafe fn vmm_free_reservation(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        ffi!(self.vmm_free_reservation(ptr, bytes))
    }
    fn vmm_create(&self, bytes: usize) -> Result<PhysicalMemHandle> {
        let mut h = 0;
        ffi!(self.vmm_create(bytes, &mut h))?;
        Ok(PhysicalMemHandle::from_raw(h))
    }
    unsafe fn vmm_release(&self, handle: PhysicalMemHandle) -> Result<()> {
        ffi!(self.vmm_release(handle.as_raw()))
    }
    unsafe fn vmm_map(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        handle: PhysicalMemHandle,
    ) -> Result<()> {
        ffi!(self.vmm_map(ptr, bytes, handle.as_raw()))
    }
    unsafe fn vmm_unmap(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        ffi!(self.vmm_unmap(ptr, bytes))
    }
}
