//! Entry points of the elementwise operators.

use super::{check_bcast, check_float, go};
use crate::elementwise::{self as ew, BackOp, BinOp, Src, TerOp, UnOp};
use crate::rt::{self, err, R};
use crate::types::*;
use crate::view::{self, TView};
use std::ffi::{c_char, CStr};

unsafe fn bin(
    ctx: ContextHandle,
    oh: TensorHandle,
    out: TView,
    a: Src,
    b: Src,
    op: BinOp,
) -> R<()> {
    for (s, n) in [(&a, "input"), (&b, "other")] {
        if let Src::T(t) = s {
            check_bcast(&out, t, n)?;
        }
    }
    // SAFETY: handles come from the framework.
    unsafe { go(ctx, oh, move || ew::binary(&out, a, b, op)) }
}

macro_rules! binary_ops {
    ($($name:literal: $f:ident, $finp:ident, $fs:ident, $finps:ident, |$($x:ident: $t:ty),*| $op:expr;)*) => {$(
        #[no_mangle]
        unsafe extern "C" fn $f(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle $(, $x: $t)*) -> i32 {
            rt::guard($name, || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(out, "out")?;
                    let a = rt::tensor(input, "input")?;
                    let b = rt::tensor(other, "other")?;
                    bin(ctx, out, o, Src::T(a), Src::T(b), $op)
                }
            })
        }
        #[no_mangle]
        unsafe extern "C" fn $finp(ctx: ContextHandle, input: TensorHandle, other: ConstTensorHandle $(, $x: $t)*) -> i32 {
            rt::guard(concat!($name, "Inp"), || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(input, "input")?;
                    let b = rt::tensor(other, "other")?;
                    bin(ctx, input, o, Src::T(o), Src::T(b), $op)
                }
            })
        }
        #[no_mangle]
        unsafe extern "C" fn $fs(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, other: *const DiopiScalar $(, $x: $t)*) -> i32 {
            rt::guard(concat!($name, "Scalar"), || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(out, "out")?;
                    let a = rt::tensor(input, "input")?;
                    let s = rt::scalar(other, "other")?;
                    bin(ctx, out, o, Src::T(a), Src::S(s), $op)
                }
            })
        }
        #[no_mangle]
        unsafe extern "C" fn $finps(ctx: ContextHandle, input: TensorHandle, other: *const DiopiScalar $(, $x: $t)*) -> i32 {
            rt::guard(concat!($name, "InpScalar"), || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(input, "input")?;
                    let s = rt::scalar(other, "other")?;
                    bin(ctx, input, o, Src::T(o), Src::S(s), $op)
                }
            })
        }
    )*};
}

// SAFETY (for the closures below): `alpha` is read on the calling thread.
binary_ops! {
    "Add": diopiAdd, diopiAddInp, diopiAddScalar, diopiAddInpScalar, |alpha: *const DiopiScalar| BinOp::Add(rt::scalar(alpha, "alpha")?);
    "Sub": diopiSub, diopiSubInp, diopiSubScalar, diopiSubInpScalar, |alpha: *const DiopiScalar| BinOp::Sub(rt::scalar(alpha, "alpha")?);
    "Mul": diopiMul, diopiMulInp, diopiMulScalar, diopiMulInpScalar, | | BinOp::Mul;
    "Div": diopiDiv, diopiDivInp, diopiDivScalar, diopiDivInpScalar, |mode: i32| BinOp::Div(mode);
    "Eq": diopiEq, diopiEqInp, diopiEqScalar, diopiEqInpScalar, | | BinOp::Eq;
    "Ne": diopiNe, diopiNeInp, diopiNeScalar, diopiNeInpScalar, | | BinOp::Ne;
    "Lt": diopiLt, diopiLtInp, diopiLtScalar, diopiLtInpScalar, | | BinOp::Lt;
    "Le": diopiLe, diopiLeInp, diopiLeScalar, diopiLeInpScalar, | | BinOp::Le;
    "Gt": diopiGt, diopiGtInp, diopiGtScalar, diopiGtInpScalar, | | BinOp::Gt;
    "Ge": diopiGe, diopiGeInp, diopiGeScalar, diopiGeInpScalar, | | BinOp::Ge;
}

