//! Unary ops, activations and their backward, clamp and comparisons.

use super::{binary_shapes, op, rand, rand_int, sf, unary_shapes, Form, Op, FLOATS};
use crate::case::{Arg, Case, Scalar};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::elementwise::{self as r, map};
use crate::rng::Rng;
use crate::tensor::HostTensor;

type F1 = fn(f64) -> f64;
type F2 = fn(f64, f64) -> f64;

/// `out = f(x)`, `x` uniform in `[lo, hi)`.
fn unary(name: &'static str, f: F1, lo: f64, hi: f64) -> Op {
    op(name, sig!(T, C), move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for shape in unary_shapes(dt) {
                let mut c = Case::new("");
                let x = c.input(rand(rng, dt, &shape, lo, hi));
                let out = map(dt, &[&c.tensors[x]], |v| f(v[0]));
                let o = c.output(out);
                c.args.swap(0, 1); // (out, input)
                c.alias = Some((o, x));
                cases.push(c);
            }
        }
        cases
    })
}

/// `x = f(x)` in place.
fn unary_inp(name: &'static str, f: F1, lo: f64, hi: f64) -> Op {
    op(name, sig!(T), move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for shape in unary_shapes(dt) {
                let mut c = Case::new("");
                let x = rand(rng, dt, &shape, lo, hi);
                let out = map(dt, &[&x], |v| f(v[0]));
                c.inplace(x, out);
                cases.push(c);
            }
        }
        cases
    })
}

/// Activation backward from (grad_output, x or y): `f(go, x)`.
fn backward(name: &'static str, f: F2, lo: f64, hi: f64) -> Op {
    op(name, sig!(T, C, C), move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for shape in unary_shapes(dt) {
                let mut c = Case::new("");
                let go = rand(rng, dt, &shape, -1.0, 1.0);
                let x = rand(rng, dt, &shape, lo, hi);
                let o = c.output(map(dt, &[&go, &x], |v| f(v[0], v[1])));
                let ig = c.input(go);
                c.input(x);
                c.alias = Some((o, ig));
                cases.push(c);
            }
        }
        cases
    })
}

/// GeluBackward for both approximations.
fn gelu_backward() -> Op {
    op("diopiGeluBackward", sig!(T, C, C, P), |rng: &mut Rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for shape in unary_shapes(dt) {
                for approx in ["none", "tanh"] {
                    let mut c = Case::new(format!("approximate={approx}"));
                    let t = approx == "tanh";
                    let go = rand(rng, dt, &shape, -1.0, 1.0);
                    let x = rand(rng, dt, &shape, -3.0, 3.0);
                    let o = c.output(map(dt, &[&go, &x], |v| v[0] * r::gelu_grad(v[1], t)));
                    let ig = c.input(go);
                    c.input(x);
                    c.arg(Arg::Str(approx));
                    c.alias = Some((o, ig));
                    cases.push(c);
                }
            }
        }
        cases
    })
}

fn gelu() -> Op {
    op("diopiGelu", sig!(T, C, P), |rng: &mut Rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for shape in unary_shapes(dt) {
                for approx in ["none", "tanh"] {
                    let mut c = Case::new(format!("approximate={approx}"));
                    let x = rand(rng, dt, &shape, -3.0, 3.0);
                    let t = approx == "tanh";
                    let o = c.output(map(dt, &[&x], |v| r::gelu(v[0], t)));
                    let i = c.input(x);
                    c.arg(Arg::Str(approx));
                    c.alias = Some((o, i));
                    cases.push(c);
                }
            }
        }
        cases
    })
}

/// Comparison `f` of `form`: bool out (`Out`, `Scalar`), or written into
/// the input as 1/0 of its dtype (`Inp`, `InpScalar`); inputs drawn from a
/// few integers so ties occur.
fn compare(name: &'static str, form: Form, f: fn(f64, f64) -> bool) -> Op {
    let s = match form {
        Form::Out => sig!(T, C, C),
        Form::Scalar => sig!(T, C, S),
        Form::Inp => sig!(T, C),
        Form::InpScalar => sig!(T, S),
    };
    let inp = matches!(form, Form::Inp | Form::InpScalar);
    let scalar = matches!(form, Form::Scalar | Form::InpScalar);
    op(name, s, move |rng| {
        let mut cases = Vec::new();
        for dt in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I64] {
            let pairs = if dt == Dtype::F32 {
                binary_shapes(dt)
            } else {
                vec![(vec![3, 4], vec![3, 4])]
            };
            for (sa, sb) in pairs {
                // In place: `other` must broadcast to the input's shape.
                let sb = if inp && sb.len() > sa.len() {
                    sa.clone()
                } else {
                    sb
                };
                let mut c = Case::new("");
                let a = rand_int(rng, dt, &sa, -2, 3);
                let b = if scalar {
                    HostTensor::new(dt, &[], vec![rng.int(-2, 3) as f64])
                } else {
                    rand_int(rng, dt, &sb, -2, 3)
                };
                let out_dt = if inp { dt } else { Dtype::Bool };
                let e = map(out_dt, &[&a, &b], |v| f64::from(u8::from(f(v[0], v[1]))));
                if inp && e.shape != a.shape {
                    continue;
                }
                if inp {
                    c.inplace(a, e);
                } else {
                    c.output(e);
                    c.input(a);
                }
                if scalar {
                    let v = b.data[0];
                    c.arg(Arg::S(if dt == Dtype::I64 {
                        Scalar::Int(v as i64)
                    } else {
                        Scalar::Float(v)
                    }));
                } else {
                    c.input(b);
                }
                cases.push(c);
            }
        }
        cases
    })
}

