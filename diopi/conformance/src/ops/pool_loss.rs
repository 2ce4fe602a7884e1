//! Pooling and losses (float32).

use super::conv_norm::z2;
use super::{distinct, op, rand, rand_int, Op};
use crate::case::{Arg, Case};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::loss::{self, LossOpts};
use crate::refs::nn as r_nn;
use crate::refs::pool::{self as r, AvgOpts, PoolParams};
use crate::rng::Rng;

const F: Dtype = Dtype::F32;

fn pool(
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
) -> PoolParams {
    PoolParams {
        kernel,
        stride,
        padding,
        dilation,
        ceil_mode,
    }
}

/// (input shape, params) of max pooling cases.
fn max_cases() -> Vec<(Vec<i64>, PoolParams)> {
    vec![
        (
            vec![2, 3, 6, 6],
            pool([3, 3], [2, 2], [1, 1], [1, 1], false),
        ),
        (vec![1, 2, 5, 5], pool([2, 2], [2, 2], [0, 0], [1, 1], true)),
        (
            vec![1, 2, 7, 6],
            pool([2, 3], [1, 2], [1, 0], [2, 1], false),
        ),
    ]
}

fn pool_args(c: &mut Case, p: &PoolParams, dilation: bool) {
    c.arg(z2(p.kernel));
    c.arg(z2(p.stride));
    c.arg(z2(p.padding));
    if dilation {
        c.arg(z2(p.dilation));
    }
    c.arg(Arg::B(p.ceil_mode));
}

/// (input shape, params, options) of average pooling cases.
fn avg_cases() -> Vec<(Vec<i64>, PoolParams, AvgOpts)> {
    let p = pool([3, 3], [2, 2], [1, 1], [1, 1], false);
    vec![
        (
            vec![2, 3, 6, 6],
            p,
            AvgOpts {
                count_include_pad: true,
                divisor_override: None,
            },
        ),
        (
            vec![2, 3, 6, 6],
            p,
            AvgOpts {
                count_include_pad: false,
                divisor_override: None,
            },
        ),
        (
            vec![1, 2, 5, 5],
            pool([2, 2], [2, 2], [0, 0], [1, 1], true),
            AvgOpts {
                count_include_pad: true,
                divisor_override: None,
            },
        ),
        (
            vec![1, 2, 6, 6],
            p,
            AvgOpts {
                count_include_pad: true,
                divisor_override: Some(4),
            },
        ),
    ]
}

fn avg_args(c: &mut Case, o: &AvgOpts) {
    c.arg(Arg::B(o.count_include_pad));
    c.arg(Arg::OptI(o.divisor_override));
}

fn pool_ops() -> Vec<Op> {
    vec![
        op(
            "diopiMaxPool2dWithIndices",
            sig!(T, T, C, Z, Z, Z, Z, B),
            |rng: &mut Rng| {
                max_cases()
                    .into_iter()
                    .map(|(s, p)| {
                        let mut c = Case::new(format!("{p:?}"));
                        let x = distinct(rng, F, &s);
                        let (v, i) = r::max_pool2d(&x, &p);
                        c.output(v);
                        c.output(i);
                        c.input(x);
                        pool_args(&mut c, &p, true);
                        c
                    })
                    .collect()
            },
        ),
        op(
            "diopiMaxPool2dBackward",
            sig!(T, C, C, Z, Z, Z, Z, B, C),
            |rng: &mut Rng| {
                max_cases()
                    .into_iter()
                    .map(|(s, p)| {
                        let mut c = Case::new(format!("{p:?}"));
                        let x = distinct(rng, F, &s);
                        let (v, i) = r::max_pool2d(&x, &p);
                        let go = rand(rng, F, &v.shape, -1.0, 1.0);
                        c.output(r::max_pool2d_backward(&go, &x, &i));
                        c.input(go);
                        c.input(x);
                        pool_args(&mut c, &p, true);
                        c.input(i);
                        c
                    })
                    .collect()
            },
        ),
        op(
            "diopiAvgPool2d",
            sig!(T, C, Z, Z, Z, B, B, P),
            |rng: &mut Rng| {
                avg_cases()
                    .into_iter()
                    .map(|(s, p, o)| {
                        let mut c = Case::new(format!("{p:?} {o:?}"));
                        let x = rand(rng, F, &s, -1.0, 1.0);
                        c.output(r::avg_pool2d(&x, &p, &o));
                        c.input(x);
                        pool_args(&mut c, &p, false);
                        avg_args(&mut c, &o);
                        c
                    })
                    .collect()
            },
        ),
        op(
            "diopiAvgPool2dBackward",
            sig!(T, C, C, Z, Z, Z, B, B, P),
            |rng: &mut Rng| {
                avg_cases()
                    .into_iter()
                    .map(|(s, p, o)| {
                        let mut c = Case::new(format!("{p:?} {o:?}"));
                        let x = rand(rng, F, &s, -1.0, 1.0);
                        let go = rand(rng, F, &r::avg_pool2d(&x, &p, &o).shape, -1.0, 1.0);
                        c.output(r::avg_pool2d_backward(&go, &x, &p, &o));
                        c.input(go);
                        c.input(x);
                        pool_args(&mut c, &p, false);
                        avg_args(&mut c, &o);
                        c
                    })
                    .collect()
            },
        ),
        op("diopiAdaptiveAvgPool2d", sig!(T, C, Z), |rng: &mut Rng| {
            [
                (vec![2, 3, 7, 5], [3usize, 2usize]),
                (vec![2, 3, 6, 6], [1, 1]),
                (vec![1, 2, 4, 4], [4, 4]),
            ]
            .into_iter()
            .map(|(s, o)| {
                let mut c = Case::new(format!("output_size={o:?}"));
                let x = rand(rng, F, &s, -1.0, 1.0);
                c.output(r::adaptive_avg_pool2d(&x, o));
                c.input(x);
                c.arg(z2(o));
                c
            })
            .collect()
        }),
        op(
            "diopiAdaptiveAvgPool2dBackward",
            sig!(T, C, C),
            |rng: &mut Rng| {
                [(vec![2, 3, 7, 5], [3i64, 2i64]), (vec![2, 3, 6, 6], [1, 1])]
                    .into_iter()
                    .map(|(s, o)| {
                        let mut c = Case::new(format!("output_size={o:?}"));
                        let x = rand(rng, F, &s, -1.0, 1.0);
                        let go = rand(rng, F, &[s[0], s[1], o[0], o[1]], -1.0, 1.0);
                        c.output(r::adaptive_avg_pool2d_backward(&go, &x));
                        c.input(go);
                        c.input(x);
                        c
                    })
                    .collect()
            },
        ),
    ]
}