#[no_mangle]
unsafe extern "C" fn diopiPow(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    exponent: *const DiopiScalar,
) -> i32 {
    rt::guard("Pow", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let a = rt::tensor(input, "input")?;
            bin(
                ctx,
                out,
                o,
                Src::T(a),
                Src::S(rt::scalar(exponent, "exponent")?),
                BinOp::Pow,
            )
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiPowInp(
    ctx: ContextHandle,
    input: TensorHandle,
    exponent: *const DiopiScalar,
) -> i32 {
    rt::guard("PowInp", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(input, "input")?;
            bin(
                ctx,
                input,
                o,
                Src::T(o),
                Src::S(rt::scalar(exponent, "exponent")?),
                BinOp::Pow,
            )
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiPowTensor(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    exponent: ConstTensorHandle,
) -> i32 {
    rt::guard("PowTensor", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let a = rt::tensor(input, "input")?;
            let e = rt::tensor(exponent, "exponent")?;
            bin(ctx, out, o, Src::T(a), Src::T(e), BinOp::Pow)
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiPowInpTensor(
    ctx: ContextHandle,
    input: TensorHandle,
    exponent: ConstTensorHandle,
) -> i32 {
    rt::guard("PowInpTensor", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(input, "input")?;
            let e = rt::tensor(exponent, "exponent")?;
            bin(ctx, input, o, Src::T(o), Src::T(e), BinOp::Pow)
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiPowScalar(
    ctx: ContextHandle,
    out: TensorHandle,
    input: *const DiopiScalar,
    exponent: ConstTensorHandle,
) -> i32 {
    rt::guard("PowScalar", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let e = rt::tensor(exponent, "exponent")?;
            bin(
                ctx,
                out,
                o,
                Src::S(rt::scalar(input, "input")?),
                Src::T(e),
                BinOp::Pow,
            )
        }
    })
}

macro_rules! minmax {
    ($($name:literal: $f:ident => $op:expr;)*) => {$(
        #[no_mangle]
        unsafe extern "C" fn $f(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) -> i32 {
            rt::guard($name, || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(out, "out")?;
                    let a = rt::tensor(input, "input")?;
                    let b = rt::tensor(other, "other")?;
                    bin(ctx, out, o, Src::T(a), Src::T(b), $op)
                }
            })
        }
    )*};
}
minmax! {
    "Maximum": diopiMaximum => BinOp::Maximum;
    "Minimum": diopiMinimum => BinOp::Minimum;
}

unsafe fn un(ctx: ContextHandle, oh: TensorHandle, out: TView, x: TView, op: UnOp) -> R<()> {
    check_bcast(&out, &x, "input")?;
    if !op.int_ok() {
        check_float(&out, "out")?;
    }
    // SAFETY: handles come from the framework.
    unsafe { go(ctx, oh, move || ew::unary(&out, &x, op)) }
}

macro_rules! unary_ops {
    ($($name:literal: $f:ident, $finp:ident => $op:expr;)*) => {$(
        #[no_mangle]
        unsafe extern "C" fn $f(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle) -> i32 {
            rt::guard($name, || {
                // SAFETY: framework handles.
                unsafe {
                    let o = rt::tensor_mut(out, "out")?;
                    let x = rt::tensor(input, "input")?;
                    un(ctx, out, o, x, $op)
                }
            })
        }
        #[no_mangle]
        unsafe extern "C" fn $finp(ctx: ContextHandle, input: TensorHandle) -> i32 {
            rt::guard(concat!($name, "Inp"), || {
                // SAFETY: framework handles.
                unsafe {
                    let o = rt::tensor_mut(input, "input")?;
                    un(ctx, input, o, o, $op)
                }
            })
        }
    )*};
}
unary_ops! {
    "Sqrt": diopiSqrt, diopiSqrtInp => UnOp::Sqrt;
    "Rsqrt": diopiRsqrt, diopiRsqrtInp => UnOp::Rsqrt;
    "Exp": diopiExp, diopiExpInp => UnOp::Exp;
    "Log": diopiLog, diopiLogInp => UnOp::Log;
    "Neg": diopiNeg, diopiNegInp => UnOp::Neg;
    "Abs": diopiAbs, diopiAbsInp => UnOp::Abs;
    "Sign": diopiSign, diopiSignInp => UnOp::Sign;
    "Reciprocal": diopiReciprocal, diopiReciprocalInp => UnOp::Reciprocal;
    "Erf": diopiErf, diopiErfInp => UnOp::Erf;
    "Sigmoid": diopiSigmoid, diopiSigmoidInp => UnOp::Sigmoid;
    "Tanh": diopiTanh, diopiTanhInp => UnOp::Tanh;
    "Silu": diopiSilu, diopiSiluInp => UnOp::Silu;
    "Relu": diopiRelu, diopiReluInp => UnOp::Relu;
}

unsafe fn approx(s: *const c_char) -> R<bool> {
    if s.is_null() {
        return Ok(false);
    }
    // SAFETY: a NUL-terminated string from the caller.
    match unsafe { CStr::from_ptr(s) }.to_bytes() {
        b"none" | b"" => Ok(false),
        b"tanh" => Ok(true),
        other => Err(err(format!(
            "approximate must be \"none\" or \"tanh\", not {:?}",
            String::from_utf8_lossy(other)
        ))),
    }
}

#[no_mangle]
unsafe extern "C" fn diopiGelu(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    approximate: *const c_char,
) -> i32 {
    rt::guard("Gelu", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let x = rt::tensor(input, "input")?;
            un(ctx, out, o, x, UnOp::Gelu(approx(approximate)?))
        }
    })
}

unsafe fn back(
    ctx: ContextHandle,
    gh: TensorHandle,
    gi: TView,
    go_: TView,
    saved: TView,
    op: BackOp,
) -> R<()> {
    check_float(&gi, "grad_input")?;
    check_bcast(&gi, &go_, "grad_output")?;
    check_bcast(&gi, &saved, "input")?;
    // SAFETY: handles come from the framework.
    unsafe { go(ctx, gh, move || ew::backward(&gi, &go_, &saved, op)) }
}

macro_rules! backward_ops {
    ($($name:literal: $f:ident, |$($x:ident: $t:ty),*| $op:expr;)*) => {$(
        #[no_mangle]
        unsafe extern "C" fn $f(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, saved: ConstTensorHandle $(, $x: $t)*) -> i32 {
            rt::guard($name, || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let gi = rt::tensor_mut(grad_input, "grad_input")?;
                    let g = rt::tensor(grad_output, "grad_output")?;
                    let s = rt::tensor(saved, "input")?;
                    back(ctx, grad_input, gi, g, s, $op)
                }
            })
        }
    )*};
}
backward_ops! {
    "ThresholdBackward": diopiThresholdBackward, |threshold: *const DiopiScalar| BackOp::Threshold(rt::scalar(threshold, "threshold")?);
    "GeluBackward": diopiGeluBackward, |approximate: *const c_char| BackOp::Gelu(approx(approximate)?);
    "SiluBackward": diopiSiluBackward, | | BackOp::Silu;
    "SigmoidBackward": diopiSigmoidBackward, | | BackOp::Sigmoid;
    "TanhBackward": diopiTanhBackward, | | BackOp::Tanh;
}

