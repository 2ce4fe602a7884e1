//! The `#[repr(C)]` plugin ABI: what crosses between a vendor's shared
//! library and the loader. `include/dipu_vendor.h` is generated from this file.
//!
//! Every vtable function takes the vendor's `private_data` first and a
//! `DipuVendorError` out-parameter last, and returns 0 on success or an
//! [`ErrorKind`](crate::ErrorKind) code, having filled the error.
//! A null function pointer means "not implemented" (`Unsupported`).

use std::ffi::{c_char, c_void};

/// The plugin ABI's major version. A plugin built for another major version
/// is refused; appending fields to [`DipuVendorVTable`] does not change it.
pub const DIPU_VENDOR_ABI_MAJOR: u32 = 1;

/// Bytes in [`DipuVendorError::message`], the terminating NUL included.
pub const DIPU_VENDOR_MESSAGE_LEN: usize = 1024;

/// `capabilities` bit of [`DipuVendorInfo`]: collectives.
pub const DIPU_CAP_COLLECTIVES: u32 = 1 << 0;
/// `capabilities` bit of [`DipuVendorInfo`]: virtual-memory mapping.
pub const DIPU_CAP_VIRTUAL_MEMORY: u32 = 1 << 1;

/// Name of the exported function that returns the plugin's ABI major version:
/// `uint32_t dipu_vendor_abi_version(void)`.
pub const ENTRY_ABI_VERSION: &str = "dipu_vendor_abi_version";

/// Name of the exported function that creates the vendor:
/// `const DipuVendorVTable *dipu_vendor_create(DipuVendorError *err)`.
/// It returns null and fills `err` when the vendor cannot start.
pub const ENTRY_CREATE: &str = "dipu_vendor_create";

/// An error filled by a vendor when a call fails.
#[repr(C)]
#[derive(Clone)]
pub struct DipuVendorError {
    /// An `ErrorKind` code (non-zero).
    pub kind: i32,
    /// Non-zero when `vendor_code` holds the vendor library's own status.
    pub has_vendor_code: i32,
    /// The vendor library's raw status (e.g. a `cudaError_t`).
    pub vendor_code: i64,
    /// NUL-terminated UTF-8 message for a person.
    pub message: [c_char; DIPU_VENDOR_MESSAGE_LEN],
}

/// Fixed facts about a vendor, filled once by `describe`.
#[repr(C)]
#[derive(Clone)]
pub struct DipuVendorInfo {
    /// NUL-terminated short name (`"host"`, `"cuda"`).
    pub name: [c_char; 64],
    /// NUL-terminated runtime version in words.
    pub version: [c_char; 256],
    /// `Capabilities` bits.
    pub capabilities: u32,
    /// Bytes of a communicator unique id (0 without collectives).
    pub comm_unique_id_size: u64,
}

/// Device properties as they cross the ABI.
#[repr(C)]
#[derive(Clone)]
pub struct DipuVendorDeviceProperties {
    /// NUL-terminated device name.
    pub name: [c_char; 256],
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Compute capability (or version) major.
    pub major: i32,
    /// Compute capability (or version) minor.
    pub minor: i32,
    /// Multiprocessor (or core) count.
    pub multiprocessor_count: i32,
}

/// A host function run in stream order; called exactly once with its `user_data`.
pub type DipuHostFn = unsafe extern "C" fn(user_data: *mut c_void);

/// Shorthand for the error out-parameter.
pub type DipuErr = *mut DipuVendorError;

