//! The op table: one entry per DIOPI function with its C signature and its
//! cases (inputs built from a seeded generator, expectations from the
//! references in `refs`).

mod arith;
mod conv_norm;
mod extra;
mod llm;
mod misc;
mod pool_loss;
mod reduce;
mod unary;

use super::case::{Arg, Case, Scalar};
use super::dtype::Dtype;
use super::ffi_call::Sig;
use super::rng::Rng;
use super::tensor::{numel, HostTensor};

/// Builds an op's cases.
pub(crate) type CaseFn = Box<dyn Fn(&mut Rng) -> Vec<Case>>;

/// One DIOPI function under test.
pub(crate) struct Op {
    /// The symbol (`diopiAdd`).
    pub(crate) name: &'static str,
    /// Its C signature after the context.
    pub(crate) sig: Sig,
    /// Its cases.
    pub(crate) cases: CaseFn,
}

/// An op entry.
pub(crate) fn op(
    name: &'static str,
    sig: Sig,
    cases: impl Fn(&mut Rng) -> Vec<Case> + 'static,
) -> Op {
    Op {
        name,
        sig,
        cases: Box::new(cases),
    }
}

/// Every op of the contract's list, then the other ops of
/// include/diopi/functions.h.
pub(crate) fn all() -> Vec<Op> {
    let mut ops = Vec::new();
    ops.extend(arith::ops());
    ops.extend(unary::ops());
    ops.extend(reduce::ops());
    ops.extend(conv_norm::ops());
    ops.extend(pool_loss::ops());
    ops.extend(misc::ops());
    ops.extend(arith::extra_ops());
    ops.extend(unary::extra_ops());
    ops.extend(extra::ops());
    ops.extend(llm::ops());
    ops
}

/// How a binary op takes its second operand and extra scalars.
#[derive(Clone, Copy)]
pub(crate) enum Form {
    /// `(out, a, b)`.
    Out,
    /// `(a, b)`, `a` in place.
    Inp,
    /// `(out, a, scalar b)`.
    Scalar,
    /// `(a, scalar b)`, `a` in place.
    InpScalar,
}

/// Float dtypes of elementwise, matmul and softmax cases.
pub(crate) const FLOATS: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Uniform values in `[lo, hi)` of `dt` (integers: truncated).
pub(crate) fn rand(rng: &mut Rng, dt: Dtype, shape: &[i64], lo: f64, hi: f64) -> HostTensor {
    HostTensor::new(dt, shape, rng.vec(numel(shape), lo, hi))
}

/// Integers in `[lo, hi)` as `dt`.
pub(crate) fn rand_int(rng: &mut Rng, dt: Dtype, shape: &[i64], lo: i64, hi: i64) -> HostTensor {
    let data = (0..numel(shape)).map(|_| rng.int(lo, hi) as f64).collect();
    HostTensor::new(dt, shape, data)
}

/// Distinct values (a shuffled ramp scaled into `[-1, 1]`): no ties for
/// max/min/argmax/pooling.
pub(crate) fn distinct(rng: &mut Rng, dt: Dtype, shape: &[i64]) -> HostTensor {
    let n = numel(shape);
    let mut v: Vec<f64> = (0..n)
        .map(|i| (i as f64 + 0.5) / n.max(1) as f64 * 2.0 - 1.0)
        .collect();
    for i in (1..n).rev() {
        let j = rng.int(0, i as i64 + 1) as usize;
        v.swap(i, j);
    }
    HostTensor::new(dt, shape, v)
}

/// A float scalar argument.
pub(crate) fn sf(v: f64) -> Arg {
    Arg::S(Scalar::Float(v))
}

/// Shapes for unary cases of `dt`: 2-D, 0-dim, empty and 3-D for float32.
pub(crate) fn unary_shapes(dt: Dtype) -> Vec<Vec<i64>> {
    if dt == Dtype::F32 {
        vec![vec![3, 4], vec![], vec![0, 3], vec![2, 3, 5]]
    } else {
        vec![vec![3, 4]]
    }
}

/// Shape pairs for binary cases: same, broadcast, 0-dim with 1-D, empty.
pub(crate) fn binary_shapes(dt: Dtype) -> Vec<(Vec<i64>, Vec<i64>)> {
    if dt == Dtype::F32 {
        vec![
            (vec![3, 4], vec![3, 4]),
            (vec![3, 4], vec![4]),
            (vec![2, 1, 3], vec![4, 1]),
            (vec![5], vec![]),
            (vec![0, 3], vec![0, 3]),
        ]
    } else {
        vec![(vec![3, 4], vec![3, 4]), (vec![3, 4], vec![4])]
    }
}
