//! Fill/copy/cast and arithmetic: Add/Sub/Mul/Div in their four forms,
//! Pow, Maximum/Minimum, Addcmul/Addcdiv.

use super::{binary_shapes, op, rand, sf, unary_shapes, Form, Op, FLOATS};
use crate::case::{Arg, Case, Scalar};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::elementwise::{self as r, map};
use crate::rng::Rng;
use crate::tensor::HostTensor;

type F2 = fn(f64, f64) -> f64;

/// A binary arithmetic op of `form`; `alpha` appends a scalar alpha (Add,
/// Sub), `mode` a round mode (Div).
fn binary(
    name: &'static str,
    form: Form,
    f: F2,
    alpha: bool,
    mode: Option<i32>,
    lo: f64,
    hi: f64,
) -> Op {
    let s = match (form, alpha, mode.is_some()) {
        (Form::Out, true, _) => sig!(T, C, C, S),
        (Form::Out, false, false) => sig!(T, C, C),
        (Form::Out, false, true) => sig!(T, C, C, E),
        (Form::Inp, true, _) => sig!(T, C, S),
        (Form::Inp, false, false) => sig!(T, C),
        (Form::Inp, false, true) => sig!(T, C, E),
        (Form::Scalar, true, _) => sig!(T, C, S, S),
        (Form::Scalar, false, false) => sig!(T, C, S),
        (Form::Scalar, false, true) => sig!(T, C, S, E),
        (Form::InpScalar, true, _) => sig!(T, S, S),
        (Form::InpScalar, false, false) => sig!(T, S),
        (Form::InpScalar, false, true) => sig!(T, S, E),
    };
    op(name, s, move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            // Trunc/floor of a half-precision quotient flips at integers:
            // round modes run in float32 only.
            let modes: Vec<Option<i32>> = match mode {
                Some(_) if dt == Dtype::F32 => vec![Some(0), Some(1), Some(2)],
                Some(_) => vec![Some(0)],
                None => vec![None],
            };
            for (sa, sb) in binary_shapes(dt) {
                for &m in &modes {
                    let al = if alpha { rng.uniform(0.5, 2.0) } else { 1.0 };
                    let g = move |a: f64, b: f64| match m {
                        Some(m) => r::div(a, b, m),
                        None => f(a, b * al),
                    };
                    let a = rand(rng, dt, &sa, lo, hi);
                    let label = match m {
                        Some(m) => format!("round_mode={m}"),
                        None if alpha => format!("alpha={al:.3}"),
                        None => String::new(),
                    };
                    let mut c = Case::new(label);
                    match form {
                        Form::Out | Form::Inp => {
                            // In place needs b to broadcast to a's shape.
                            let sb = if matches!(form, Form::Inp) && sb.len() > sa.len() {
                                sa.clone()
                            } else {
                                sb.clone()
                            };
                            let b = rand(rng, dt, &sb, lo, hi);
                            let expect = map(dt, &[&a, &b], |v| g(v[0], v[1]));
                            if matches!(form, Form::Out) {
                                let o = c.output(expect.clone());
                                let ia = c.input(a);
                                let ib = c.input(b);
                                if expect.shape == c.tensors[ia].shape {
                                    c.alias = Some((o, ia));
                                }
                                if expect.shape == c.tensors[ib].shape {
                                    c.alias_other = Some((o, ib));
                                }
                            } else {
                                if expect.shape != a.shape {
                                    continue;
                                }
                                c.inplace(a, expect);
                                c.input(b);
                            }
                        }
                        Form::Scalar | Form::InpScalar => {
                            let b = rng.uniform(lo, hi);
                            let expect = map(dt, &[&a], |v| g(v[0], b));
                            if matches!(form, Form::Scalar) {
                                let o = c.output(expect);
                                let ia = c.input(a);
                                c.alias = Some((o, ia));
                            } else {
                                c.inplace(a, expect);
                            }
                            c.arg(sf(b));
                        }
                    }
                    if alpha {
                        c.arg(sf(al));
                    }
                    if let Some(m) = m {
                        c.arg(Arg::E(m));
                    }
                    cases.push(c);
                }
            }
        }
        cases
    })
}

