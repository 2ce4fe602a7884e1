//! Elementwise entry points: arithmetic, comparisons, unary functions and
//! their backward, fill, copy and cast. All run the `ew` kernel.

use super::entry::entry;
use super::{check_float, ew, Op, Q};
use crate::rt::{self, err, R, T};
use crate::types::*;

/// `out = a (code) b` with parameter `p0`.
fn bin(q: Q, out: &T, a: Op, b: Op, code: i32, p0: f64) -> R<()> {
    ew(q, code, out, [&a, &b, &Op::N], p0, 0.0)
}

/// `code` of a float op on `out` from `a` (and `b`), checking float dtypes.
fn fbin(q: Q, out: &T, a: Op, b: Op, code: i32, p0: f64) -> R<()> {
    let mut ts = vec![(out, "out")];
    for (o, n) in [(&a, "input"), (&b, "other")] {
        if let Op::T(t) = o {
            ts.push((t, n));
        }
    }
    check_float(q, &ts)?;
    bin(q, out, a.clone(), b.clone(), code, p0)
}

fn div_code(mode: i32) -> R<i32> {
    match mode {
        round_mode::NONE => Ok(4),
        round_mode::TRUNC => Ok(5),
        round_mode::FLOOR => Ok(6),
        m => Err(err(format!("rounding_mode {m} is not a diopiRoundMode_t"))),
    }
}

unsafe fn tc(h: ConstTensorHandle, n: &str) -> R<T> {
    // SAFETY: forwarded.
    unsafe { rt::tensor(h, n) }
}
unsafe fn tm(h: TensorHandle, n: &str) -> R<T> {
    // SAFETY: forwarded.
    unsafe { rt::tensor_mut(h, n) }
}
unsafe fn sv(s: *const DiopiScalar, n: &str) -> R<f64> {
    // SAFETY: forwarded.
    unsafe { rt::scalar(s, n) }.map(Scalar::f64)
}

/// The four forms of a binary op: `$name(out, input, other, extra)`,
/// `Inp(input, other, extra)`, `Scalar(out, input, other*, extra)`,
/// `InpScalar(input, other*, extra)`; `$code` computes (code, p0) from the
/// extra argument.
macro_rules! four {
    ($($f:ident, $finp:ident, $fs:ident, $finps:ident, $x:ident: $xt:ty => $code:expr;)*) => {$(
        entry! {
            fn $f[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle, $x: $xt) {
                let (code, p0) = $code;
                let o = tm(out, "out")?;
                bin(q, &o, Op::T(tc(input, "input")?), Op::T(tc(other, "other")?), code, p0)
            }
            fn $finp[ctx, q](input: TensorHandle, other: ConstTensorHandle, $x: $xt) {
                let (code, p0) = $code;
                let o = tm(input, "input")?;
                bin(q, &o, Op::T(o.clone()), Op::T(tc(other, "other")?), code, p0)
            }
            fn $fs[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: *const DiopiScalar, $x: $xt) {
                let (code, p0) = $code;
                let o = tm(out, "out")?;
                bin(q, &o, Op::T(tc(input, "input")?), Op::S(sv(other, "other")?), code, p0)
            }
            fn $finps[ctx, q](input: TensorHandle, other: *const DiopiScalar, $x: $xt) {
                let (code, p0) = $code;
                let o = tm(input, "input")?;
                bin(q, &o, Op::T(o.clone()), Op::S(sv(other, "other")?), code, p0)
            }
        }
    )*};
}

four! {
    diopiAdd, diopiAddInp, diopiAddScalar, diopiAddInpScalar, alpha: *const DiopiScalar => (1, sv(alpha, "alpha")?);
    diopiSub, diopiSubInp, diopiSubScalar, diopiSubInpScalar, alpha: *const DiopiScalar => (2, sv(alpha, "alpha")?);
    diopiDiv, diopiDivInp, diopiDivScalar, diopiDivInpScalar, mode: i32 => (div_code(mode)?, 0.0);
}

/// The forms without an extra argument: `$f(out, input, other)`,
/// `Inp(input, other)`, `Scalar(out, input, other*)`, `InpScalar(input, other*)`.
macro_rules! four_plain {
    ($($f:ident, $finp:ident, $fs:ident, $finps:ident => $code:expr;)*) => {$(
        entry! {
            fn $f[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) {
                let o = tm(out, "out")?;
                bin(q, &o, Op::T(tc(input, "input")?), Op::T(tc(other, "other")?), $code, 0.0)
            }
            fn $finp[ctx, q](input: TensorHandle, other: ConstTensorHandle) {
                let o = tm(input, "input")?;
                bin(q, &o, Op::T(o.clone()), Op::T(tc(other, "other")?), $code, 0.0)
            }
            fn $fs[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: *const DiopiScalar) {
                let o = tm(out, "out")?;
                bin(q, &o, Op::T(tc(input, "input")?), Op::S(sv(other, "other")?), $code, 0.0)
            }
            fn $finps[ctx, q](input: TensorHandle, other: *const DiopiScalar) {
                let o = tm(input, "input")?;
                bin(q, &o, Op::T(o.clone()), Op::S(sv(other, "other")?), $code, 0.0)
            }
        }
    )*};
}

