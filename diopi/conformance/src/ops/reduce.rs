//! Reductions, softmax and the matmul family.

use super::{distinct, op, rand, sf, Op, FLOATS};
use crate::case::{Arg, Case};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::{matmul as mm, nn, reduce as r};
use crate::rng::Rng;

/// (input shape, dims, keepdim) of Sum/Mean cases.
fn reduce_shapes() -> Vec<(Vec<i64>, Vec<i64>, bool)> {
    vec![
        (vec![3, 4], vec![1], false),
        (vec![2, 3, 4], vec![0, 2], true),
        (vec![2, 3, 4], vec![-1], false),
        (vec![3, 4], vec![], false),
        (vec![], vec![], false),
        (vec![0, 3], vec![0], false),
    ]
}

fn sum_mean(name: &'static str, mean: bool) -> Op {
    op(name, sig!(T, C, Z), move |rng| {
        reduce_shapes()
            .into_iter()
            .map(|(shape, dims, keep)| {
                let mut c = Case::new(format!("dim={dims:?} keepdim={keep}"));
                let x = rand(rng, Dtype::F32, &shape, -1.0, 1.0);
                let f = if mean { r::mean } else { r::sum };
                c.output(r::reduce(&x, &dims, keep, Dtype::F32, f));
                c.input(x);
                c.arg(Arg::Z(dims));
                c
            })
            .collect()
    })
}

fn max_min(name: &'static str, max: bool) -> Op {
    op(name, sig!(T, T, C, I), move |rng| {
        [
            (vec![3, 4], 1, false),
            (vec![2, 3, 4], 0, true),
            (vec![2, 3, 4], -1, false),
            (vec![], 0, false),
        ]
        .into_iter()
        .map(|(shape, dim, keep)| {
            let mut c = Case::new(format!("dim={dim} keepdim={keep}"));
            let x = distinct(rng, Dtype::F32, &shape);
            let (v, i) = r::max_min_dim(&x, dim, keep, max);
            c.output(v);
            c.output(i);
            c.input(x);
            c.arg(Arg::I(dim));
            c
        })
        .collect()
    })
}

fn all_reduce(name: &'static str, max: bool) -> Op {
    op(name, sig!(T, C), move |rng| {
        [vec![3, 4], vec![2, 3, 4], vec![]]
            .into_iter()
            .map(|shape| {
                let mut c = Case::new("");
                let x = distinct(rng, Dtype::F32, &shape);
                c.output(r::reduce(&x, &[], false, Dtype::F32, |g| {
                    r::extreme(g, max).0
                }));
                c.input(x);
                c
            })
            .collect()
    })
}

fn argmax() -> Op {
    op("diopiArgmax", sig!(T, C, P, B), |rng: &mut Rng| {
        [
            (vec![3, 4], Some(1), false),
            (vec![2, 3, 4], Some(0), true),
            (vec![3, 4], None, false),
        ]
        .into_iter()
        .map(|(shape, dim, keep)| {
            let mut c = Case::new(format!("dim={dim:?} keepdim={keep}"));
            let x = distinct(rng, Dtype::F32, &shape);
            let dims: Vec<i64> = dim.into_iter().collect();
            c.output(r::reduce(
                &x,
                &dims,
                keep && dim.is_some(),
                Dtype::I64,
                |g| r::extreme(g, true).1 as f64,
            ));
            c.input(x);
            c.arg(Arg::OptI(dim));
            c.arg(Arg::B(keep));
            c
        })
        .collect()
    })
}

fn softmax(name: &'static str, log: bool) -> Op {
    op(name, sig!(T, C, I), move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for (shape, dim) in [
                (vec![3, 4], 1i64),
                (vec![2, 3, 4], 1),
                (vec![2, 3, 4], -1),
                (vec![5], 0),
            ] {
                let mut c = Case::new(format!("dim={dim}"));
                let x = rand(rng, dt, &shape, -3.0, 3.0);
                let d = r::wrap_dim(dim, shape.len());
                let o = c.output(nn::softmax(&x, d, log));
                let i = c.input(x);
                c.arg(Arg::I(dim));
                c.alias = Some((o, i));
                cases.push(c);
            }
        }
        cases
    })
}

fn softmax_backward(name: &'static str, log: bool) -> Op {
    op(name, sig!(T, C, C, I), move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for (shape, dim) in [(vec![3, 4], 1i64), (vec![2, 3, 4], 1)] {
                let mut c = Case::new(format!("dim={dim}"));
                let x = rand(rng, Dtype::F64, &shape, -3.0, 3.0);
                let d = r::wrap_dim(dim, shape.len());
                let y = nn::softmax(&x, d, log).to(dt);
                let go = rand(rng, dt, &shape, -1.0, 1.0);
                let o = c.output(nn::softmax_backward(&go, &y, d, log));
                let ig = c.input(go);
                c.input(y);
                c.arg(Arg::I(dim));
                c.alias = Some((o, ig));
                cases.push(c);
            }
        }
        cases
    })
}

/// Matmul-family ops over the float dtypes; `build` makes one case.
fn mat(
    name: &'static str,
    s: crate::ffi_call::Sig,
    shapes: Vec<Vec<Vec<i64>>>,
    build: fn(&mut Rng, Dtype, &[Vec<i64>]) -> Case,
) -> Op {
    op(name, s, move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for sh in &shapes {
                cases.push(build(rng, dt, sh));
            }
        }
        cases
    })
}

