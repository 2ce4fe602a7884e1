//! Convolution and normalisation (float32).

use super::{op, rand, Op};
use crate::case::{Arg, Case};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::nn::{self as r, ConvParams};
use crate::refs::norm;
use crate::rng::Rng;
use crate::tensor::HostTensor;

const F: Dtype = Dtype::F32;

/// A `diopiSize_t` of two values.
pub(super) fn z2(v: [usize; 2]) -> Arg {
    Arg::Z(v.iter().map(|&x| x as i64).collect())
}

/// (input, weight, params, bias) of the convolution cases.
fn conv_cases() -> Vec<(Vec<i64>, Vec<i64>, ConvParams, bool)> {
    vec![
        (
            vec![2, 3, 6, 6],
            vec![4, 3, 3, 3],
            ConvParams {
                stride: [1, 1],
                padding: [1, 1],
                dilation: [1, 1],
                groups: 1,
            },
            true,
        ),
        (
            vec![1, 4, 7, 5],
            vec![6, 2, 3, 2],
            ConvParams {
                stride: [2, 1],
                padding: [0, 1],
                dilation: [2, 1],
                groups: 2,
            },
            false,
        ),
    ]
}

fn conv_label(p: &ConvParams, bias: bool) -> String {
    format!(
        "stride={:?} padding={:?} dilation={:?} groups={} bias={bias}",
        p.stride, p.padding, p.dilation, p.groups
    )
}

fn conv_params_args(c: &mut Case, p: &ConvParams) {
    c.arg(z2(p.stride));
    c.arg(z2(p.padding));
    c.arg(z2(p.dilation));
    c.arg(Arg::I(p.groups as i64));
}

fn conv_ops() -> Vec<Op> {
    vec![
        op(
            "diopiConvolution2d",
            sig!(T, C, C, C, Z, Z, Z, I),
            |rng: &mut Rng| {
                conv_cases()
                    .into_iter()
                    .map(|(xs, ws, p, bias)| {
                        let mut c = Case::new(conv_label(&p, bias));
                        let x = rand(rng, F, &xs, -1.0, 1.0);
                        let w = rand(rng, F, &ws, -1.0, 1.0);
                        let b = bias.then(|| rand(rng, F, &[ws[0]], -1.0, 1.0));
                        c.output(r::conv2d(&x, &w, b.as_ref(), &p));
                        c.input(x);
                        c.input(w);
                        c.opt_input(b);
                        conv_params_args(&mut c, &p);
                        c
                    })
                    .collect()
            },
        ),
        op(
            "diopiConvolution2dBackward",
            sig!(T, T, T, C, C, C, P, Z, Z, Z, I),
            |rng: &mut Rng| {
                conv_cases()
                    .into_iter()
                    .map(|(xs, ws, p, bias)| {
                        let mut c = Case::new(conv_label(&p, bias));
                        let x = rand(rng, F, &xs, -1.0, 1.0);
                        let w = rand(rng, F, &ws, -1.0, 1.0);
                        let out_shape = r::conv2d(&x, &w, None, &p).shape;
                        let go = rand(rng, F, &out_shape, -1.0, 1.0);
                        let (gi, gw, gb) = r::conv2d_backward(&go, &x, &w, &p);
                        c.output(gi);
                        c.output(gw);
                        if bias {
                            c.output(gb);
                        } else {
                            c.arg(Arg::Null);
                        }
                        c.input(go);
                        c.input(x);
                        c.input(w);
                        c.arg(Arg::ZPtr(bias.then(|| vec![ws[0]])));
                        conv_params_args(&mut c, &p);
                        c
                    })
                    .collect()
            },
        ),
    ]
}

/// Adds a mutable tensor whose result is not checked.
fn scratch(c: &mut Case, t: HostTensor) {
    let i = c.tensor(t);
    c.args.push(Arg::T(i));
}