four_plain! {
    diopiMul, diopiMulInp, diopiMulScalar, diopiMulInpScalar => 3;
    diopiGe, diopiGeInp, diopiGeScalar, diopiGeInpScalar => 24;
    diopiGt, diopiGtInp, diopiGtScalar, diopiGtInpScalar => 25;
    diopiLe, diopiLeInp, diopiLeScalar, diopiLeInpScalar => 26;
    diopiLt, diopiLtInp, diopiLtScalar, diopiLtInpScalar => 27;
    diopiEq, diopiEqInp, diopiEqScalar, diopiEqInpScalar => 28;
    diopiNe, diopiNeInp, diopiNeScalar, diopiNeInpScalar => 29;
}

/// Float unary ops, out-of-place and in place: `$f(out, input)`, `$finp(input)`.
macro_rules! unary {
    ($($f:ident, $finp:ident => $code:expr;)*) => {$(
        entry! {
            fn $f[ctx, q](out: TensorHandle, input: ConstTensorHandle) {
                let o = tm(out, "out")?;
                fbin(q, &o, Op::T(tc(input, "input")?), Op::N, $code, 0.0)
            }
            fn $finp[ctx, q](input: TensorHandle) {
                let o = tm(input, "input")?;
                fbin(q, &o, Op::T(o.clone()), Op::N, $code, 0.0)
            }
        }
    )*};
}

unary! {
    diopiRelu, diopiReluInp => 7;
    diopiNeg, diopiNegInp => 9;
    diopiSilu, diopiSiluInp => 10;
    diopiSqrt, diopiSqrtInp => 12;
    diopiRsqrt, diopiRsqrtInp => 13;
    diopiExp, diopiExpInp => 14;
    diopiLog, diopiLogInp => 15;
    diopiTanh, diopiTanhInp => 17;
    diopiSigmoid, diopiSigmoidInp => 18;
    diopiAbs, diopiAbsInp => 30;
    diopiReciprocal, diopiReciprocalInp => 36;
    diopiErf, diopiErfInp => 39;
}

/// Backward of a float unary op: `$f(grad_input, grad_output, x)`.
macro_rules! backward {
    ($($f:ident, $x:literal => $code:expr;)*) => {$(
        entry! {
            fn $f[ctx, q](grad_input: TensorHandle, grad_output: ConstTensorHandle, x: ConstTensorHandle) {
                let o = tm(grad_input, "grad_input")?;
                fbin(q, &o, Op::T(tc(grad_output, "grad_output")?), Op::T(tc(x, $x)?), $code, 0.0)
            }
        }
    )*};
}

backward! {
    diopiSiluBackward, "input" => 11;
    diopiTanhBackward, "output" => 33;
    diopiSigmoidBackward, "output" => 34;
}