fn matmul_ops() -> Vec<Op> {
    vec![
        mat(
            "diopiMm",
            sig!(T, C, C),
            vec![
                vec![vec![3, 5], vec![5, 4]],
                vec![vec![1, 7], vec![7, 1]],
                vec![vec![3, 0], vec![0, 4]],
            ],
            |rng, dt, s| {
                let mut c = Case::new("");
                let (a, b) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                );
                c.output(mm::mm(&a, &b, dt));
                c.input(a);
                c.input(b);
                c
            },
        ),
        mat(
            "diopiBmm",
            sig!(T, C, C),
            vec![vec![vec![2, 3, 5], vec![2, 5, 4]]],
            |rng, dt, s| {
                let mut c = Case::new("");
                let (a, b) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                );
                c.output(mm::bmm(&a, &b, dt));
                c.input(a);
                c.input(b);
                c
            },
        ),
        mat(
            "diopiAddmm",
            sig!(T, C, C, C, S, S),
            vec![
                vec![vec![3, 4], vec![3, 5], vec![5, 4]],
                vec![vec![4], vec![3, 5], vec![5, 4]],
            ],
            |rng, dt, s| {
                let (beta, alpha) = (0.5, 2.0);
                let mut c = Case::new(format!("beta={beta} alpha={alpha}"));
                let (i, a, b) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                    rand(rng, dt, &s[2], -1.0, 1.0),
                );
                let e = mm::addmm_like(&i, &mm::mm(&a, &b, Dtype::F64), beta, alpha, dt);
                let same = e.shape == i.shape;
                let o = c.output(e);
                let ii = c.input(i);
                c.input(a);
                c.input(b);
                c.arg(sf(beta));
                c.arg(sf(alpha));
                if same {
                    c.alias = Some((o, ii));
                }
                c
            },
        ),
        mat(
            "diopiBaddbmm",
            sig!(T, C, C, C, D, D),
            vec![vec![vec![2, 3, 4], vec![2, 3, 5], vec![2, 5, 4]]],
            |rng, dt, s| {
                let (beta, alpha) = (0.5, 2.0);
                let mut c = Case::new(format!("beta={beta} alpha={alpha}"));
                let (i, a, b) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                    rand(rng, dt, &s[2], -1.0, 1.0),
                );
                let o = c.output(mm::addmm_like(
                    &i,
                    &mm::bmm(&a, &b, Dtype::F64),
                    beta,
                    alpha,
                    dt,
                ));
                let ii = c.input(i);
                c.input(a);
                c.input(b);
                c.arg(Arg::D(beta));
                c.arg(Arg::D(alpha));
                c.alias = Some((o, ii));
                c
            },
        ),
        mat(
            "diopiMatmul",
            sig!(T, C, C),
            vec![
                vec![vec![3, 5], vec![5, 4]],
                vec![vec![2, 3, 5], vec![5, 4]],
                vec![vec![2, 3, 5], vec![2, 5, 4]],
                vec![vec![3, 5], vec![5]],
                vec![vec![5], vec![5]],
            ],
            |rng, dt, s| {
                let mut c = Case::new("");
                let (a, b) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                );
                c.output(mm::matmul(&a, &b, dt));
                c.input(a);
                c.input(b);
                c
            },
        ),
        mat(
            "diopiLinear",
            sig!(T, C, C, C),
            vec![
                vec![vec![4, 3], vec![5, 3], vec![5]],
                vec![vec![2, 4, 3], vec![5, 3]],
            ],
            |rng, dt, s| {
                let mut c = Case::new(if s.len() == 3 { "bias" } else { "bias=NULL" });
                let (x, w) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                );
                let b = s.get(2).map(|sh| rand(rng, dt, sh, -1.0, 1.0));
                c.output(mm::linear(&x, &w, b.as_ref(), dt));
                c.input(x);
                c.input(w);
                c.opt_input(b);
                c
            },
        ),
        mat(
            "diopiLinearBackward",
            sig!(T, T, T, C, C, C),
            vec![
                vec![vec![4, 3], vec![5, 3]],
                vec![vec![2, 4, 3], vec![5, 3]],
            ],
            |rng, dt, s| {
                let with_bias = s[0].len() == 2;
                let mut c = Case::new(if with_bias {
                    "grad_bias"
                } else {
                    "grad_bias=NULL"
                });
                let (x, w) = (
                    rand(rng, dt, &s[0], -1.0, 1.0),
                    rand(rng, dt, &s[1], -1.0, 1.0),
                );
                let mut gshape = s[0].clone();
                *gshape.last_mut().expect("rank") = s[1][0];
                let go = rand(rng, dt, &gshape, -1.0, 1.0);
                let (gi, gw, gb) = mm::linear_backward(&go, &x, &w);
                c.output(gi);
                c.output(gw);
                if with_bias {
                    c.output(gb);
                } else {
                    c.arg(Arg::Null);
                }
                c.input(go);
                c.input(x);
                c.input(w);
                c
            },
        ),
    ]
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = vec![
        softmax("diopiSoftmax", false),
        softmax("diopiLogSoftmax", true),
        softmax_backward("diopiSoftmaxBackward", false),
        softmax_backward("diopiLogSoftmaxBackward", true),
        sum_mean("diopiSum", false),
        sum_mean("diopiMean", true),
        max_min("diopiMax", true),
        max_min("diopiMin", false),
        all_reduce("diopiMaxAll", true),
        all_reduce("diopiMinAll", false),
        argmax(),
    ];
    v.extend(matmul_ops());
    v
}
