//! Calling a DIOPI function whose C signature the op table declares.
//!
//! [`sig!`] turns a list of parameter kinds (after the context) into a
//! [`Sig`]: the kinds, to check a case's arguments against, and a function
//! that casts the looked-up symbol to exactly that C type and calls it.

use std::ffi::c_void;

/// One C parameter kind of a DIOPI function (the context is implicit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `diopiTensorHandle_t` (output or in-place tensor).
    T,
    /// `diopiConstTensorHandle_t` (input tensor, may be NULL if optional).
    C,
    /// `const diopiScalar_t*`.
    S,
    /// `diopiSize_t` by value.
    Z,
    /// `int64_t`.
    I,
    /// `double`.
    D,
    /// `float`.
    F,
    /// `bool`.
    B,
    /// A C enum (`int`): reduction, round mode.
    E,
    /// `diopiGeneratorHandle_t`.
    G,
    /// Any other pointer: `const char*`, `const int64_t*`, `diopiSize_t*`,
    /// an array of tensor handles.
    P,
}

impl Kind {
    /// Whether values of this kind travel as a pointer.
    pub(crate) fn is_pointer(self) -> bool {
        matches!(self, Kind::T | Kind::C | Kind::S | Kind::G | Kind::P)
    }
}

pub(crate) use dipu_diopi::DiopiSize;

/// An argument lowered to its C value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lowered {
    /// A pointer (tensor handle, scalar, string, array, NULL).
    Ptr(*mut c_void),
    /// A `diopiSize_t`.
    Size(DiopiSize),
    /// An `int64_t`.
    I64(i64),
    /// A `double`.
    F64(f64),
    /// A `float`.
    F32(f32),
    /// A `bool`.
    Bool(bool),
    /// A C enum.
    Enum(i32),
}

impl Lowered {
    /// Whether this value can be passed as `kind`.
    pub(crate) fn fits(&self, kind: Kind) -> bool {
        match self {
            Lowered::Ptr(_) => kind.is_pointer(),
            Lowered::Size(_) => kind == Kind::Z,
            Lowered::I64(_) => kind == Kind::I,
            Lowered::F64(_) => kind == Kind::D,
            Lowered::F32(_) => kind == Kind::F,
            Lowered::Bool(_) => kind == Kind::B,
            Lowered::Enum(_) => kind == Kind::E,
        }
    }
    /// The pointer (NULL for another variant; [`Sig::check`] rules that out).
    pub(crate) fn ptr(&self) -> *mut c_void {
        match *self {
            Lowered::Ptr(p) => p,
            _ => std::ptr::null_mut(),
        }
    }
    /// The size (empty for another variant).
    pub(crate) fn size(&self) -> DiopiSize {
        match *self {
            Lowered::Size(s) => s,
            _ => DiopiSize::EMPTY,
        }
    }
    /// The `int64_t` (0 for another variant).
    pub(crate) fn i64(&self) -> i64 {
        match *self {
            Lowered::I64(v) => v,
            _ => 0,
        }
    }
    /// The `double` (0 for another variant).
    pub(crate) fn f64(&self) -> f64 {
        match *self {
            Lowered::F64(v) => v,
            _ => 0.0,
        }
    }
    /// The `float` (0 for another variant).
    pub(crate) fn f32(&self) -> f32 {
        match *self {
            Lowered::F32(v) => v,
            _ => 0.0,
        }
    }
    /// The `bool` (false for another variant).
    pub(crate) fn bool(&self) -> bool {
        matches!(*self, Lowered::Bool(true))
    }
    /// The enum (0 for another variant).
    pub(crate) fn enum_(&self) -> i32 {
        match *self {
            Lowered::Enum(v) => v,
            _ => 0,
        }
    }
}

/// The raw call: the symbol, the context, the lowered arguments.
pub(crate) type RawCall = unsafe fn(*const c_void, *mut c_void, &[Lowered]) -> i32;

/// A DIOPI function's C signature after the context.
#[derive(Clone, Copy)]
pub(crate) struct Sig {
    /// Parameter kinds, in order.
    pub(crate) kinds: &'static [Kind],
    /// Calls a symbol of exactly this signature.
    pub(crate) call: RawCall,
}

impl Sig {
    /// `Err` naming the first argument that does not fit its parameter.
    pub(crate) fn check(&self, args: &[Lowered]) -> Result<(), String> {
        if args.len() != self.kinds.len() {
            return Err(format!(
                "{} arguments for a signature of {}",
                args.len(),
                self.kinds.len()
            ));
        }
        for (i, (a, k)) in args.iter().zip(self.kinds).enumerate() {
            if !a.fits(*k) {
                return Err(format!("argument {i} is {a:?}, the signature wants {k:?}"));
            }
        }
        Ok(())
    }

