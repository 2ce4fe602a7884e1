//! Index/shape ops, random ops and optimizers.

use super::{op, rand, rand_int, sf, Op, FLOATS};
use crate::case::{Arg, Case, Check};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::{index as r, optim};
use crate::rng::Rng;
use crate::tensor::HostTensor;

const F: Dtype = Dtype::F32;

fn index_ops() -> Vec<Op> {
    vec![
        op("diopiEmbedding", sig!(T, C, C, I, B, B), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for (ishape, idt) in [
                (vec![2, 3], Dtype::I64),
                (vec![4], Dtype::I32),
                (vec![], Dtype::I64),
            ] {
                let mut c = Case::new(format!("indices {}", idt.name()));
                let w = rand(rng, F, &[6, 3], -1.0, 1.0);
                let i = rand_int(rng, idt, &ishape, 0, 6);
                c.output(r::embedding(&w, &i));
                c.input(w);
                c.input(i);
                c.arg(Arg::I(-1)).arg(Arg::B(false)).arg(Arg::B(false));
                cases.push(c);
            }
            cases
        }),
        op(
            "diopiEmbeddingBackward",
            sig!(T, C, C, I, I, B, B),
            |rng: &mut Rng| {
                let mut cases = Vec::new();
                for (pad, scale) in [(-1i64, false), (2, false), (-1, true)] {
                    let mut c = Case::new(format!("padding_idx={pad} scale_grad_by_freq={scale}"));
                    let i = rand_int(rng, Dtype::I64, &[2, 4], 0, 5);
                    let g = rand(rng, F, &[2, 4, 3], -1.0, 1.0);
                    c.output(r::embedding_backward(&g, &i, 5, pad, scale));
                    c.input(g);
                    c.input(i);
                    c.arg(Arg::I(5))
                        .arg(Arg::I(pad))
                        .arg(Arg::B(scale))
                        .arg(Arg::B(false));
                    cases.push(c);
                }
                cases
            },
        ),
        op("diopiIndexSelect", sig!(T, C, I, C), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (shape, dim, idt) in [
                    (vec![4, 5], 0i64, Dtype::I64),
                    (vec![3, 4, 5], 1, Dtype::I32),
                    (vec![3, 4, 5], -1, Dtype::I64),
                ] {
                    let mut c = Case::new(format!("dim={dim} index {}", idt.name()));
                    let x = rand(rng, dt, &shape, -1.0, 1.0);
                    let d = if dim < 0 {
                        dim + shape.len() as i64
                    } else {
                        dim
                    } as usize;
                    let i = rand_int(rng, idt, &[3], 0, shape[d]);
                    c.output(r::index_select(&x, d, &i));
                    c.input(x);
                    c.arg(Arg::I(dim));
                    c.input(i);
                    cases.push(c);
                }
            }
            cases
        }),
        op(
            "diopiIndexSelectBackward",
            sig!(T, C, Z, I, C),
            |rng: &mut Rng| {
                [(vec![4, 5], 0i64), (vec![3, 4, 5], 1)]
                    .into_iter()
                    .map(|(shape, dim)| {
                        let mut c = Case::new(format!("dim={dim}"));
                        let d = dim as usize;
                        let i = rand_int(rng, Dtype::I64, &[4], 0, shape[d]);
                        let mut gshape = shape.clone();
                        gshape[d] = 4;
                        let g = rand(rng, F, &gshape, -1.0, 1.0);
                        c.output(r::index_select_backward(&g, &shape, d, &i));
                        c.input(g);
                        c.arg(Arg::Z(shape));
                        c.arg(Arg::I(dim));
                        c.input(i);
                        c
                    })
                    .collect()
            },
        ),
        op("diopiCat", sig!(T, P, I, I), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (shapes, dim) in [
                    (vec![vec![2, 3], vec![2, 1], vec![2, 4]], 1i64),
                    (vec![vec![1, 3], vec![2, 3]], 0),
                    (vec![vec![2, 0], vec![2, 3]], 1),
                ] {
                    let mut c = Case::new(format!("dim={dim}"));
                    let ts: Vec<HostTensor> =
                        shapes.iter().map(|s| rand(rng, dt, s, -1.0, 1.0)).collect();
                    let refs: Vec<&HostTensor> = ts.iter().collect();
                    c.output(r::cat(&refs, dim as usize));
                    let idx: Vec<usize> = ts.into_iter().map(|t| c.tensor(t)).collect();
                    let n = idx.len() as i64;
                    c.arg(Arg::Tensors(idx)).arg(Arg::I(n)).arg(Arg::I(dim));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiWhere", sig!(T, C, C, C), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (sc, sa, sb) in [
                    (vec![3, 4], vec![3, 4], vec![3, 4]),
                    (vec![3, 1], vec![4], vec![3, 4]),
                    (vec![], vec![2], vec![2]),
                ] {
                    let mut c = Case::new("");
                    let cond = rand_int(rng, Dtype::Bool, &sc, 0, 2);
                    let a = rand(rng, dt, &sa, -1.0, 1.0);
                    let b = rand(rng, dt, &sb, -1.0, 1.0);
                    c.output(r::where_(&cond, &a, &b));
                    c.input(cond);
                    c.input(a);
                    c.input(b);
                    cases.push(c);
                }
            }
            cases
        }),
        masked_fill(false),
        masked_fill(true),
        tri("diopiTril", false),
        tri("diopiTriu", true),
    ]
}

