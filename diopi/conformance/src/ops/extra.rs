//! The other ops of include/diopi/functions.h that take tensors: shape
//! copies (Transpose, Permute, Stack, Contiguous), MaxPool2d without
//! indices, MatmulBackward, and the random Normal and DropoutInp.

use super::conv_norm::z2;
use super::{distinct, op, rand, Op, FLOATS};
use crate::case::{Arg, Case, Check};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::{index, matmul, pool};
use crate::rng::Rng;
use crate::tensor::HostTensor;

const F: Dtype = Dtype::F32;

fn shape_ops() -> Vec<Op> {
    vec![
        op("diopiTranspose", sig!(T, C, I, I), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (shape, d0, d1) in [
                    (vec![3, 4], 0i64, 1i64),
                    (vec![2, 3, 4], 0, 2),
                    (vec![2, 3, 4], -1, 1),
                ] {
                    let mut c = Case::new(format!("dim0={d0} dim1={d1}"));
                    let x = rand(rng, dt, &shape, -1.0, 1.0);
                    let n = shape.len() as i64;
                    let (a, b) = (((d0 + n) % n) as usize, ((d1 + n) % n) as usize);
                    let mut dims: Vec<usize> = (0..shape.len()).collect();
                    dims.swap(a, b);
                    c.output(index::permute(&x, &dims));
                    c.input(x);
                    c.arg(Arg::I(d0)).arg(Arg::I(d1));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiPermute", sig!(T, C, Z), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (shape, dims) in [
                    (vec![2, 3, 4], vec![2, 0, 1]),
                    (vec![3, 4], vec![1, 0]),
                    (vec![2, 3, 4], vec![0, 1, 2]),
                ] {
                    let mut c = Case::new(format!("dims={dims:?}"));
                    let x = rand(rng, dt, &shape, -1.0, 1.0);
                    let d: Vec<usize> = dims.iter().map(|&v| v as usize).collect();
                    c.output(index::permute(&x, &d));
                    c.input(x);
                    c.arg(Arg::Z(dims));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiStack", sig!(T, P, I, I), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for (shape, n, dim) in [
                    (vec![2, 3], 3usize, 0i64),
                    (vec![2, 3], 2, 2),
                    (vec![], 4, 0),
                ] {
                    let mut c = Case::new(format!("dim={dim}"));
                    let ts: Vec<HostTensor> =
                        (0..n).map(|_| rand(rng, dt, &shape, -1.0, 1.0)).collect();
                    let refs: Vec<&HostTensor> = ts.iter().collect();
                    c.output(index::stack(&refs, dim as usize));
                    let idx: Vec<usize> = ts.into_iter().map(|t| c.tensor(t)).collect();
                    c.arg(Arg::Tensors(idx))
                        .arg(Arg::I(n as i64))
                        .arg(Arg::I(dim));
                    cases.push(c);
                }
            }
            cases
        }),
        op("diopiContiguous", sig!(P, C, E), |rng: &mut Rng| {
            let mut cases = Vec::new();
            for dt in FLOATS {
                for shape in [vec![3, 4], vec![2, 3, 4], vec![]] {
                    // The strided-inputs run gives it a transposed input.
                    let mut c = Case::new("memory_format=Contiguous");
                    let x = rand(rng, dt, &shape, -1.0, 1.0);
                    c.required.push(x.clone());
                    c.arg(Arg::Required(0));
                    c.input(x);
                    c.arg(Arg::E(0));
                    cases.push(c);
                }
            }
            cases
        }),
    ]
}

fn other_ops() -> Vec<Op> {
    vec![
        op(
            "diopiMaxPool2d",
            sig!(T, C, Z, Z, Z, Z, B),
            |rng: &mut Rng| {
                [
                    (
                        vec![2, 3, 6, 6],
                        [3usize, 3usize],
                        [2usize, 2usize],
                        [1usize, 1usize],
                        false,
                    ),
                    (vec![1, 2, 5, 5], [2, 2], [2, 2], [0, 0], true),
                ]
                .into_iter()
                .map(|(s, kernel, stride, padding, ceil_mode)| {
                    let p = pool::PoolParams {
                        kernel,
                        stride,
                        padding,
                        dilation: [1, 1],
                        ceil_mode,
                    };
                    let mut c = Case::new(format!("{p:?}"));
                    let x = distinct(rng, F, &s);
                    c.output(pool::max_pool2d(&x, &p).0);
                    c.input(x);
                    c.arg(z2(p.kernel))
                        .arg(z2(p.stride))
                        .arg(z2(p.padding))
                        .arg(z2(p.dilation))
                        .arg(Arg::B(ceil_mode));
                    c
                })
                .collect()
            },
        ),
        op(
            "diopiMatmulBackward",
            sig!(T, T, C, C, C),
            |rng: &mut Rng| {
                let mut cases = Vec::new();
                for dt in FLOATS {
                    for (sa, sb) in [
                        (vec![3, 5], vec![5, 4]),
                        (vec![2, 3, 5], vec![2, 5, 4]),
                        (vec![2, 3, 5], vec![5, 4]),
                    ] {
                        let mut c = Case::new("");
                        let a = rand(rng, dt, &sa, -1.0, 1.0);
                        let b = rand(rng, dt, &sb, -1.0, 1.0);
                        let go = rand(rng, dt, &matmul::matmul(&a, &b, dt).shape, -1.0, 1.0);
                        let (ga, gb) = matmul::matmul_backward(&go, &a, &b);
                        c.output(ga);
                        c.output(gb);
                        c.input(go);
                        c.input(a);
                        c.input(b);
                        cases.push(c);
                    }
                }
                cases
            },
        ),
        op("diopiNormal", sig!(T, D, D, G), |_rng: &mut Rng| {
            [(0.0, 1.0), (-2.0, 3.0)]
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
        op("diopiDropoutInp", sig!(T, T, D, B, G), |rng: &mut Rng| {
            [(0.5, Dtype::U8), (0.3, Dtype::Bool)]
                .into_iter()
                .map(|(p, mdt)| {
                    let mut c = Case::new(format!("p={p} train=true mask {}", mdt.name()));
                    let x = c.tensor(rand(rng, F, &[64, 64], 0.5, 1.5));
                    let mask = c.tensor(HostTensor::full(mdt, &[64, 64], 0.0));
                    c.args.push(Arg::T(x));
                    c.args.push(Arg::T(mask));
                    c.arg(Arg::D(p)).arg(Arg::B(true)).arg(Arg::Gen);
                    c.check = Check::Dropout {
                        out: x,
                        mask,
                        input: x,
                        p,
                    };
                    c
                })
                .collect()
        }),
    ]
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = shape_ops();
    v.extend(other_ops());
    v
}
