//! DIOPI's fused LLM functions (`functions_ext.h`): RMS norm, rotary
//! embedding and scaled masked softmax, in float32, float16 and bfloat16.

use super::{op, rand, rand_int, Op, FLOATS};
use crate::case::{Arg, Case};
use crate::dtype::Dtype;
use crate::ffi_call::sig;
use crate::refs::llm as r;
use crate::rng::Rng;
use crate::tensor::HostTensor;

/// The dtype DIOPI saves `inv_rms` in for an input of `dt`.
fn stat_dtype(dt: Dtype) -> Dtype {
    if dt == Dtype::F64 {
        Dtype::F64
    } else {
        Dtype::F32
    }
}

/// (dtype, normalized_shape, weight, bias) of the RMSNorm cases.
fn rms_cases() -> Vec<(Dtype, Vec<i64>, bool, bool)> {
    let mut v: Vec<_> = FLOATS.iter().map(|&d| (d, vec![8], true, false)).collect();
    v.push((Dtype::F32, vec![3, 8], true, true));
    v.push((Dtype::F32, vec![8], false, false));
    v
}

fn rms_ops() -> Vec<Op> {
    let eps = 1e-6;
    vec![
        op("diopiRMSNorm", sig!(T, T, C, Z, C, C, D), move |rng| {
            rms_cases()
                .into_iter()
                .map(|(dt, ns, has_w, has_b)| {
                    let mut c = Case::new(format!(
                        "{} normalized_shape={ns:?} weight={has_w} bias={has_b}",
                        dt.name()
                    ));
                    let x = rand(rng, dt, &[2, 3, 8], -2.0, 2.0);
                    let w = has_w.then(|| rand(rng, dt, &ns, 0.5, 1.5));
                    let b = has_b.then(|| rand(rng, dt, &ns, -0.5, 0.5));
                    let (y, inv) =
                        r::rms_norm(&x, w.as_ref(), b.as_ref(), ns.len(), eps, stat_dtype(dt));
                    c.output(y);
                    c.output(inv);
                    c.input(x);
                    c.arg(Arg::Z(ns));
                    c.opt_input(w);
                    c.opt_input(b);
                    c.arg(Arg::D(eps));
                    c
                })
                .collect()
        }),
        op(
            "diopiRMSNormBackward",
            sig!(T, T, T, C, C, C, C, C, Z, D),
            move |rng| {
                rms_cases()
                    .into_iter()
                    .filter(|c| c.2)
                    .map(|(dt, ns, _, has_b)| {
                        let mut c = Case::new(format!(
                            "{} normalized_shape={ns:?} bias={has_b}",
                            dt.name()
                        ));
                        let x = rand(rng, dt, &[2, 3, 8], -2.0, 2.0);
                        let w = rand(rng, dt, &ns, 0.5, 1.5);
                        let b = has_b.then(|| rand(rng, dt, &ns, -0.5, 0.5));
                        let go = rand(rng, dt, &[2, 3, 8], -1.0, 1.0);
                        let (_, inv) =
                            r::rms_norm(&x, Some(&w), b.as_ref(), ns.len(), eps, stat_dtype(dt));
                        let (gi, gw, gb) = r::rms_norm_backward(&go, &x, &w, &inv);
                        c.output(gi);
                        c.output(gw);
                        if has_b {
                            c.output(gb);
                        } else {
                            c.arg(Arg::Null);
                        }
                        c.input(go);
                        c.input(x);
                        c.input(w);
                        c.opt_input(b);
                        c.input(inv);
                        c.arg(Arg::Z(ns));
                        c.arg(Arg::D(eps));
                        c
                    })
                    .collect()
            },
        ),
    ]
}