fn norm_ops() -> Vec<Op> {
    let (momentum, eps) = (0.1, 1e-5);
    vec![
        op(
            "diopiBatchNorm",
            sig!(T, T, T, C, C, C, T, T, B, D, D),
            move |rng| {
                let mut cases = Vec::new();
                for (shape, affine) in [
                    (vec![4, 3, 2, 2], true),
                    (vec![5, 3], true),
                    (vec![4, 3, 3], false),
                ] {
                    for training in [true, false] {
                        let mut c = Case::new(format!(
                            "training={training} momentum={momentum} eps={eps} affine={affine}"
                        ));
                        let x = rand(rng, F, &shape, -2.0, 2.0);
                        let w = rand(rng, F, &[3], 0.5, 1.5);
                        let b = rand(rng, F, &[3], -0.5, 0.5);
                        let rm = rand(rng, F, &[3], -0.2, 0.2);
                        let rv = rand(rng, F, &[3], 0.5, 1.5);
                        let (w, b) = (affine.then_some(w), affine.then_some(b));
                        let res = norm::batch_norm(
                            &x,
                            w.as_ref(),
                            b.as_ref(),
                            &rm,
                            &rv,
                            training,
                            momentum,
                            eps,
                        );
                        c.output(res.out);
                        if training {
                            c.output(res.save_mean);
                            c.output(res.save_invstd);
                        } else {
                            scratch(&mut c, HostTensor::full(F, &[3], 0.0));
                            scratch(&mut c, HostTensor::full(F, &[3], 0.0));
                        }
                        c.input(x);
                        c.opt_input(w);
                        c.opt_input(b);
                        c.inplace(rm, res.running_mean);
                        c.inplace(rv, res.running_var);
                        c.arg(Arg::B(training));
                        c.arg(Arg::D(momentum));
                        c.arg(Arg::D(eps));
                        cases.push(c);
                    }
                }
                cases
            },
        ),
        op(
            "diopiBatchNormBackward",
            sig!(T, T, T, C, C, C, C, C, C, C, B, D),
            move |rng| {
                let mut cases = Vec::new();
                for training in [true, false] {
                    let shape = [4, 3, 2, 2];
                    let mut c = Case::new(format!("training={training} eps={eps}"));
                    let x = rand(rng, F, &shape, -2.0, 2.0);
                    let w = rand(rng, F, &[3], 0.5, 1.5);
                    let rm = rand(rng, F, &[3], -0.2, 0.2);
                    let rv = rand(rng, F, &[3], 0.5, 1.5);
                    let go = rand(rng, F, &shape, -1.0, 1.0);
                    let fwd = norm::batch_norm(&x, Some(&w), None, &rm, &rv, true, momentum, eps);
                    let (gi, gw, gb) =
                        norm::batch_norm_backward(&go, &x, &w, &rm, &rv, training, eps);
                    c.output(gi);
                    c.output(gw);
                    c.output(gb);
                    for t in [go, x, w, rm, rv, fwd.save_mean, fwd.save_invstd] {
                        c.input(t);
                    }
                    c.arg(Arg::B(training));
                    c.arg(Arg::D(eps));
                    cases.push(c);
                }
                cases
            },
        ),
        op("diopiLayerNorm", sig!(T, T, T, C, C, C, Z, D), move |rng| {
            [(vec![4], true), (vec![3, 4], true), (vec![4], false)]
                .into_iter()
                .map(|(ns, affine)| {
                    let mut c =
                        Case::new(format!("normalized_shape={ns:?} eps={eps} affine={affine}"));
                    let x = rand(rng, F, &[2, 3, 4], -2.0, 2.0);
                    let w = affine.then(|| rand(rng, F, &ns, 0.5, 1.5));
                    let b = affine.then(|| rand(rng, F, &ns, -0.5, 0.5));
                    let (y, m, s) = norm::layer_norm(&x, w.as_ref(), b.as_ref(), ns.len(), eps);
                    c.output(y);
                    c.output(m);
                    c.output(s);
                    c.input(x);
                    c.opt_input(w);
                    c.opt_input(b);
                    c.arg(Arg::Z(ns));
                    c.arg(Arg::D(eps));
                    c
                })
                .collect()
        }),
        op(
            "diopiLayerNormBackward",
            sig!(T, T, T, C, C, C, C, C, C, Z),
            move |rng| {
                [vec![4], vec![3, 4]]
                    .into_iter()
                    .map(|ns| {
                        let mut c = Case::new(format!("normalized_shape={ns:?}"));
                        let x = rand(rng, F, &[2, 3, 4], -2.0, 2.0);
                        let w = rand(rng, F, &ns, 0.5, 1.5);
                        let b = rand(rng, F, &ns, -0.5, 0.5);
                        let go = rand(rng, F, &[2, 3, 4], -1.0, 1.0);
                        let (_, m, s) = norm::layer_norm(&x, Some(&w), Some(&b), ns.len(), eps);
                        let (gi, gw, gb) = norm::layer_norm_backward(&go, &x, &w, ns.len(), eps);
                        c.output(gi);
                        c.output(gw);
                        c.output(gb);
                        for t in [go, x, w, b, m, s] {
                            c.input(t);
                        }
                        c.arg(Arg::Z(ns));
                        c
                    })
                    .collect()
            },
        ),
    ]
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = conv_ops();
    v.extend(norm_ops());
    v
}