fn clamp_ops() -> Vec<Op> {
    let bounds = [
        (Some(-0.5), Some(0.5)),
        (Some(0.0), None),
        (None, Some(0.25)),
    ];
    vec![
        op("diopiClampScalar", sig!(T, C, S, S), move |rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (lo, hi) in bounds {
                    let mut c = Case::new(format!("min={lo:?} max={hi:?}"));
                    let x = rand(rng, dt, &[3, 4], -1.0, 1.0);
                    let o = c.output(map(dt, &[&x], |v| r::clamp(v[0], lo, hi)));
                    let i = c.input(x);
                    c.arg(Arg::OptS(lo.map(Scalar::Float)));
                    c.arg(Arg::OptS(hi.map(Scalar::Float)));
                    c.alias = Some((o, i));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiClampInpScalar", sig!(T, S, S), move |rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (lo, hi) in bounds {
                    let mut c = Case::new(format!("min={lo:?} max={hi:?}"));
                    let x = rand(rng, dt, &[3, 4], -1.0, 1.0);
                    let e = map(dt, &[&x], |v| r::clamp(v[0], lo, hi));
                    c.inplace(x, e);
                    c.arg(Arg::OptS(lo.map(Scalar::Float)));
                    c.arg(Arg::OptS(hi.map(Scalar::Float)));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiClamp", sig!(T, C, C, C), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (has_lo, has_hi) in [(true, true), (true, false), (false, true)] {
                    let mut c = Case::new(format!(
                        "min={} max={}",
                        if has_lo { "tensor" } else { "NULL" },
                        if has_hi { "tensor" } else { "NULL" }
                    ));
                    let x = rand(rng, dt, &[3, 4], -1.0, 1.0);
                    let lo = rand(rng, dt, &[3, 4], -0.8, 0.0);
                    let hi = rand(rng, dt, &[4], 0.0, 0.8);
                    let e = map(dt, &[&x, &lo, &hi], |v| {
                        r::clamp(v[0], has_lo.then_some(v[1]), has_hi.then_some(v[2]))
                    });
                    let o = c.output(e);
                    let i = c.input(x);
                    if has_lo {
                        c.input(lo);
                    } else {
                        c.arg(Arg::Null);
                    }
                    if has_hi {
                        c.input(hi);
                    } else {
                        c.arg(Arg::Null);
                    }
                    c.alias = Some((o, i));
                    cases.push(c);
                }
            }
            cases
        }),
    ]
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = Vec::new();
    v.extend([
        unary("diopiSqrt", f64::sqrt, 0.0, 4.0),
        unary("diopiRsqrt", |x| 1.0 / x.sqrt(), 0.25, 4.0),
        unary("diopiExp", f64::exp, -3.0, 3.0),
        unary("diopiLog", f64::ln, 0.1, 4.0),
        unary("diopiNeg", |x| -x, -2.0, 2.0),
        unary("diopiAbs", f64::abs, -2.0, 2.0),
        unary("diopiSign", r::sign, -2.0, 2.0),
        unary("diopiReciprocal", |x| 1.0 / x, 0.25, 4.0),
        unary("diopiErf", r::erf, -2.5, 2.5),
        unary("diopiSigmoid", r::sigmoid, -4.0, 4.0),
        unary("diopiTanh", f64::tanh, -3.0, 3.0),
        unary("diopiSilu", r::silu, -4.0, 4.0),
        unary("diopiRelu", |x| x.max(0.0), -2.0, 2.0),
        unary_inp("diopiReluInp", |x| x.max(0.0), -2.0, 2.0),
    ]);
    v.push(gelu());
    v.push(op(
        "diopiThresholdBackward",
        sig!(T, C, C, S),
        |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for shape in unary_shapes(dt) {
                    let th = if dt == Dtype::F32 { 0.25 } else { 0.0 };
                    let mut c = Case::new(format!("threshold={th}"));
                    let go = rand(rng, dt, &shape, -1.0, 1.0);
                    let x = rand(rng, dt, &shape, -1.0, 1.0);
                    c.output(map(dt, &[&go, &x], |v| if v[1] <= th { 0.0 } else { v[0] }));
                    c.input(go);
                    c.input(x);
                    c.arg(sf(th));
                    cases.push(c);
                }
            }
            cases
        },
    ));
    v.push(gelu_backward());
    v.push(backward(
        "diopiSiluBackward",
        |g, x| g * r::silu_grad(x),
        -3.0,
        3.0,
    ));
    v.push(backward(
        "diopiSigmoidBackward",
        |g, y| g * y * (1.0 - y),
        0.0,
        1.0,
    ));
    v.push(backward(
        "diopiTanhBackward",
        |g, y| g * (1.0 - y * y),
        -1.0,
        1.0,
    ));
    v.extend(clamp_ops());
    for (n, s, f) in [
        (
            "diopiEq",
            "diopiEqScalar",
            (|a, b| a == b) as fn(f64, f64) -> bool,
        ),
        ("diopiNe", "diopiNeScalar", |a, b| a != b),
        ("diopiLt", "diopiLtScalar", |a, b| a < b),
        ("diopiLe", "diopiLeScalar", |a, b| a <= b),
        ("diopiGt", "diopiGtScalar", |a, b| a > b),
        ("diopiGe", "diopiGeScalar", |a, b| a >= b),
    ] {
        v.push(compare(n, Form::Out, f));
        v.push(compare(s, Form::Scalar, f));
    }
    v
}

