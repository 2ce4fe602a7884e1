//! NLL and cross-entropy losses, forward and backward.

use super::{nn::softmax, numeric_vjp};
use crate::tensor::HostTensor;

/// Reduction codes of `diopiReduction_t`.
pub(crate) const NONE: i32 = 0;
/// Mean.
pub(crate) const MEAN: i32 = 1;
/// Sum.
pub(crate) const SUM: i32 = 2;

/// Loss attributes shared by the forward and backward references.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LossOpts {
    /// `diopiReduction_t`.
    pub(crate) reduction: i32,
    /// Target value that contributes nothing.
    pub(crate) ignore_index: i64,
    /// Cross-entropy label smoothing.
    pub(crate) smoothing: f64,
}

/// Per-element NLL terms of log-probabilities `lp` [N, C, d...] and the
/// weight each counts with: (loss, weight) per target element.
fn nll_terms(
    lp: &[f64],
    shape: &[i64],
    target: &[f64],
    w: Option<&[f64]>,
    o: &LossOpts,
) -> Vec<(f64, f64)> {
    let c = shape[1] as usize;
    let inner = shape[2..].iter().product::<i64>() as usize;
    target
        .iter()
        .enumerate()
        .map(|(k, &t)| {
            let t = t as i64;
            if t == o.ignore_index {
                return (0.0, 0.0);
            }
            let (b, i) = (k / inner, k % inner);
            let wt = w.map_or(1.0, |w| w[t as usize]);
            (-wt * lp[(b * c + t as usize) * inner + i], wt)
        })
        .collect()
}

/// Applies the reduction to per-element losses with their weights.
fn reduce(terms: &[(f64, f64)], reduction: i32) -> Vec<f64> {
    match reduction {
        NONE => terms.iter().map(|t| t.0).collect(),
        SUM => vec![terms.iter().map(|t| t.0).sum()],
        _ => vec![terms.iter().map(|t| t.0).sum::<f64>() / terms.iter().map(|t| t.1).sum::<f64>()],
    }
}

/// NLLLoss on raw values (input log-probabilities).
fn nll_raw(lp: &[f64], shape: &[i64], target: &[f64], w: Option<&[f64]>, o: &LossOpts) -> Vec<f64> {
    reduce(&nll_terms(lp, shape, target, w, o), o.reduction)
}

/// Cross-entropy on raw logits, with label smoothing as PyTorch:
/// `(1-ε)·nll + ε/C · smooth`, `smooth_n = -Σ_c w_c logp[n,c]` (0 where
/// ignored), reduced like nll (mean divides by the targets' weight sum,
/// without weights by the number of targets not ignored).
fn ce_raw(x: &[f64], shape: &[i64], target: &[f64], w: Option<&[f64]>, o: &LossOpts) -> Vec<f64> {
    let t = HostTensor::new(crate::dtype::Dtype::F64, shape, x.to_vec());
    let lp = softmax(&t, 1, true).data;
    let nll = nll_raw(&lp, shape, target, w, o);
    if o.smoothing == 0.0 {
        return nll;
    }
    let c = shape[1] as usize;
    let inner = shape[2..].iter().product::<i64>() as usize;
    let smooth: Vec<f64> = target
        .iter()
        .enumerate()
        .map(|(k, &tv)| {
            if tv as i64 == o.ignore_index {
                return 0.0;
            }
            let (b, i) = (k / inner, k % inner);
            -(0..c)
                .map(|ch| w.map_or(1.0, |w| w[ch]) * lp[(b * c + ch) * inner + i])
                .sum::<f64>()
        })
        .collect();
    let sm: Vec<f64> = match o.reduction {
        NONE => smooth,
        SUM => vec![smooth.iter().sum()],
        _ => match w {
            Some(_) => {
                let wsum: f64 = nll_terms(&lp, shape, target, w, o)
                    .iter()
                    .map(|t| t.1)
                    .sum();
                vec![smooth.iter().sum::<f64>() / wsum]
            }
            None => {
                let kept = target
                    .iter()
                    .filter(|&&t| t as i64 != o.ignore_index)
                    .count();
                vec![smooth.iter().sum::<f64>() / kept as f64]
            }
        },
    };
    nll.iter()
        .zip(&sm)
        .map(|(n, s)| (1.0 - o.smoothing) * n + s * o.smoothing / c as f64)
        .collect()
}

