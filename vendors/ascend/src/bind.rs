//! The machinery behind the hand-written bindings in [`crate::acl`] and [`crate::hccl`].
//!
//! Each binding module is one table, written with three macros:
//!
//! - [`c_types!`] declares the C types as Rust aliases under their C names
//!   (`aclrtStream = *mut c_void;`), with the C spelling where it is not
//!   the bare name (`aclrtMemcpyKind = c_int, "aclrtMemcpyKind";`);
//! - [`c_consts!`] declares the constants and enum values we use;
//! - [`library!`] declares the functions, `fn name(arg: Type, ...) -> Ret;`
//!   in those types, and generates the struct that holds the opened library
//!   and one `Option<fn>` per function, resolved when the library is opened.
//!   A missing symbol is `None`, and calling it is an `Unsupported` error
//!   naming the symbol and the file; it never panics. The library is never
//!   unloaded.
//!
//! The tables also exist as data (under `cfg(test)`): the header test turns
//! every Rust signature into its C prototype and has the C compiler check it,
//! every constant and every type size against the real CANN headers (from the torch-npu wheels).

use std::path::Path;

use dipu_deviceapi::{Error, ErrorKind};
use libloading::Library;

/// One bound function as the Rust side declares it (for the header test).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Signature {
    /// The C function name.
    pub(crate) name: &'static str,
    /// The Rust return type, as written.
    pub(crate) ret: &'static str,
    /// Argument names and Rust types, as written.
    pub(crate) args: &'static [(&'static str, &'static str)],
}

/// One bound constant (for the header test).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Constant {
    /// The C name of the constant or enum value.
    pub(crate) name: &'static str,
    /// Its value.
    pub(crate) value: i64,
}

/// One bound C type (for the header test).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct CType {
    /// The Rust alias, named as the C type.
    pub(crate) rust: &'static str,
    /// How C spells it (`aclrtMemcpyKind`).
    pub(crate) c: &'static str,
    /// `size_of` the Rust type; `None` for an opaque type (`c_void`).
    pub(crate) size: Option<usize>,
}

