//! The `exports!` macro: C functions exported under their own names, and
//! their declarations kept as data for the header check.

/// One exported function as declared in Rust (types as written, in the C
/// types' own names, which the vendor's header test translates to C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// The C symbol.
    pub name: &'static str,
    /// The return type, as written.
    pub ret: &'static str,
    /// The argument types, as written.
    pub args: &'static [&'static str],
}

/// Declares exported C functions and a `SIGNATURES` table of them; a
/// function with `#[cfg(...)]` (after its doc) is left out of both when the
/// condition is false (the `old-libraries` build).
macro_rules! exports {
    ($(
        $(#[doc = $doc:expr])*
        $(#[cfg($cfg:meta)])?
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block
    )*) => {
        $(
            $(#[doc = $doc])*
            ///
            /// # Safety
            /// As NVIDIA's documentation of the function requires.
            $(#[cfg($cfg)])?
            #[no_mangle]
            #[allow(non_snake_case, reason = "C parameter names")]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body
        )*

        /// Every function of this module, as declared.
        pub(crate) const SIGNATURES: &[$crate::exports::Signature] = &[$(
            $(#[cfg($cfg)])?
            $crate::exports::Signature {
                name: stringify!($name),
                ret: stringify!($ret),
                args: &[$(stringify!($ty)),*],
            },
        )*];
    };
}

pub(crate) use exports;