fn masked_fill(scalar: bool) -> Op {
    let (name, s) = if scalar {
        ("diopiMaskedFillScalar", sig!(T, C, C, S))
    } else {
        ("diopiMaskedFill", sig!(T, C, C, C))
    };
    op(name, s, move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for (sx, sm, mdt) in [
                (vec![3, 4], vec![3, 4], Dtype::Bool),
                (vec![3, 4], vec![4], Dtype::Bool),
                (vec![2, 3], vec![2, 3], Dtype::U8),
            ] {
                let mut c = Case::new(format!("mask {}", mdt.name()));
                let x = rand(rng, dt, &sx, -1.0, 1.0);
                let m = rand_int(rng, mdt, &sm, 0, 2);
                let v = dt.round(2.5);
                let o = c.output(r::masked_fill(&x, &m, v));
                let ix = c.input(x);
                c.input(m);
                if scalar {
                    c.arg(sf(v));
                } else {
                    c.input(HostTensor::new(dt, &[], vec![v]));
                }
                c.alias = Some((o, ix));
                cases.push(c);
            }
        }
        cases
    })
}

fn tri(name: &'static str, upper: bool) -> Op {
    op(name, sig!(T, C, I), move |rng| {
        let mut cases = Vec::new();
        for dt in FLOATS {
            for (shape, diag) in [(vec![4, 5], 0i64), (vec![4, 5], 1), (vec![2, 3, 4], -1)] {
                let mut c = Case::new(format!("diagonal={diag}"));
                let x = rand(rng, dt, &shape, -1.0, 1.0);
                let o = c.output(r::tri(&x, diag, upper));
                let i = c.input(x);
                c.arg(Arg::I(diag));
                c.alias = Some((o, i));
                cases.push(c);
            }
        }
        cases
    })
}

fn random_ops() -> Vec<Op> {
    vec![
        op("diopiDropout", sig!(T, T, C, D, B, G), |rng: &mut Rng| {
            [(0.5, Dtype::U8), (0.2, Dtype::Bool)]
                .into_iter()
                .map(|(p, mdt)| {
                    let mut c = Case::new(format!("p={p} train=true mask {}", mdt.name()));
                    let x = rand(rng, F, &[64, 64], 0.5, 1.5);
                    let out = c.tensor(HostTensor::full(F, &x.shape, f64::NAN));
                    let mask = c.tensor(HostTensor::full(mdt, &x.shape, 0.0));
                    c.args.push(Arg::T(out));
                    c.args.push(Arg::T(mask));
                    let input = c.input(x);
                    c.arg(Arg::D(p)).arg(Arg::B(true)).arg(Arg::Gen);
                    c.check = Check::Dropout {
                        out,
                        mask,
                        input,
                        p,
                    };
                    c
                })
                .collect()
        }),
        op("diopiUniformInp", sig!(T, D, D, G), |_rng: &mut Rng| {
            [(-2.0, 3.0), (0.0, 1.0)]
                .into_iter()
                .map(|(from, to)| {
                    let mut c = Case::new(format!("from={from} to={to}"));
                    let t = c.tensor(HostTensor::full(F, &[64, 64], f64::NAN));
                    c.args.push(Arg::T(t));
                    c.arg(Arg::D(from)).arg(Arg::D(to)).arg(Arg::Gen);
                    c.check = Check::Uniform { t, from, to };
                    c
                })
                .collect()
        }),
        op("diopiNormalInp", sig!(T, D, D, G), |_rng: &mut Rng| {
            [(0.0, 1.0), (3.0, 0.5)]
                .into_iter()
                .map(|(mean, std)| {
                    let mut c = Case::new(format!("mean={mean} std={std}"));
                    let t = c.tensor(HostTensor::full(F, &[64, 64], f64::NAN));
                    c.args.push(Arg::T(t));
                    c.arg(Arg::D(mean)).arg(Arg::D(std)).arg(Arg::Gen);
                    c.check = Check::Normal { t, mean, std };
                    c
                })
                .collect()
        }),
        op("diopiRandomInp", sig!(T, I, P, G), |_rng: &mut Rng| {
            [(Dtype::I64, 0i64, 10i64), (F, -5, 5)]
                .into_iter()
                .map(|(dt, from, to)| {
                    let mut c = Case::new(format!("from={from} to={to}"));
                    let t = c.tensor(HostTensor::full(dt, &[32, 32], -1000.0));
                    c.args.push(Arg::T(t));
                    c.arg(Arg::I(from)).arg(Arg::OptI(Some(to))).arg(Arg::Gen);
                    c.check = Check::RandomInt { t, from, to };
                    c
                })
                .collect()
        }),
    ]
}