    /// Calls `f` with `ctx` and `args`; `args` is checked first.
    ///
    /// # Safety
    /// `f` must be a function of this signature, every pointer in `args`
    /// valid for it, and `ctx` a live DIOPI context.
    pub(crate) unsafe fn invoke(
        &self,
        f: *const c_void,
        ctx: *mut c_void,
        args: &[Lowered],
    ) -> Result<i32, String> {
        self.check(args)?;
        // SAFETY: the caller's contract; the arguments fit the kinds.
        Ok(unsafe { (self.call)(f, ctx, args) })
    }
}

/// Builds a [`Sig`] from parameter kinds (see [`Kind`]), context excluded:
/// `sig!(T, C, C, S)` is `Add(ctx, out, input, other, alpha)`.
macro_rules! sig {
    ($($k:ident),* $(,)?) => {{
        use $crate::ffi_call::{Kind, Lowered, Sig};
        #[allow(unused_assignments, unused_mut, unused_variables)]
        unsafe fn call(f: *const std::ffi::c_void, ctx: *mut std::ffi::c_void, a: &[Lowered]) -> i32 {
            type F = unsafe extern "C" fn(*mut std::ffi::c_void $(, sig!(@ty $k))*) -> i32;
            // SAFETY: the caller passes a symbol of this C signature.
            let f: F = unsafe { std::mem::transmute::<*const std::ffi::c_void, F>(f) };
            let mut i = 0usize;
            // SAFETY: the arguments were checked against the kinds.
            unsafe { f(ctx $(, sig!(@val $k, a, i))*) }
        }
        Sig { kinds: &[$(Kind::$k),*], call }
    }};
    (@ty T) => { *mut std::ffi::c_void };
    (@ty C) => { *mut std::ffi::c_void };
    (@ty S) => { *mut std::ffi::c_void };
    (@ty G) => { *mut std::ffi::c_void };
    (@ty P) => { *mut std::ffi::c_void };
    (@ty Z) => { dipu_diopi::DiopiSize };
    (@ty I) => { i64 };
    (@ty D) => { f64 };
    (@ty F) => { f32 };
    (@ty B) => { bool };
    (@ty E) => { i32 };
    (@val T, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].ptr() }};
    (@val C, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].ptr() }};
    (@val S, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].ptr() }};
    (@val G, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].ptr() }};
    (@val P, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].ptr() }};
    (@val Z, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].size() }};
    (@val I, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].i64() }};
    (@val D, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].f64() }};
    (@val F, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].f32() }};
    (@val B, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].bool() }};
    (@val E, $a:ident, $i:ident) => {{ $i += 1; $a[$i - 1].enum_() }};
}
pub(crate) use sig;

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn probe(
        _ctx: *mut c_void,
        out: *mut c_void,
        size: DiopiSize,
        x: f64,
        y: f32,
        b: bool,
        n: i64,
        e: i32,
    ) -> i32 {
        // SAFETY: the test passes a valid i64 and a valid slice.
        let sum: i64 = unsafe { std::slice::from_raw_parts(size.data, size.len as usize) }
            .iter()
            .sum();
        // SAFETY: `out` points at an f64 the test owns.
        unsafe { *out.cast::<f64>() = x + f64::from(y) + sum as f64 + n as f64 + f64::from(e) };
        i32::from(b)
    }

    #[test]
    fn calls_with_the_declared_signature() {
        let s = sig!(T, Z, D, F, B, I, E);
        let mut out = 0f64;
        let dims = [1i64, 2, 3];
        let args = [
            Lowered::Ptr((&mut out as *mut f64).cast()),
            Lowered::Size(DiopiSize {
                data: dims.as_ptr(),
                len: 3,
            }),
            Lowered::F64(0.5),
            Lowered::F32(0.25),
            Lowered::Bool(true),
            Lowered::I64(10),
            Lowered::Enum(100),
        ];
        // SAFETY: `probe` has this signature and the pointers are live.
        let r = unsafe { s.invoke(probe as *const c_void, std::ptr::null_mut(), &args) };
        assert_eq!(r, Ok(1));
        assert_eq!(out, 116.75);
        // SAFETY: the check fails before any call.
        let bad = unsafe { s.invoke(probe as *const c_void, std::ptr::null_mut(), &args[..2]) };
        assert!(bad.is_err());
    }
}