unsafe fn ter(
    ctx: ContextHandle,
    oh: TensorHandle,
    out: TView,
    a: TView,
    b: TView,
    c: TView,
    op: TerOp,
) -> R<()> {
    check_bcast(&out, &a, "input")?;
    check_bcast(&out, &b, "tensor1")?;
    check_bcast(&out, &c, "tensor2")?;
    // SAFETY: handles come from the framework.
    unsafe { go(ctx, oh, move || ew::ternary(&out, &a, &b, &c, op)) }
}

macro_rules! addc_ops {
    ($($name:literal: $f:ident, $finp:ident => $op:ident;)*) => {$(
        #[no_mangle]
        unsafe extern "C" fn $f(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, t1: ConstTensorHandle, t2: ConstTensorHandle, value: *const DiopiScalar) -> i32 {
            rt::guard($name, || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(out, "out")?;
                    let (a, b, c) = (rt::tensor(input, "input")?, rt::tensor(t1, "tensor1")?, rt::tensor(t2, "tensor2")?);
                    ter(ctx, out, o, a, b, c, TerOp::$op(rt::scalar(value, "value")?))
                }
            })
        }
        #[no_mangle]
        unsafe extern "C" fn $finp(ctx: ContextHandle, input: TensorHandle, t1: ConstTensorHandle, t2: ConstTensorHandle, value: *const DiopiScalar) -> i32 {
            rt::guard(concat!($name, "Inp"), || {
                // SAFETY: framework handles and pointers.
                unsafe {
                    let o = rt::tensor_mut(input, "input")?;
                    let (b, c) = (rt::tensor(t1, "tensor1")?, rt::tensor(t2, "tensor2")?);
                    ter(ctx, input, o, o, b, c, TerOp::$op(rt::scalar(value, "value")?))
                }
            })
        }
    )*};
}
addc_ops! {
    "Addcmul": diopiAddcmul, diopiAddcmulInp => Addcmul;
    "Addcdiv": diopiAddcdiv, diopiAddcdivInp => Addcdiv;
}