/// Declares C types as Rust aliases; see the module documentation.
macro_rules! c_types {
    ($( $(#[doc = $doc:expr])* $name:ident = $ty:ty $(, $c:literal)? ; )*) => {
        $(
            $(#[doc = $doc])*
            pub(crate) type $name = $ty;
        )*

        /// Every type of this table, for the header test.
        #[cfg(test)]
        pub(crate) fn c_types() -> Vec<$crate::bind::CType> {
            vec![$(
                $crate::bind::CType {
                    rust: stringify!($name),
                    c: $crate::bind::c_spelling(stringify!($name), &[$($c)?]),
                    size: (std::any::type_name::<$ty>() != std::any::type_name::<std::ffi::c_void>())
                        .then(std::mem::size_of::<$ty>),
                },
            )*]
        }
    };
}

/// Declares C constants; see the module documentation.
macro_rules! c_consts {
    ($( $(#[doc = $doc:expr])* $name:ident : $ty:ty = $value:expr ; )*) => {
        $(
            $(#[doc = $doc])*
            pub(crate) const $name: $ty = $value;
        )*

        /// Every constant of this table, for the header test.
        #[cfg(test)]
        pub(crate) const CONSTANTS: &[$crate::bind::Constant] = &[$(
            $crate::bind::Constant { name: stringify!($name), value: $name as i64 },
        )*];
    };
}

/// Declares a library's functions; see the module documentation. A function
/// may list other symbol names to try after its own: `fn name["alt"](...)`.
macro_rules! library {
    (
        $(#[doc = $doc:expr])*
        struct $lib:ident ($file:literal) {
            $(
                fn $name:ident $([$($alt:literal),+])? ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty;
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[expect(non_snake_case, reason = "fields named as the C functions they hold")]
        pub(crate) struct $lib {
            path: std::path::PathBuf,
            $( $name: Option<unsafe extern "C" fn($($ty),*) -> $ret>, )*
            /// Never closed: CANN's libraries keep threads and callbacks
            /// that may outlive the vendor, so, like a vendor plugin, they
            /// stay loaded for the life of the process.
            _library: std::mem::ManuallyDrop<libloading::Library>,
        }

        #[expect(non_snake_case, reason = "accessors named as the C functions they return")]
        impl $lib {
            /// Resolves every function of `library`, opened from `path`;
            /// the ones it lacks stay unresolved.
            pub(crate) fn resolve(library: libloading::Library, path: std::path::PathBuf) -> Self {
                $lib {
                    $( $name: $crate::bind::symbol(&library, &[stringify!($name) $($(, $alt)+)?]), )*
                    path,
                    _library: std::mem::ManuallyDrop::new(library),
                }
            }

            /// The file the library was opened from.
            pub(crate) fn path(&self) -> &std::path::Path {
                &self.path
            }

            /// The functions of the table this library lacks.
            pub(crate) fn missing(&self) -> Vec<&'static str> {
                let mut missing = Vec::new();
                $( if self.$name.is_none() { missing.push(stringify!($name)); } )*
                missing
            }

            /// Every function of the table, for the header test.
            #[cfg(test)]
            pub(crate) const SIGNATURES: &'static [$crate::bind::Signature] = &[$(
                $crate::bind::Signature {
                    name: stringify!($name),
                    ret: stringify!($ret),
                    args: &[$( (stringify!($arg), stringify!($ty)) ),*],
                },
            )*];

            $(
                #[doc = concat!("`", stringify!($name), "`, or `Unsupported` when the library lacks it.")]
                pub(crate) fn $name(&self) -> dipu_deviceapi::Result<unsafe extern "C" fn($($ty),*) -> $ret> {
                    self.$name.ok_or_else(|| $crate::bind::missing_symbol(stringify!($name), $file, &self.path))
                }
            )*
        }
    };
}

pub(crate) use {c_consts, c_types, library};

/// The first of `names` that `library` exports, as a function pointer.
pub(crate) fn symbol<T: Copy>(library: &Library, names: &[&str]) -> Option<T> {
    names.iter().find_map(|name| {
        let mut c_name = name.as_bytes().to_vec();
        c_name.push(0);
        // SAFETY: `T` is the function pointer type the binding table declares
        // for this symbol, and the header test checks that declaration
        // against the CANN headers; the library is never unloaded (the
        // struct that holds the pointer never closes it).
        unsafe { library.get::<T>(&c_name) }.ok().map(|s| *s)
    })
}

/// The error for a function the opened library lacks.
pub(crate) fn missing_symbol(name: &str, file: &str, path: &Path) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{name} is not exported by {} (the {file} that was loaded); it is too old or not \
             CANN's library: point ASCEND_HOME_PATH at a newer CANN toolkit",
            path.display()
        ),
    )
}

/// The C spelling of a bound type: the explicit one, else its name.
#[cfg(test)]
pub(crate) const fn c_spelling(name: &'static str, explicit: &[&'static str]) -> &'static str {
    match explicit {
        [c] => c,
        _ => name,
    }
}

/// The file a loaded library really is, found from one of its symbols
/// (`dladdr`), for libraries the dynamic linker found by name.
pub(crate) fn file_of(library: &Library, probe: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut c_name = probe.as_bytes().to_vec();
    c_name.push(0);
    // SAFETY: only the symbol's address is read (as a data pointer); nothing
    // is called or dereferenced through it.
    let address: *mut libc::c_void = *unsafe { library.get::<*mut libc::c_void>(&c_name) }.ok()?;
    // SAFETY: `Dl_info` is plain data for which all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only inspects the address and fills `info`, which
    // lives for the call; the library stays loaded meanwhile.
    let found = unsafe { libc::dladdr(address, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated file name owned by the
    // dynamic linker, valid while the library is loaded; we copy it.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(Path::new(std::ffi::OsStr::from_bytes(name.to_bytes())).to_path_buf())
}