entry! {
    fn diopiSign[ctx, q](out: TensorHandle, input: ConstTensorHandle) {
        let o = tm(out, "out")?;
        bin(q, &o, Op::T(tc(input, "input")?), Op::N, 40, 0.0)
    }
    fn diopiThresholdBackward[ctx, q](grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, threshold: *const DiopiScalar) {
        let o = tm(grad_input, "grad_input")?;
        let th = sv(threshold, "threshold")?;
        fbin(q, &o, Op::T(tc(grad_output, "grad_output")?), Op::T(tc(input, "input")?), 8, th)
    }
    fn diopiPow[ctx, q](out: TensorHandle, input: ConstTensorHandle, exponent: *const DiopiScalar) {
        let o = tm(out, "out")?;
        fbin(q, &o, Op::T(tc(input, "input")?), Op::S(sv(exponent, "exponent")?), 16, 0.0)
    }
    fn diopiPowInp[ctx, q](input: TensorHandle, exponent: *const DiopiScalar) {
        let o = tm(input, "input")?;
        fbin(q, &o, Op::T(o.clone()), Op::S(sv(exponent, "exponent")?), 16, 0.0)
    }
    fn diopiPowTensor[ctx, q](out: TensorHandle, input: ConstTensorHandle, exponent: ConstTensorHandle) {
        let o = tm(out, "out")?;
        fbin(q, &o, Op::T(tc(input, "input")?), Op::T(tc(exponent, "exponent")?), 16, 0.0)
    }
    fn diopiPowInpTensor[ctx, q](input: TensorHandle, exponent: ConstTensorHandle) {
        let o = tm(input, "input")?;
        fbin(q, &o, Op::T(o.clone()), Op::T(tc(exponent, "exponent")?), 16, 0.0)
    }
    fn diopiPowScalar[ctx, q](out: TensorHandle, input: *const DiopiScalar, exponent: ConstTensorHandle) {
        let o = tm(out, "out")?;
        fbin(q, &o, Op::S(sv(input, "input")?), Op::T(tc(exponent, "exponent")?), 16, 0.0)
    }
    fn diopiMaximum[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) {
        let o = tm(out, "out")?;
        bin(q, &o, Op::T(tc(input, "input")?), Op::T(tc(other, "other")?), 19, 0.0)
    }
    fn diopiMinimum[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) {
        let o = tm(out, "out")?;
        bin(q, &o, Op::T(tc(input, "input")?), Op::T(tc(other, "other")?), 20, 0.0)
    }
    fn diopiAddcmul[ctx, q](out: TensorHandle, input: ConstTensorHandle, tensor1: ConstTensorHandle, tensor2: ConstTensorHandle, value: *const DiopiScalar) {
        let o = tm(out, "out")?;
        let ops = [Op::T(tc(input, "input")?), Op::T(tc(tensor1, "tensor1")?), Op::T(tc(tensor2, "tensor2")?)];
        ew(q, 21, &o, [&ops[0], &ops[1], &ops[2]], sv(value, "value")?, 0.0)
    }
    fn diopiAddcmulInp[ctx, q](input: TensorHandle, tensor1: ConstTensorHandle, tensor2: ConstTensorHandle, value: *const DiopiScalar) {
        let o = tm(input, "input")?;
        let ops = [Op::T(o.clone()), Op::T(tc(tensor1, "tensor1")?), Op::T(tc(tensor2, "tensor2")?)];
        ew(q, 21, &o, [&ops[0], &ops[1], &ops[2]], sv(value, "value")?, 0.0)
    }
    fn diopiAddcdiv[ctx, q](out: TensorHandle, input: ConstTensorHandle, tensor1: ConstTensorHandle, tensor2: ConstTensorHandle, value: *const DiopiScalar) {
        let o = tm(out, "out")?;
        let ops = [Op::T(tc(input, "input")?), Op::T(tc(tensor1, "tensor1")?), Op::T(tc(tensor2, "tensor2")?)];
        ew(q, 22, &o, [&ops[0], &ops[1], &ops[2]], sv(value, "value")?, 0.0)
    }
    fn diopiAddcdivInp[ctx, q](input: TensorHandle, tensor1: ConstTensorHandle, tensor2: ConstTensorHandle, value: *const DiopiScalar) {
        let o = tm(input, "input")?;
        let ops = [Op::T(o.clone()), Op::T(tc(tensor1, "tensor1")?), Op::T(tc(tensor2, "tensor2")?)];
        ew(q, 22, &o, [&ops[0], &ops[1], &ops[2]], sv(value, "value")?, 0.0)
    }
    fn diopiFill[ctx, q](input: TensorHandle, value: *const DiopiScalar) {
        let o = tm(input, "input")?;
        bin(q, &o, Op::N, Op::N, 23, sv(value, "value")?)
    }
    fn diopiZeroInp[ctx, q](input: TensorHandle) {
        let o = tm(input, "self")?;
        bin(q, &o, Op::N, Op::N, 23, 0.0)
    }
    fn diopiCopyInp[ctx, q](src: ConstTensorHandle, dest: TensorHandle) {
        let o = tm(dest, "dest")?;
        bin(q, &o, Op::T(tc(src, "src")?), Op::N, 0, 0.0)
    }
    fn diopiCastDtype[ctx, q](out: TensorHandle, input: ConstTensorHandle) {
        let o = tm(out, "out")?;
        let i = tc(input, "input")?;
        super::check_shape(&i, &o.shape, "input")?;
        bin(q, &o, Op::T(i), Op::N, 0, 0.0)
    }
    fn diopiClampScalar[ctx, q](out: TensorHandle, input: ConstTensorHandle, min: *const DiopiScalar, max: *const DiopiScalar) {
        let o = tm(out, "out")?;
        clamp(q, &o, Op::T(tc(input, "input")?), min, max)
    }
    fn diopiClampInpScalar[ctx, q](input: TensorHandle, min: *const DiopiScalar, max: *const DiopiScalar) {
        let o = tm(input, "input")?;
        clamp(q, &o, Op::T(o.clone()), min, max)
    }
}

/// `clamp(x, min, max)`, either bound NULL for none (not both).
unsafe fn clamp(q: Q, o: &T, x: Op, min: *const DiopiScalar, max: *const DiopiScalar) -> R<()> {
    if min.is_null() && max.is_null() {
        return Err(err("min and max are both NULL"));
    }
    let bound = |s: *const DiopiScalar, name: &str, none: f64| {
        if s.is_null() {
            Ok(none)
        } else {
            // SAFETY: a non-NULL scalar of the framework.
            unsafe { sv(s, name) }
        }
    };
    let lo = bound(min, "min", f64::NEG_INFINITY)?;
    let hi = bound(max, "max", f64::INFINITY)?;
    ew(q, 37, o, [&x, &Op::N, &Op::N], lo, hi)
}