fn optim_ops() -> Vec<Op> {
    let mut v = vec![op(
        "diopiSgd",
        sig!(T, T, T, D, D, D, D, B),
        |rng: &mut Rng| {
            let mut cases = Vec::new();
            for (momentum, dampening, wd, nesterov) in [
                (0.9, 0.0, 0.01, false),
                (0.9, 0.0, 0.0, true),
                (0.5, 0.1, 0.0, false),
                (0.0, 0.0, 0.1, false),
            ] {
                let o = optim::SgdOpts {
                    lr: 0.1,
                    momentum,
                    dampening,
                    wd,
                    nesterov,
                };
                let mut c = Case::new(format!("{o:?}"));
                let p = rand(rng, F, &[3, 4], -1.0, 1.0);
                let g = rand(rng, F, &[3, 4], -1.0, 1.0);
                let b = rand(rng, F, &[3, 4], -0.5, 0.5);
                let (np, nb) = optim::sgd(&p.data, &g.data, &b.data, &o);
                c.inplace(p, HostTensor::new(F, &[3, 4], np));
                c.inplace(g.clone(), g);
                let b_end = if momentum != 0.0 {
                    HostTensor::new(F, &[3, 4], nb)
                } else {
                    b.clone()
                };
                c.inplace(b, b_end);
                c.arg(Arg::D(o.lr))
                    .arg(Arg::D(momentum))
                    .arg(Arg::D(dampening))
                    .arg(Arg::D(wd))
                    .arg(Arg::B(nesterov));
                cases.push(c);
            }
            cases
        },
    )];
    for (name, decoupled) in [("diopiAdam", false), ("diopiAdamW", true)] {
        v.push(op(
            name,
            sig!(T, C, T, T, T, F, F, F, F, F, I, B),
            move |rng| {
                let mut cases = Vec::new();
                for (step, wd, amsgrad) in [(1i64, 0.0f32, false), (3, 0.01, false), (5, 0.1, true)]
                {
                    let o = optim::AdamOpts {
                        lr: 0.01,
                        beta1: 0.9,
                        beta2: 0.999,
                        eps: 1e-8,
                        wd,
                        step,
                        amsgrad,
                        decoupled,
                    };
                    let mut c =
                        Case::new(format!("step={step} weight_decay={wd} amsgrad={amsgrad}"));
                    let sh = [3, 4];
                    let p = rand(rng, F, &sh, -1.0, 1.0);
                    let g = rand(rng, F, &sh, -1.0, 1.0);
                    let m = if step == 1 {
                        HostTensor::full(F, &sh, 0.0)
                    } else {
                        rand(rng, F, &sh, -0.1, 0.1)
                    };
                    let vv = if step == 1 {
                        HostTensor::full(F, &sh, 0.0)
                    } else {
                        rand(rng, F, &sh, 0.0, 0.01)
                    };
                    let vm = if step == 1 {
                        HostTensor::full(F, &sh, 0.0)
                    } else {
                        rand(rng, F, &sh, 0.0, 0.02)
                    };
                    let s = optim::adam(&p.data, &g.data, &m.data, &vv.data, &vm.data, &o);
                    let t = |d: Vec<f64>| HostTensor::new(F, &sh, d);
                    c.inplace(p, t(s.param));
                    c.input(g);
                    c.inplace(m, t(s.exp_avg));
                    c.inplace(vv, t(s.exp_avg_sq));
                    c.inplace(vm, t(s.max_exp_avg_sq));
                    for f in [o.lr, o.beta1, o.beta2, o.eps, o.wd] {
                        c.arg(Arg::F(f));
                    }
                    c.arg(Arg::I(step)).arg(Arg::B(amsgrad));
                    cases.push(c);
                }
                cases
            },
        ));
    }
    v
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = index_ops();
    v.extend(random_ops());
    v.extend(optim_ops());
    v
}