/// Output shape of a loss: the target's for `NONE`, else 0-dim.
fn loss_shape(target: &HostTensor, reduction: i32) -> Vec<i64> {
    if reduction == NONE {
        target.shape.clone()
    } else {
        Vec::new()
    }
}

/// NLLLoss.
pub(crate) fn nll_loss(
    x: &HostTensor,
    target: &HostTensor,
    w: Option<&HostTensor>,
    o: &LossOpts,
) -> HostTensor {
    let v = nll_raw(&x.data, &x.shape, &target.data, w.map(|t| &t.data[..]), o);
    HostTensor::new(x.dtype, &loss_shape(target, o.reduction), v)
}

/// NLLLossBackward (the loss is linear in the input: exact by differences).
pub(crate) fn nll_loss_backward(
    go: &HostTensor,
    x: &HostTensor,
    target: &HostTensor,
    w: Option<&HostTensor>,
    o: &LossOpts,
) -> HostTensor {
    let g = numeric_vjp(&x.data, &go.data, |xs| {
        nll_raw(xs, &x.shape, &target.data, w.map(|t| &t.data[..]), o)
    });
    HostTensor::new(x.dtype, &x.shape, g)
}

/// CrossEntropyLoss.
pub(crate) fn cross_entropy(
    x: &HostTensor,
    target: &HostTensor,
    w: Option<&HostTensor>,
    o: &LossOpts,
) -> HostTensor {
    let v = ce_raw(&x.data, &x.shape, &target.data, w.map(|t| &t.data[..]), o);
    HostTensor::new(x.dtype, &loss_shape(target, o.reduction), v)
}

/// CrossEntropyLossBackward.
pub(crate) fn cross_entropy_backward(
    go: &HostTensor,
    x: &HostTensor,
    target: &HostTensor,
    w: Option<&HostTensor>,
    o: &LossOpts,
) -> HostTensor {
    let g = numeric_vjp(&x.data, &go.data, |xs| {
        ce_raw(xs, &x.shape, &target.data, w.map(|t| &t.data[..]), o)
    });
    HostTensor::new(x.dtype, &x.shape, g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;

    #[test]
    fn losses_by_hand() {
        let lp = HostTensor::new(Dtype::F64, &[2, 2], vec![-1.0, -2.0, -3.0, -4.0]);
        let t = HostTensor::new(Dtype::I64, &[2], vec![1.0, 0.0]);
        let w = HostTensor::new(Dtype::F64, &[2], vec![1.0, 3.0]);
        let o = |r, ii| LossOpts {
            reduction: r,
            ignore_index: ii,
            smoothing: 0.0,
        };
        assert_eq!(nll_loss(&lp, &t, None, &o(NONE, -100)).data, vec![2.0, 3.0]);
        assert_eq!(
            nll_loss(&lp, &t, Some(&w), &o(MEAN, -100)).data,
            vec![(6.0 + 3.0) / 4.0]
        );
        assert_eq!(nll_loss(&lp, &t, None, &o(SUM, 0)).data, vec![2.0]);
        // logits [0, 0]: logp = -ln 2 for both classes.
        let z = HostTensor::new(Dtype::F64, &[1, 2], vec![0.0, 0.0]);
        let t1 = HostTensor::new(Dtype::I64, &[1], vec![1.0]);
        let ce = cross_entropy(
            &z,
            &t1,
            None,
            &LossOpts {
                reduction: MEAN,
                ignore_index: -100,
                smoothing: 0.2,
            },
        );
        assert!((ce.data[0] - 2f64.ln()).abs() < 1e-15);
        // Smoothing, unweighted mean, the second target ignored: the mean
        // is over the one kept target (0.9 ln 2 if it were over both).
        let z2 = HostTensor::new(Dtype::F64, &[2, 2], vec![0.0; 4]);
        let t2 = HostTensor::new(Dtype::I64, &[2], vec![1.0, 0.0]);
        let o2 = LossOpts {
            reduction: MEAN,
            ignore_index: 0,
            smoothing: 0.2,
        };
        let ce2 = cross_entropy(&z2, &t2, None, &o2);
        assert!((ce2.data[0] - 2f64.ln()).abs() < 1e-15, "{ce2:?}");
        // d CE / d logits = softmax - onehot = [0.5, -0.5]
        let go = HostTensor::new(Dtype::F64, &[], vec![1.0]);
        let g = cross_entropy_backward(&go, &z, &t1, None, &o(MEAN, -100));
        assert!((g.data[0] - 0.5).abs() < 1e-8 && (g.data[1] + 0.5).abs() < 1e-8);
    }
}
