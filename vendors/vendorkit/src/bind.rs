//! The machinery behind a vendor's hand-written bindings.
//!
//! Each binding module is one table, written with three macros:
//!
//! - [`c_types!`](crate::c_types) declares the C types as Rust aliases under
//!   their C names (`cudaStream_t = *mut c_void;`), with the C spelling
//!   where it is not the bare name (`cudaMemcpyKind = c_int, "enum
//!   cudaMemcpyKind";`);
//! - [`c_consts!`](crate::c_consts) declares the constants and enum values
//!   the vendor uses;
//! - [`library!`](crate::library) declares the functions,
//!   `fn name(arg: Type, ...) -> Ret;` in those types, and generates the
//!   struct that holds the opened library and one `Option<fn>` per function,
//!   resolved when the library is opened. A missing symbol is `None`, and
//!   calling it is an `Unsupported` error naming the symbol and the file; it
//!   never panics. The library is never unloaded.
//!
//! The tables also exist as data (under the vendor's `cfg(test)`): a header
//! test turns every Rust signature into its C prototype and has the C
//! compiler check it, and every constant and type size, against the
//! vendor's headers.

use std::collections::HashMap;
use std::ffi::{c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dipu_deviceapi::{Error, ErrorKind};
use libloading::Library;

/// One bound function as the Rust side declares it (for the header test).
#[derive(Debug)]
pub struct Signature {
    /// The C function name.
    pub name: &'static str,
    /// The symbols looked up for it, in order.
    pub symbols: &'static [&'static str],
    /// The Rust return type, as written.
    pub ret: &'static str,
    /// Argument names and Rust types, as written.
    pub args: &'static [(&'static str, &'static str)],
}

/// One bound constant (for the header test).
#[derive(Debug)]
pub struct Constant {
    /// The C name of the constant or enum value.
    pub name: &'static str,
    /// Its value.
    pub value: i64,
}

/// One bound C type (for the header test).
#[derive(Debug)]
pub struct CType {
    /// The Rust alias, named as the C type.
    pub rust: &'static str,
    /// How C spells it (`enum cudaMemcpyKind`).
    pub c: &'static str,
    /// `size_of` the Rust type; `None` for an opaque type (`c_void`).
    pub size: Option<usize>,
}

/// Declares C types as Rust aliases; see [`bind`](crate::bind).
#[macro_export]
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

/// Declares C constants; see [`bind`](crate::bind).
#[macro_export]
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

/// Declares a library's functions; see [`bind`](crate::bind). `upgrade`
/// ends the error for a missing symbol ("it is too old or not ..."). A
/// function may list the symbol names to try instead of its own, in order:
/// `fn name["name_v2", "name"](...)` (for a name a header `#define`s to a
/// versioned symbol).
#[macro_export]
macro_rules! library {
    (
        upgrade: $upgrade:literal,
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
            /// Never closed: the vendor's libraries keep threads and
            /// callbacks that may outlive the vendor, so, like a vendor
            /// plugin, they stay loaded for the life of the process.
            _library: std::mem::ManuallyDrop<$crate::__private::libloading::Library>,
        }

        #[expect(non_snake_case, reason = "accessors named as the C functions they return")]
        impl $lib {
            /// Resolves every function of `library`, opened from `path`;
            /// the ones it lacks stay unresolved.
            pub(crate) fn resolve(
                library: $crate::__private::libloading::Library,
                path: std::path::PathBuf,
            ) -> Self {
                $lib {
                    $(
                        // SAFETY: the type is the one this table declares for
                        // the symbol, which the header test checks against the
                        // vendor's headers; the library is never unloaded.
                        $name: unsafe {
                            $crate::bind::symbol(&library, $crate::symbols!($name $(, $($alt),+)?))
                        },
                    )*
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
                    symbols: $crate::symbols!($name $(, $($alt),+)?),
                    ret: stringify!($ret),
                    args: &[$( (stringify!($arg), stringify!($ty)) ),*],
                },
            )*];

            $(
                #[doc = concat!("`", stringify!($name), "`, or `Unsupported` when the library lacks it.")]
                pub(crate) fn $name(
                    &self,
                ) -> $crate::__private::dipu_deviceapi::Result<unsafe extern "C" fn($($ty),*) -> $ret> {
                    self.$name.ok_or_else(|| {
                        $crate::bind::missing_symbol(stringify!($name), $file, &self.path, $upgrade)
                    })
                }
            )*
        }
    };
}