#[no_mangle]
unsafe extern "C" fn diopiWhere(
    ctx: ContextHandle,
    out: TensorHandle,
    condition: ConstTensorHandle,
    input: ConstTensorHandle,
    other: ConstTensorHandle,
) -> i32 {
    rt::guard("Where", || {
        // SAFETY: framework handles.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let (c, a, b) = (
                rt::tensor(condition, "condition")?,
                rt::tensor(input, "input")?,
                rt::tensor(other, "other")?,
            );
            ter(ctx, out, o, c, a, b, TerOp::Where)
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiMaskedFill(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    mask: ConstTensorHandle,
    value: ConstTensorHandle,
) -> i32 {
    rt::guard("MaskedFill", || {
        // SAFETY: framework handles.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let (a, m, v) = (
                rt::tensor(input, "input")?,
                rt::tensor(mask, "mask")?,
                rt::tensor(value, "value")?,
            );
            if v.numel() != 1 {
                return Err(err(format!(
                    "value must have one element, not {}",
                    v.numel()
                )));
            }
            let v0 = TView::new(v.ptr, v.dtype, &[], &[]);
            ter(ctx, out, o, m, v0, a, TerOp::Where)
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiMaskedFillScalar(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    mask: ConstTensorHandle,
    value: *const DiopiScalar,
) -> i32 {
    rt::guard("MaskedFillScalar", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(out, "out")?;
            let (a, m) = (rt::tensor(input, "input")?, rt::tensor(mask, "mask")?);
            let v = rt::scalar(value, "value")?;
            check_bcast(&o, &a, "input")?;
            check_bcast(&o, &m, "mask")?;
            go(ctx, out, move || ew::masked_fill_scalar(&o, &a, &m, v))
        }
    })
}

unsafe fn clamp_s(
    ctx: ContextHandle,
    oh: TensorHandle,
    o: TView,
    x: TView,
    lo: *const DiopiScalar,
    hi: *const DiopiScalar,
) -> R<()> {
    check_bcast(&o, &x, "input")?;
    // SAFETY: scalar pointers from the caller.
    let (lo, hi) = unsafe { (rt::opt_scalar(lo), rt::opt_scalar(hi)) };
    // SAFETY: handles come from the framework.
    unsafe { go(ctx, oh, move || ew::clamp_scalar(&o, &x, lo, hi)) }
}

#[no_mangle]
unsafe extern "C" fn diopiClampScalar(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    min: *const DiopiScalar,
    max: *const DiopiScalar,
) -> i32 {
    rt::guard("ClampScalar", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            clamp_s(
                ctx,
                out,
                rt::tensor_mut(out, "out")?,
                rt::tensor(input, "input")?,
                min,
                max,
            )
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiClampInpScalar(
    ctx: ContextHandle,
    input: TensorHandle,
    min: *const DiopiScalar,
    max: *const DiopiScalar,
) -> i32 {
    rt::guard("ClampInpScalar", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(input, "input")?;
            clamp_s(ctx, input, o, o, min, max)
        }
    })
}

unsafe fn clamp_t(
    ctx: ContextHandle,
    oh: TensorHandle,
    o: TView,
    x: TView,
    lo: ConstTensorHandle,
    hi: ConstTensorHandle,
) -> R<()> {
    check_bcast(&o, &x, "input")?;
    // SAFETY: framework handles.
    let (lo, hi) = unsafe { (rt::opt_tensor(lo, "min")?, rt::opt_tensor(hi, "max")?) };
    for (t, n) in [(&lo, "min"), (&hi, "max")] {
        if let Some(t) = t {
            check_bcast(&o, t, n)?;
        }
    }
    // SAFETY: handles come from the framework.
    unsafe {
        go(ctx, oh, move || {
            ew::clamp_tensor(&o, &x, lo.as_ref(), hi.as_ref())
        })
    }
}

#[no_mangle]
unsafe extern "C" fn diopiClamp(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
    min: ConstTensorHandle,
    max: ConstTensorHandle,
) -> i32 {
    rt::guard("Clamp", || {
        // SAFETY: framework handles.
        unsafe {
            clamp_t(
                ctx,
                out,
                rt::tensor_mut(out, "out")?,
                rt::tensor(input, "input")?,
                min,
                max,
            )
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiClampInp(
    ctx: ContextHandle,
    input: TensorHandle,
    min: ConstTensorHandle,
    max: ConstTensorHandle,
) -> i32 {
    rt::guard("ClampInp", || {
        // SAFETY: framework handles.
        unsafe {
            let o = rt::tensor_mut(input, "input")?;
            clamp_t(ctx, input, o, o, min, max)
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiFill(
    ctx: ContextHandle,
    input: TensorHandle,
    value: *const DiopiScalar,
) -> i32 {
    rt::guard("Fill", || {
        // SAFETY: framework handles and pointers.
        unsafe {
            let o = rt::tensor_mut(input, "input")?;
            let v = rt::scalar(value, "value")?;
            go(ctx, input, move || ew::fill(&o, v))
        }
    })
}

unsafe fn fill_with(ctx: ContextHandle, h: TensorHandle, v: Scalar) -> R<()> {
    // SAFETY: framework handles.
    unsafe {
        let o = rt::tensor_mut(h, "out")?;
        go(ctx, h, move || ew::fill(&o, v))
    }
}

#[no_mangle]
unsafe extern "C" fn diopiZeroInp(ctx: ContextHandle, input: TensorHandle) -> i32 {
    // SAFETY: framework handles.
    rt::guard("ZeroInp", || unsafe {
        fill_with(ctx, input, Scalar::Int(0))
    })
}

#[no_mangle]
unsafe extern "C" fn diopiZeros(ctx: ContextHandle, out: TensorHandle, _size: DiopiSize) -> i32 {
    // SAFETY: framework handles.
    rt::guard("Zeros", || unsafe { fill_with(ctx, out, Scalar::Int(0)) })
}

#[no_mangle]
unsafe extern "C" fn diopiOnes(ctx: ContextHandle, out: TensorHandle, _size: DiopiSize) -> i32 {
    // SAFETY: framework handles.
    rt::guard("Ones", || unsafe { fill_with(ctx, out, Scalar::Int(1)) })
}

#[no_mangle]
unsafe extern "C" fn diopiCopyInp(
    ctx: ContextHandle,
    src: ConstTensorHandle,
    dest: TensorHandle,
) -> i32 {
    rt::guard("CopyInp", || {
        // SAFETY: framework handles.
        unsafe {
            let d = rt::tensor_mut(dest, "dest")?;
            let s = rt::tensor(src, "src")?;
            check_bcast(&d, &s, "src")?;
            go(ctx, dest, move || view::copy(&d, &s))
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiCastDtype(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
) -> i32 {
    rt::guard("CastDtype", || {
        // SAFETY: framework handles.
        unsafe {
            let d = rt::tensor_mut(out, "out")?;
            let s = rt::tensor(input, "input")?;
            check_bcast(&d, &s, "input")?;
            go(ctx, out, move || view::copy(&d, &s))
        }
    })
}

#[no_mangle]
unsafe extern "C" fn diopiExpand(
    ctx: ContextHandle,
    out: TensorHandle,
    input: ConstTensorHandle,
) -> i32 {
    rt::guard("Expand", || {
        // SAFETY: framework handles.
        unsafe {
            let d = rt::tensor_mut(out, "out")?;
            let s = rt::tensor(input, "input")?;
            check_bcast(&d, &s, "input")?;
            go(ctx, out, move || view::copy(&d, &s))
        }
    })
}