/// The table of functions a vendor exports. Fields are only ever appended;
/// `struct_size` tells the loader how many the plugin knows.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct DipuVendorVTable {
    /// Must equal [`DIPU_VENDOR_ABI_MAJOR`].
    pub abi_major: u32,
    /// `sizeof(DipuVendorVTable)` as the plugin was compiled.
    pub struct_size: u32,
    /// The vendor's own state, passed back as the first argument of every call.
    pub private_data: *mut c_void,
    /// Frees `private_data`; called once when the vendor is dropped.
    pub release: Option<unsafe extern "C" fn(pd: *mut c_void)>,
    /// Fills name, version, capabilities and unique-id size.
    pub describe: Option<
        unsafe extern "C" fn(pd: *mut c_void, out: *mut DipuVendorInfo, err: DipuErr) -> i32,
    >,

    /// `device_count`.
    pub device_count:
        Option<unsafe extern "C" fn(pd: *mut c_void, out: *mut i32, err: DipuErr) -> i32>,
    /// `current_device`.
    pub current_device:
        Option<unsafe extern "C" fn(pd: *mut c_void, out: *mut i32, err: DipuErr) -> i32>,
    /// `set_device`.
    pub set_device: Option<unsafe extern "C" fn(pd: *mut c_void, device: i32, err: DipuErr) -> i32>,
    /// `synchronize_device`.
    pub synchronize_device: Option<unsafe extern "C" fn(pd: *mut c_void, err: DipuErr) -> i32>,
    /// `device_properties`.
    pub device_properties: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            device: i32,
            out: *mut DipuVendorDeviceProperties,
            err: DipuErr,
        ) -> i32,
    >,
    /// `memory_info`.
    pub memory_info: Option<
        unsafe extern "C" fn(pd: *mut c_void, free: *mut u64, total: *mut u64, err: DipuErr) -> i32,
    >,

    /// `malloc`.
    pub malloc: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            bytes: usize,
            out: *mut *mut c_void,
            err: DipuErr,
        ) -> i32,
    >,
    /// `free`.
    pub free: Option<unsafe extern "C" fn(pd: *mut c_void, ptr: *mut c_void, err: DipuErr) -> i32>,
    /// `malloc_host`.
    pub malloc_host: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            bytes: usize,
            out: *mut *mut c_void,
            err: DipuErr,
        ) -> i32,
    >,
    /// `free_host`.
    pub free_host:
        Option<unsafe extern "C" fn(pd: *mut c_void, ptr: *mut c_void, err: DipuErr) -> i32>,
    /// `memset`.
    pub memset: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            ptr: *mut c_void,
            value: u8,
            bytes: usize,
            err: DipuErr,
        ) -> i32,
    >,
    /// `memset_async`.
    pub memset_async: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            ptr: *mut c_void,
            value: u8,
            bytes: usize,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `memcpy`; `kind` is a `CopyKind` code.
    pub memcpy: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            dst: *mut c_void,
            src: *const c_void,
            bytes: usize,
            kind: i32,
            err: DipuErr,
        ) -> i32,
    >,
    /// `memcpy_async`; `kind` is a `CopyKind` code.
    pub memcpy_async: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            dst: *mut c_void,
            src: *const c_void,
            bytes: usize,
            kind: i32,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `memcpy_peer`.
    pub memcpy_peer: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            dst: *mut c_void,
            dst_device: i32,
            src: *const c_void,
            src_device: i32,
            bytes: usize,
            err: DipuErr,
        ) -> i32,
    >,
    /// `memcpy_peer_async`.
    pub memcpy_peer_async: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            dst: *mut c_void,
            dst_device: i32,
            src: *const c_void,
            src_device: i32,
            bytes: usize,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,

    /// `stream_priority_range`.
    pub stream_priority_range: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            least: *mut i32,
            greatest: *mut i32,
            err: DipuErr,
        ) -> i32,
    >,
    /// `stream_create`.
    pub stream_create: Option<
        unsafe extern "C" fn(pd: *mut c_void, priority: i32, out: *mut u64, err: DipuErr) -> i32,
    >,
    /// `stream_destroy`.
    pub stream_destroy:
        Option<unsafe extern "C" fn(pd: *mut c_void, stream: u64, err: DipuErr) -> i32>,
    /// `stream_synchronize`.
    pub stream_synchronize:
        Option<unsafe extern "C" fn(pd: *mut c_void, stream: u64, err: DipuErr) -> i32>,
    /// `stream_query`; `out` is 1 when done, 0 when pending.
    pub stream_query: Option<
        unsafe extern "C" fn(pd: *mut c_void, stream: u64, out: *mut i32, err: DipuErr) -> i32,
    >,
    /// `stream_wait_event`.
    pub stream_wait_event:
        Option<unsafe extern "C" fn(pd: *mut c_void, stream: u64, event: u64, err: DipuErr) -> i32>,
    /// `launch_host_func`: on success the vendor calls `func(user_data)`
    /// exactly once; on failure never.
    pub launch_host_func: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            stream: u64,
            func: DipuHostFn,
            user_data: *mut c_void,
            err: DipuErr,
        ) -> i32,
    >,

    /// `event_create`; `timing` is 0 or 1.
    pub event_create: Option<
        unsafe extern "C" fn(pd: *mut c_void, timing: i32, out: *mut u64, err: DipuErr) -> i32,
    >,
    /// `event_destroy`.
    pub event_destroy:
        Option<unsafe extern "C" fn(pd: *mut c_void, event: u64, err: DipuErr) -> i32>,
    /// `event_record`.
    pub event_record:
        Option<unsafe extern "C" fn(pd: *mut c_void, event: u64, stream: u64, err: DipuErr) -> i32>,
    /// `event_query`; `out` is 1 when done, 0 when pending.
    pub event_query: Option<
        unsafe extern "C" fn(pd: *mut c_void, event: u64, out: *mut i32, err: DipuErr) -> i32,
    >,
    /// `event_synchronize`.
    pub event_synchronize:
        Option<unsafe extern "C" fn(pd: *mut c_void, event: u64, err: DipuErr) -> i32>,
    /// `event_elapsed_ms`.
    pub event_elapsed_ms: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            start: u64,
            end: u64,
            out: *mut f32,
            err: DipuErr,
        ) -> i32,
    >,

    /// `comm_get_unique_id`; `len` equals the described unique-id size.
    pub comm_get_unique_id: Option<
        unsafe extern "C" fn(pd: *mut c_void, out: *mut u8, len: usize, err: DipuErr) -> i32,
    >,
    /// `comm_init_rank`.
    pub comm_init_rank: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            world_size: i32,
            unique_id: *const u8,
            len: usize,
            rank: i32,
            out: *mut u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `comm_destroy`.
    pub comm_destroy: Option<unsafe extern "C" fn(pd: *mut c_void, comm: u64, err: DipuErr) -> i32>,
    /// `comm_abort`.
    pub comm_abort: Option<unsafe extern "C" fn(pd: *mut c_void, comm: u64, err: DipuErr) -> i32>,
    /// `comm_async_error`.
    pub comm_async_error:
        Option<unsafe extern "C" fn(pd: *mut c_void, comm: u64, err: DipuErr) -> i32>,
    /// `all_reduce`; `dtype` and `op` are `DataType` and `ReduceOp` codes.
    pub all_reduce: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            send: *const c_void,
            recv: *mut c_void,
            count: usize,
            dtype: i32,
            op: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `broadcast`.
    pub broadcast: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            send: *const c_void,
            recv: *mut c_void,
            count: usize,
            dtype: i32,
            root: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `all_gather`.
    pub all_gather: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            send: *const c_void,
            recv: *mut c_void,
            send_count: usize,
            dtype: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `reduce_scatter`.
    pub reduce_scatter: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            send: *const c_void,
            recv: *mut c_void,
            recv_count: usize,
            dtype: i32,
            op: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `reduce`.
    pub reduce: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            send: *const c_void,
            recv: *mut c_void,
            count: usize,
            dtype: i32,
            op: i32,
            root: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `send`.
    pub send: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            buf: *const c_void,
            count: usize,
            dtype: i32,
            peer: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `recv`.
    pub recv: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            buf: *mut c_void,
            count: usize,
            dtype: i32,
            peer: i32,
            comm: u64,
            stream: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `group_start`.
    pub group_start: Option<unsafe extern "C" fn(pd: *mut c_void, err: DipuErr) -> i32>,
    /// `group_end`.
    pub group_end: Option<unsafe extern "C" fn(pd: *mut c_void, err: DipuErr) -> i32>,

    /// `vmm_granularity`.
    pub vmm_granularity:
        Option<unsafe extern "C" fn(pd: *mut c_void, out: *mut usize, err: DipuErr) -> i32>,
    /// `vmm_reserve`.
    pub vmm_reserve: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            bytes: usize,
            out: *mut *mut c_void,
            err: DipuErr,
        ) -> i32,
    >,
    /// `vmm_free_reservation`.
    pub vmm_free_reservation: Option<
        unsafe extern "C" fn(pd: *mut c_void, ptr: *mut c_void, bytes: usize, err: DipuErr) -> i32,
    >,
    /// `vmm_create`.
    pub vmm_create: Option<
        unsafe extern "C" fn(pd: *mut c_void, bytes: usize, out: *mut u64, err: DipuErr) -> i32,
    >,
    /// `vmm_release`.
    pub vmm_release:
        Option<unsafe extern "C" fn(pd: *mut c_void, handle: u64, err: DipuErr) -> i32>,
    /// `vmm_map`.
    pub vmm_map: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            ptr: *mut c_void,
            bytes: usize,
            handle: u64,
            err: DipuErr,
        ) -> i32,
    >,
    /// `vmm_unmap`.
    pub vmm_unmap: Option<
        unsafe extern "C" fn(pd: *mut c_void, ptr: *mut c_void, bytes: usize, err: DipuErr) -> i32,
    >,

    /// The vendor's whole version (`DipuVendorInfo::version` holds at most
    /// 255 bytes of it): writes to `needed` the bytes it takes with its
    /// terminating NUL, and, when `cap` > 0, at most `cap` bytes of it,
    /// NUL-terminated, to `buf`. The loader asks with `cap` 0 first, then
    /// with room for it all. Optional: without it the loader keeps the cut
    /// version of `describe`.
    pub version_full: Option<
        unsafe extern "C" fn(
            pd: *mut c_void,
            buf: *mut c_char,
            cap: usize,
            needed: *mut usize,
            err: DipuErr,
        ) -> i32,
    >,
}