/// (input shape, weighted, options) of the loss cases.
fn loss_cases(ce: bool) -> Vec<(Vec<i64>, bool, LossOpts)> {
    let o = |reduction, ignore_index, smoothing| LossOpts {
        reduction,
        ignore_index,
        smoothing,
    };
    let mut v = vec![
        (vec![4, 5], false, o(loss::MEAN, -100, 0.0)),
        (vec![4, 5], true, o(loss::MEAN, 2, 0.0)),
        (vec![4, 5], true, o(loss::NONE, -100, 0.0)),
        (vec![4, 5], false, o(loss::SUM, 2, 0.0)),
        (vec![2, 3, 2, 2], true, o(loss::MEAN, -100, 0.0)),
    ];
    if ce {
        v.push((vec![4, 5], false, o(loss::MEAN, -100, 0.1)));
        v.push((vec![4, 5], true, o(loss::SUM, -100, 0.2)));
        v.push((vec![4, 5], true, o(loss::NONE, 1, 0.1)));
        // Smoothing with ignored targets: the mean counts the kept ones.
        v.push((vec![4, 5], false, o(loss::MEAN, 3, 0.1)));
        v.push((vec![4, 5], true, o(loss::MEAN, 3, 0.1)));
    }
    v
}

/// One loss case: forward (`go` None) or backward.
fn loss_case(
    rng: &mut Rng,
    ce: bool,
    backward: bool,
    shape: &[i64],
    weighted: bool,
    o: &LossOpts,
) -> Case {
    let mut c = Case::new(format!("{o:?} weight={weighted}"));
    let logits = rand(rng, F, shape, -2.0, 2.0);
    let input = if ce {
        logits
    } else {
        r_nn::softmax(&logits, 1, true)
    };
    let mut tshape = vec![shape[0]];
    tshape.extend_from_slice(&shape[2..]);
    let mut target = rand_int(rng, Dtype::I64, &tshape, 0, shape[1]);
    if o.ignore_index >= 0 {
        target.data[0] = o.ignore_index as f64;
    }
    let w = weighted.then(|| rand(rng, F, &[shape[1]], 0.5, 2.0));
    let fwd = if ce {
        loss::cross_entropy(&input, &target, w.as_ref(), o)
    } else {
        loss::nll_loss(&input, &target, w.as_ref(), o)
    };
    if backward {
        let go = rand(rng, F, &fwd.shape, 0.5, 1.5);
        let gi = if ce {
            loss::cross_entropy_backward(&go, &input, &target, w.as_ref(), o)
        } else {
            loss::nll_loss_backward(&go, &input, &target, w.as_ref(), o)
        };
        c.output(gi);
        c.input(go);
    } else {
        c.output(fwd);
    }
    c.input(input);
    c.input(target);
    c.opt_input(w);
    c.arg(Arg::E(o.reduction));
    c.arg(Arg::I(o.ignore_index));
    if ce {
        c.arg(Arg::D(o.smoothing));
    }
    c
}

fn loss_op(name: &'static str, ce: bool, backward: bool) -> Op {
    let s = match (ce, backward) {
        (false, false) => sig!(T, C, C, C, E, I),
        (false, true) => sig!(T, C, C, C, C, E, I),
        (true, false) => sig!(T, C, C, C, E, I, D),
        (true, true) => sig!(T, C, C, C, C, E, I, D),
    };
    op(name, s, move |rng| {
        loss_cases(ce)
            .into_iter()
            .map(|(shape, weighted, o)| loss_case(rng, ce, backward, &shape, weighted, &o))
            .collect()
    })
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = pool_ops();
    v.extend([
        loss_op("diopiNLLLoss", false, false),
        loss_op("diopiNLLLossBackward", false, true),
        loss_op("diopiCrossEntropyLoss", true, false),
        loss_op("diopiCrossEntropyLossBackward", true, true),
    ]);
    v
}