/// Ops of include/diopi/functions.h beyond the contract's list: the in-place
/// forms of the unary ops, ClampInp and the in-place comparisons.
pub(crate) fn extra_ops() -> Vec<Op> {
    let mut v = vec![
        unary_inp("diopiSqrtInp", f64::sqrt, 0.0, 4.0),
        unary_inp("diopiRsqrtInp", |x| 1.0 / x.sqrt(), 0.25, 4.0),
        unary_inp("diopiExpInp", f64::exp, -3.0, 3.0),
        unary_inp("diopiLogInp", f64::ln, 0.1, 4.0),
        unary_inp("diopiNegInp", |x| -x, -2.0, 2.0),
        unary_inp("diopiAbsInp", f64::abs, -2.0, 2.0),
        unary_inp("diopiReciprocalInp", |x| 1.0 / x, 0.25, 4.0),
        unary_inp("diopiErfInp", r::erf, -2.5, 2.5),
        unary_inp("diopiSigmoidInp", r::sigmoid, -4.0, 4.0),
        unary_inp("diopiTanhInp", f64::tanh, -3.0, 3.0),
        unary_inp("diopiSiluInp", r::silu, -4.0, 4.0),
    ];
    v.push(clamp_inp());
    for (n, s, f) in [
        (
            "diopiEqInp",
            "diopiEqInpScalar",
            (|a, b| a == b) as fn(f64, f64) -> bool,
        ),
        ("diopiNeInp", "diopiNeInpScalar", |a, b| a != b),
        ("diopiLtInp", "diopiLtInpScalar", |a, b| a < b),
        ("diopiLeInp", "diopiLeInpScalar", |a, b| a <= b),
        ("diopiGtInp", "diopiGtInpScalar", |a, b| a > b),
        ("diopiGeInp", "diopiGeInpScalar", |a, b| a >= b),
    ] {
        v.push(compare(n, Form::Inp, f));
        v.push(compare(s, Form::InpScalar, f));
    }
    v
}

/// ClampInp: tensor bounds, either may be NULL.
fn clamp_inp() -> Op {
    op("diopiClampInp", sig!(T, C, C), |rng: &mut Rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for (has_lo, has_hi) in [(true, true), (true, false), (false, true)] {
                let mut c = Case::new(format!("min={has_lo} max={has_hi}"));
                let x = rand(rng, dt, &[3, 4], -1.0, 1.0);
                let lo = rand(rng, dt, &[3, 4], -0.8, 0.0);
                let hi = rand(rng, dt, &[4], 0.0, 0.8);
                let e = map(dt, &[&x, &lo, &hi], |v| {
                    r::clamp(v[0], has_lo.then_some(v[1]), has_hi.then_some(v[2]))
                });
                c.inplace(x, e);
                c.opt_input(has_lo.then_some(lo));
                c.opt_input(has_hi.then_some(hi));
                cases.push(c);
            }
        }
        cases
    })
}