/// The four forms of an op, named `base`, `baseInp`, `baseScalar`, `baseInpScalar`.
fn four(
    names: [&'static str; 4],
    f: F2,
    alpha: bool,
    mode: Option<i32>,
    lo: f64,
    hi: f64,
) -> Vec<Op> {
    vec![
        binary(names[0], Form::Out, f, alpha, mode, lo, hi),
        binary(names[1], Form::Inp, f, alpha, mode, lo, hi),
        binary(names[2], Form::Scalar, f, alpha, mode, lo, hi),
        binary(names[3], Form::InpScalar, f, alpha, mode, lo, hi),
    ]
}

fn fill_copy_cast() -> Vec<Op> {
    vec![
        op("diopiFill", sig!(T, S), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I64] {
                for shape in unary_shapes(if dt == Dtype::F32 { dt } else { Dtype::F16 }) {
                    let mut c = Case::new("value=1.25");
                    let x = rand(rng, dt, &shape, -1.0, 1.0);
                    let v = if dt == Dtype::I64 { 7.0 } else { 1.25 };
                    c.inplace(x, HostTensor::full(dt, &shape, v));
                    c.arg(if dt == Dtype::I64 {
                        Arg::S(Scalar::Int(7))
                    } else {
                        sf(v)
                    });
                    c.label = format!("value={v}");
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiZeroInp", sig!(T), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I64] {
                for shape in unary_shapes(if dt == Dtype::F32 { dt } else { Dtype::F16 }) {
                    let mut c = Case::new("");
                    let x = rand(rng, dt, &shape, 1.0, 5.0);
                    c.inplace(x, HostTensor::full(dt, &shape, 0.0));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiCopyInp", sig!(C, T), |rng: &mut Rng| {
            cast_cases(rng, true)
        }),
        op("diopiCastDtype", sig!(T, C), |rng: &mut Rng| {
            cast_cases(rng, false)
        }),
    ]
}

/// Cases of CopyInp (`src, dest`) and CastDtype (`out, input`).
fn cast_cases(rng: &mut Rng, copy: bool) -> Vec<Case> {
    let pairs = [
        (Dtype::F32, Dtype::F32),
        (Dtype::F32, Dtype::F16),
        (Dtype::F16, Dtype::F32),
        (Dtype::F32, Dtype::Bf16),
        (Dtype::F32, Dtype::I64),
        (Dtype::I64, Dtype::F32),
        (Dtype::I32, Dtype::I64),
        (Dtype::F32, Dtype::Bool),
        (Dtype::Bool, Dtype::F32),
    ];
    let mut cases = Vec::new();
    for (from, to) in pairs {
        for shape in [vec![3, 4], vec![], vec![0, 2]] {
            let mut c = Case::new(format!("to {}", to.name()));
            let src = if from == Dtype::Bool {
                super::rand_int(rng, from, &shape, 0, 2)
            } else {
                let mut s = rand(rng, from, &shape, -4.0, 4.0);
                if to == Dtype::Bool {
                    // Some exact zeros, so both truth values occur.
                    for v in s.data.iter_mut().step_by(3) {
                        *v = 0.0;
                    }
                }
                s
            };
            let expect = src.to(to);
            if copy {
                c.input(src);
                c.output(expect);
            } else {
                c.output(expect);
                c.input(src);
            }
            cases.push(c);
        }
    }
    if copy {
        // DIPU expands the source before CopyInp: a stride-0 first dimension.
        let mut c = Case::new("source expanded (stride 0)");
        let row = rand(rng, Dtype::F32, &[1, 4], -4.0, 4.0);
        let src = HostTensor::new(Dtype::F32, &[3, 4], row.data.repeat(3));
        let expect = src.to(Dtype::F16);
        let i = c.input(src);
        c.output(expect);
        c.expanded = Some(i);
        cases.push(c);
    }
    cases
}

/// Pow with a scalar exponent, out of place or in place.
fn pow_scalar(inp: bool) -> Op {
    let s = if inp { sig!(T, S) } else { sig!(T, C, S) };
    op(
        if inp { "diopiPowInp" } else { "diopiPow" },
        s,
        move |rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for shape in unary_shapes(dt) {
                    for e in [2.0, 0.5, -1.5] {
                        let mut c = Case::new(format!("exponent={e}"));
                        let x = rand(rng, dt, &shape, 0.5, 2.0);
                        let out = map(dt, &[&x], |v| v[0].powf(e));
                        if inp {
                            c.inplace(x, out);
                        } else {
                            let o = c.output(out);
                            let i = c.input(x);
                            c.alias = Some((o, i));
                        }
                        c.arg(sf(e));
                        cases.push(c);
                    }
                }
            }
            cases
        },
    )
}

