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
/// `capabilities` bit of [`DipuVendorInfo`]: device memory is host memory
/// of this process, readable and writable in place once the device work
/// that uses it is done.
pub const DIPU_CAP_HOST_ACCESSIBLE_MEMORY: u32 = 1 << 2;

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

/// Defines [`DipuVendorVTable`] from the method list, and
/// [`DIPU_VENDOR_VTABLE_SOURCE`], the same definition as text for cbindgen
/// (which reads source files and does not expand macros).
macro_rules! vtable_struct {
    ($(
        $(#[$doc:meta])*
        $kind:ident $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;
            c($($cn:ident: $ct:ty),*) $(-> $on:ident: $ot:ty)?;
    )*) => {
        with_source! {
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
                $(
                    $(#[$doc])*
                    pub $name: Option<
                        unsafe extern "C" fn(pd: *mut c_void, $($cn: $ct,)* $($on: $ot,)? err: DipuErr) -> i32,
                    >,
                )*
            }
        }

        impl DipuVendorVTable {
            /// Every field's name and byte offset, in order: what the
            /// layout tests compare with a C compiler's view of the header.
            #[doc(hidden)]
            pub fn field_offsets() -> Vec<(&'static str, usize)> {
                use std::mem::offset_of;
                vec![
                    ("abi_major", offset_of!(Self, abi_major)),
                    ("struct_size", offset_of!(Self, struct_size)),
                    ("private_data", offset_of!(Self, private_data)),
                    ("release", offset_of!(Self, release)),
                    ("describe", offset_of!(Self, describe)),
                    $((stringify!($name), offset_of!(Self, $name)),)*
                ]
            }
        }
    };
}

/// Emits `$item` and its text as [`DIPU_VENDOR_VTABLE_SOURCE`].
macro_rules! with_source {
    ($item:item) => {
        $item

        /// The definition of [`DipuVendorVTable`] as Rust source text: what
        /// `include/dipu_vendor.h` is generated from.
        #[doc(hidden)]
        pub const DIPU_VENDOR_VTABLE_SOURCE: &str = stringify!($item);
    };
}

crate::for_each_device_method!(vtable_struct);

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
        assert_eq!(
            Capabilities::HOST_ACCESSIBLE_MEMORY.bits(),
            DIPU_CAP_HOST_ACCESSIBLE_MEMORY
        );
    }

    #[test]
    fn empty_table_has_no_functions() {
        let vt = DipuVendorVTable::empty();
        assert!(vt.describe.is_none() && vt.malloc.is_none() && vt.vmm_unmap.is_none());
        assert_eq!(vt.struct_size, 0);
    }
}