/// The symbols to look up for a bound function: its explicit list, else
/// its own name.
#[doc(hidden)]
#[macro_export]
macro_rules! symbols {
    ($name:ident) => {
        &[stringify!($name)]
    };
    ($name:ident, $($alt:literal),+) => {
        &[$($alt),+]
    };
}

/// The first of `names` that `library` exports, as a function pointer.
///
/// # Safety
///
/// `T` is the function pointer type of every one of `names`, and `library`
/// stays loaded as long as the pointer is used.
pub unsafe fn symbol<T: Copy>(library: &Library, names: &[&str]) -> Option<T> {
    names.iter().find_map(|name| {
        let mut c_name = name.as_bytes().to_vec();
        c_name.push(0);
        // SAFETY: the caller's contract: `T` is the symbol's type and the
        // library outlives the pointer.
        unsafe { library.get::<T>(&c_name) }.ok().map(|s| *s)
    })
}

/// The error for a function the opened library lacks; `upgrade` ends it
/// ("it is too old or not {upgrade}").
pub fn missing_symbol(name: &str, file: &str, path: &Path, upgrade: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{name} is not exported by {} (the {file} that was loaded); it is too old or not \
             {upgrade}",
            path.display()
        ),
    )
}

/// The C spelling of a bound type: the explicit one, else its name.
pub const fn c_spelling(name: &'static str, explicit: &[&'static str]) -> &'static str {
    match explicit {
        [c] => c,
        _ => name,
    }
}

/// The file a loaded library really is, found from one of its symbols
/// (`dladdr`), for libraries the dynamic linker found by name.
pub fn file_of(library: &Library, probe: &str) -> Option<PathBuf> {
    let mut c_name = probe.as_bytes().to_vec();
    c_name.push(0);
    // SAFETY: only the symbol's address is read (as a data pointer); nothing
    // is called or dereferenced through it.
    let address: *mut c_void = *unsafe { library.get::<*mut c_void>(&c_name) }.ok()?;
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
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(Path::new(OsStr::from_bytes(name.to_bytes())).to_path_buf())
}

/// How C spells a Rust type of the tables (`*mut *const c_char` is
/// `char const * *`), `names` giving the C spelling of each
/// [`c_types!`](crate::c_types) alias (for the header tests: it panics on
/// a type it cannot spell).
pub fn c_type(rust: &str, names: &HashMap<&str, &str>) -> String {
    let spaced = rust.replace('*', " * ");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    fn go(tokens: &[&str], names: &HashMap<&str, &str>, rust: &str) -> String {
        match tokens {
            ["*", "mut", rest @ ..] => format!("{} *", go(rest, names, rust)),
            ["*", "const", rest @ ..] => format!("{} const *", go(rest, names, rust)),
            [base] => match *base {
                "c_int" => "int".into(),
                "c_uint" => "unsigned int".into(),
                "c_char" => "char".into(),
                "c_void" | "()" => "void".into(),
                "c_ulonglong" => "unsigned long long".into(),
                "usize" => "size_t".into(),
                "u32" => "uint32_t".into(),
                "i32" => "int32_t".into(),
                "u64" => "uint64_t".into(),
                "i64" => "int64_t".into(),
                "f32" => "float".into(),
                other => names
                    .get(other)
                    .unwrap_or_else(|| {
                        panic!(
                            "no C spelling for `{other}` in `{rust}`: add it to a c_types! table"
                        )
                    })
                    .to_string(),
            },
            _ => panic!("cannot translate the Rust type `{rust}` to C"),
        }
    }
    go(&tokens, names, rust)
}

/// The C argument list of Rust argument types: each [`c_type`], or `void`
/// for none.
pub fn c_args(args: &[&str], names: &HashMap<&str, &str>) -> String {
    if args.is_empty() {
        return "void".to_owned();
    }
    let args: Vec<String> = args.iter().map(|ty| c_type(ty, names)).collect();
    args.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_types_spell_as_c() {
        let names = HashMap::from([("kind_t", "enum kind"), ("handle_t", "handle_t")]);
        assert_eq!(c_type("*mut *const c_char", &names), "char const * *");
        assert_eq!(c_type("*const kind_t", &names), "enum kind const *");
        assert_eq!(c_type("u64", &names), "uint64_t");
        assert_eq!(c_type("()", &names), "void", "a function returning nothing");
        assert_eq!(c_args(&[], &names), "void");
        assert_eq!(
            c_args(&["handle_t", "*mut c_void", "usize"], &names),
            "handle_t, void *, size_t"
        );
    }

    #[test]
    #[should_panic(expected = "no C spelling for `unknown_t`")]
    fn an_unknown_type_is_named() {
        c_type("*mut unknown_t", &HashMap::new());
    }
}