/// Addcmul / Addcdiv: `input + value * f(t1, t2)`.
fn addc(name: &'static str, inp: bool, f: fn(f64, f64, f64) -> f64) -> Op {
    let s = if inp {
        sig!(T, C, C, S)
    } else {
        sig!(T, C, C, C, S)
    };
    op(name, s, move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for (sa, sb) in binary_shapes(dt) {
                let val = 0.5;
                let mut c = Case::new(format!("value={val}"));
                let a = rand(rng, dt, &sa, -2.0, 2.0);
                let t1 = rand(rng, dt, &sb, -2.0, 2.0);
                let t2 = rand(rng, dt, &sa, 0.5, 2.0);
                let e = map(dt, &[&a, &t1, &t2], |v| f(v[0], val * v[1], v[2]));
                let same = e.shape == a.shape;
                if inp {
                    if !same {
                        continue;
                    }
                    c.inplace(a, e);
                    c.input(t1);
                    c.input(t2);
                    c.arg(sf(val));
                    cases.push(c);
                    continue;
                }
                let o = c.output(e);
                let ia = c.input(a);
                c.input(t1);
                c.input(t2);
                c.arg(sf(val));
                if same {
                    c.alias = Some((o, ia));
                }
                cases.push(c);
            }
        }
        cases
    })
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = fill_copy_cast();
    v.extend(four(
        [
            "diopiAdd",
            "diopiAddInp",
            "diopiAddScalar",
            "diopiAddInpScalar",
        ],
        |a, b| a + b,
        true,
        None,
        -2.0,
        2.0,
    ));
    v.extend(four(
        [
            "diopiSub",
            "diopiSubInp",
            "diopiSubScalar",
            "diopiSubInpScalar",
        ],
        |a, b| a - b,
        true,
        None,
        -2.0,
        2.0,
    ));
    v.extend(four(
        [
            "diopiMul",
            "diopiMulInp",
            "diopiMulScalar",
            "diopiMulInpScalar",
        ],
        |a, b| a * b,
        false,
        None,
        -2.0,
        2.0,
    ));
    v.extend(four(
        [
            "diopiDiv",
            "diopiDivInp",
            "diopiDivScalar",
            "diopiDivInpScalar",
        ],
        |a, b| a / b,
        false,
        Some(0),
        0.5,
        3.0,
    ));
    v.push(pow_scalar(false));
    v.push(pow_scalar(true));
    v.push(binary(
        "diopiPowTensor",
        Form::Out,
        f64::powf,
        false,
        None,
        0.5,
        2.0,
    ));
    v.push(binary(
        "diopiMaximum",
        Form::Out,
        r::maximum,
        false,
        None,
        -2.0,
        2.0,
    ));
    v.push(binary(
        "diopiMinimum",
        Form::Out,
        r::minimum,
        false,
        None,
        -2.0,
        2.0,
    ));
    v.push(addc("diopiAddcmul", false, |a, b, c| a + b * c));
    v.push(addc("diopiAddcdiv", false, |a, b, c| a + b / c));
    v
}

/// A tensor of `shape` filled with `v` (Zeros, Ones).
fn filled(name: &'static str, v: f64) -> Op {
    op(name, sig!(T, Z), move |_rng: &mut Rng| {
        let mut cases = Vec::new();
        for dt in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::I64] {
            for shape in unary_shapes(if dt == Dtype::F32 { dt } else { Dtype::F16 }) {
                let mut c = Case::new(format!("size={shape:?}"));
                c.output(HostTensor::full(dt, &shape, v));
                c.arg(Arg::Z(shape));
                cases.push(c);
            }
        }
        cases
    })
}

/// Ops of include/diopi/functions.h beyond the contract's list: the other
/// in-place and scalar forms, Zeros/Ones, Arange, Expand.
pub(crate) fn extra_ops() -> Vec<Op> {
    vec![
        addc("diopiAddcmulInp", true, |a, b, c| a + b * c),
        addc("diopiAddcdivInp", true, |a, b, c| a + b / c),
        binary(
            "diopiPowInpTensor",
            Form::Inp,
            f64::powf,
            false,
            None,
            0.5,
            2.0,
        ),
        op("diopiPowScalar", sig!(T, S, C), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for shape in unary_shapes(dt) {
                    let base = 1.5;
                    let mut c = Case::new(format!("input={base}"));
                    let e = rand(rng, dt, &shape, -2.0, 2.0);
                    c.output(map(dt, &[&e], |v| f64::powf(base, v[0])));
                    c.arg(sf(base));
                    c.input(e);
                    cases.push(c);
                }
            }
            cases
        }),
        filled("diopiZeros", 0.0),
        filled("diopiOnes", 1.0),
        op("diopiArange", sig!(T, S, S, S), |_rng: &mut Rng| {
            let mut cases = Vec::new();
            for (dt, start, end, step) in [
                (Dtype::F32, 0.0f64, 5.0, 1.0),
                (Dtype::F32, 1.0, -1.0, -0.25),
                (Dtype::I64, 2.0, 11.0, 3.0),
                (Dtype::F16, -1.0, 1.0, 0.5),
            ] {
                let mut c = Case::new(format!("start={start} end={end} step={step}"));
                let n = ((end - start) / step).ceil() as usize;
                let data = (0..n).map(|i| start + i as f64 * step).collect();
                c.output(HostTensor::new(dt, &[n as i64], data));
                let s = |v: f64| {
                    if dt == Dtype::I64 {
                        Arg::S(Scalar::Int(v as i64))
                    } else {
                        sf(v)
                    }
                };
                c.arg(s(start)).arg(s(end)).arg(s(step));
                cases.push(c);
            }
            cases
        }),
        op("diopiExpand", sig!(T, C), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (from, to) in [
                    (vec![3, 1], vec![3, 4]),
                    (vec![4], vec![2, 3, 4]),
                    (vec![], vec![2, 2]),
                ] {
                    let mut c = Case::new(format!("to {to:?}"));
                    let x = rand(rng, dt, &from, -1.0, 1.0);
                    let zero = HostTensor::full(dt, &to, 0.0);
                    c.output(map(dt, &[&x, &zero], |v| v[0]));
                    c.input(x);
                    cases.push(c);
                }
            }
            cases
        }),
    ]
}