fn rotary_op() -> Op {
    op("diopiRotaryEmbedding", sig!(T, C, C, C, B, B), |rng| {
        let mut flags: Vec<(Dtype, bool, bool)> =
            [(false, false), (true, false), (false, true), (true, true)]
                .into_iter()
                .map(|(conj, il)| (Dtype::F32, conj, il))
                .collect();
        flags.push((Dtype::Bf16, false, false));
        flags.push((Dtype::F16, true, true));
        flags
            .into_iter()
            .map(|(dt, conj, il)| {
                let mut c = Case::new(format!("{} conj={conj} interleaved={il}", dt.name()));
                // x [batch, seq, heads, dim]; cos/sin [seq, 1, dim/2]
                let x = rand(rng, dt, &[2, 4, 3, 8], -2.0, 2.0);
                let angles: Vec<f64> = rng.vec(16, -3.0, 3.0);
                let cos = crate::tensor::HostTensor::new(
                    dt,
                    &[4, 1, 4],
                    angles.iter().map(|a| a.cos()).collect(),
                );
                let sin = crate::tensor::HostTensor::new(
                    dt,
                    &[4, 1, 4],
                    angles.iter().map(|a| a.sin()).collect(),
                );
                let out = c.output(r::rotary(&x, &cos, &sin, conj, il));
                let xi = c.input(x);
                c.input(cos);
                c.input(sin);
                c.arg(Arg::B(conj));
                c.arg(Arg::B(il));
                c.alias = Some((out, xi));
                c
            })
            .collect()
    })
}

/// (dtype, mask shape or None for the causal mask, pass a mask anyway).
fn softmax_cases() -> Vec<(Dtype, Option<Vec<i64>>, bool)> {
    let mut v: Vec<_> = FLOATS
        .iter()
        .map(|&d| (d, Some(vec![2, 2, 4, 5]), true))
        .collect();
    v.push((Dtype::F32, Some(vec![2, 1, 4, 5]), true));
    v.push((Dtype::F32, None, false));
    v.push((Dtype::F16, None, true));
    v
}

/// A softmax case named for its mask, its input `x` and its mask (drawn in
/// that order), and whether the mask is the fixed causal one.
fn softmax_input(
    rng: &mut Rng,
    dt: Dtype,
    ms: Option<Vec<i64>>,
    with_mask: bool,
    shape: &[i64],
) -> (Case, HostTensor, Option<HostTensor>, bool) {
    let triu = ms.is_none();
    let c = Case::new(format!("{} mask={ms:?} fixed_triu_mask={triu}", dt.name()));
    let x = rand(rng, dt, shape, -3.0, 3.0);
    let mshape = ms.unwrap_or(shape.to_vec());
    let m = with_mask.then(|| rand_int(rng, Dtype::Bool, &mshape, 0, 2));
    (c, x, m, triu)
}

fn softmax_ops() -> Vec<Op> {
    let scale = 0.7;
    let shape = [2i64, 2, 4, 5];
    vec![
        op(
            "diopiScaledMaskedSoftmax",
            sig!(T, C, C, D, B),
            move |rng| {
                softmax_cases()
                    .into_iter()
                    .map(|(dt, ms, with_mask)| {
                        let (mut c, x, m, triu) = softmax_input(rng, dt, ms, with_mask, &shape);
                        c.output(r::scaled_masked_softmax(&x, m.as_ref(), scale, triu));
                        c.input(x);
                        c.opt_input(m);
                        c.arg(Arg::D(scale));
                        c.arg(Arg::B(triu));
                        c
                    })
                    .collect()
            },
        ),
        op(
            "diopiScaledMaskedSoftmaxBackward",
            sig!(T, C, C, C, D, B),
            move |rng| {
                softmax_cases()
                    .into_iter()
                    .map(|(dt, ms, with_mask)| {
                        let (mut c, x, m, triu) = softmax_input(rng, dt, ms, with_mask, &shape);
                        let y = r::scaled_masked_softmax(&x, m.as_ref(), scale, triu);
                        let go = rand(rng, dt, &shape, -1.0, 1.0);
                        c.output(r::scaled_masked_softmax_backward(
                            &go,
                            &y,
                            m.as_ref(),
                            scale,
                            triu,
                        ));
                        c.input(go);
                        c.input(y);
                        c.opt_input(m);
                        c.arg(Arg::D(scale));
                        c.arg(Arg::B(triu));
                        c
                    })
                    .collect()
            },
        ),
    ]
}

/// Every op of this group.
pub(crate) fn ops() -> Vec<Op> {
    let mut v = rms_ops();
    v.push(rotary_op());
    v.extend(softmax_ops());
    v
}