impl DipuVendorVTable {
    /// A table with every function missing, for the loader to copy a
    /// possibly shorter plugin table into.
    pub fn empty() -> Self {
        // SAFETY: every field is an integer, a raw pointer or an
        // `Option<extern fn>`, all of which are valid when zeroed (None/null).
        unsafe { std::mem::zeroed() }
    }
}

impl DipuVendorError {
    /// A cleared error (kind 0, empty message).
    pub fn empty() -> Self {
        DipuVendorError {
            kind: 0,
            has_vendor_code: 0,
            vendor_code: 0,
            message: [0; DIPU_VENDOR_MESSAGE_LEN],
        }
    }
}

/// Copies `text` into a fixed C buffer, truncated on a character boundary and
/// always NUL-terminated.
pub fn write_c_str(buf: &mut [c_char], text: &str) {
    let Some(room) = buf.len().checked_sub(1) else {
        return;
    };
    let mut end = text.len().min(room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (dst, src) in buf.iter_mut().zip(&text.as_bytes()[..end]) {
        *dst = *src as c_char;
    }
    buf[end] = 0;
}

/// Reads a NUL-terminated C buffer as text (lossy UTF-8; unterminated
/// buffers are read to their end).
pub fn read_c_str(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_strings_truncate_on_char_boundaries() {
        let mut buf = [1 as c_char; 6];
        write_c_str(&mut buf, "héllo");
        assert_eq!(read_c_str(&buf), "héll", "5 bytes of room, é is two bytes");
        write_c_str(&mut buf, "ab");
        assert_eq!(read_c_str(&buf), "ab");
        let mut tiny = [7 as c_char; 2];
        write_c_str(&mut tiny, "€");
        assert_eq!(
            read_c_str(&tiny),
            "",
            "a 3-byte char does not fit in 1 byte"
        );
        assert_eq!(read_c_str(&[b'x' as c_char; 3]), "xxx");
    }

    #[test]
    fn capability_bits_match() {
        use crate::Capabilities;
        assert_eq!(Capabilities::COLLECTIVES.bits(), DIPU_CAP_COLLECTIVES);
        assert_eq!(Capabilities::VIRTUAL_MEMORY.bits(), DIPU_CAP_VIRTUAL_MEMORY);
    }

    #[test]
    fn empty_table_has_no_functions() {
        let vt = DipuVendorVTable::empty();
        assert!(vt.describe.is_none() && vt.malloc.is_none() && vt.vmm_unmap.is_none());
        assert_eq!(vt.struct_size, 0);
    }
}
