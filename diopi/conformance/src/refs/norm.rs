//! Batch and layer normalisation, forward and backward.

use super::numeric_vjp;
use crate::tensor::HostTensor;

/// (channels, elements per channel per sample) of an [N, C, ...] tensor.
fn channel_split(shape: &[i64]) -> (usize, usize, usize) {
    let n = shape[0] as usize;
    let c = shape[1] as usize;
    let inner = shape[2..].iter().product::<i64>() as usize;
    (n, c, inner)
}

/// Per-channel (mean, biased variance) of [N, C, ...] values `x`.
fn channel_stats(x: &[f64], shape: &[i64]) -> Vec<(f64, f64)> {
    let (n, c, inner) = channel_split(shape);
    (0..c)
        .map(|ch| {
            let vals: Vec<f64> = (0..n)
                .flat_map(|b| (0..inner).map(move |i| (b * c + ch) * inner + i))
                .map(|k| x[k])
                .collect();
            let m = vals.iter().sum::<f64>() / vals.len() as f64;
            let v = vals.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / vals.len() as f64;
            (m, v)
        })
        .collect()
}

/// Normalises `x` per channel with `(mean, invstd)` and applies the affine
/// `weight`/`bias` (absent: 1/0).
fn bn_apply(
    x: &[f64],
    shape: &[i64],
    stats: &[(f64, f64)],
    w: Option<&[f64]>,
    b: Option<&[f64]>,
) -> Vec<f64> {
    let (_, c, inner) = channel_split(shape);
    x.iter()
        .enumerate()
        .map(|(k, v)| {
            let ch = (k / inner) % c;
            let (m, invstd) = stats[ch];
            (v - m) * invstd * w.map_or(1.0, |w| w[ch]) + b.map_or(0.0, |b| b[ch])
        })
        .collect()
}

/// BatchNorm results: out, save_mean, save_invstd, new running mean/var.
pub(crate) struct BatchNormOut {
    /// Normalised output.
    pub(crate) out: HostTensor,
    /// Batch mean per channel (training).
    pub(crate) save_mean: HostTensor,
    /// Batch 1/sqrt(var+eps) per channel (training).
    pub(crate) save_invstd: HostTensor,
    /// Updated running mean (training) or unchanged.
    pub(crate) running_mean: HostTensor,
    /// Updated running var (training, unbiased batch variance) or unchanged.
    pub(crate) running_var: HostTensor,
}

/// BatchNorm forward in training or eval mode.
#[allow(clippy::too_many_arguments)]
pub(crate) fn batch_norm(
    x: &HostTensor,
    w: Option<&HostTensor>,
    b: Option<&HostTensor>,
    rm: &HostTensor,
    rv: &HostTensor,
    training: bool,
    momentum: f64,
    eps: f64,
) -> BatchNormOut {
    let (n, c, inner) = channel_split(&x.shape);
    let dt = x.dtype;
    let stats: Vec<(f64, f64)> = if training {
        channel_stats(&x.data, &x.shape)
    } else {
        (0..c).map(|ch| (rm.data[ch], rv.data[ch])).collect()
    };
    let norm: Vec<(f64, f64)> = stats
        .iter()
        .map(|&(m, v)| (m, 1.0 / (v + eps).sqrt()))
        .collect();
    let out = bn_apply(
        &x.data,
        &x.shape,
        &norm,
        w.map(|t| &t.data[..]),
        b.map(|t| &t.data[..]),
    );
    let count = (n * inner) as f64;
    let (new_rm, new_rv) = if training {
        (
            (0..c)
                .map(|ch| (1.0 - momentum) * rm.data[ch] + momentum * stats[ch].0)
                .collect(),
            (0..c)
                .map(|ch| {
                    (1.0 - momentum) * rv.data[ch] + momentum * stats[ch].1 * count / (count - 1.0)
                })
                .collect(),
        )
    } else {
        (rm.data.clone(), rv.data.clone())
    };
    let cs = [c as i64];
    BatchNormOut {
        out: HostTensor::new(dt, &x.shape, out),
        save_mean: HostTensor::new(dt, &cs, norm.iter().map(|s| s.0).collect()),
        save_invstd: HostTensor::new(dt, &cs, norm.iter().map(|s| s.1).collect()),
        running_mean: HostTensor::new(rm.dtype, &cs, new_rm),
        running_var: HostTensor::new(rv.dtype, &cs, new_rv),
    }
}

/// BatchNormBackward: (grad_input, grad_weight, grad_bias). Training mode
/// differentiates through the batch statistics (numerically); eval mode
/// uses the running statistics as constants.
pub(crate) fn batch_norm_backward(
    go: &HostTensor,
    x: &HostTensor,
    w: &HostTensor,
    rm: &HostTensor,
    rv: &HostTensor,
    training: bool,
    eps: f64,
) -> (HostTensor, HostTensor, HostTensor) {
    let (_, c, inner) = channel_split(&x.shape);
    let norm_of = |xs: &[f64]| -> Vec<(f64, f64)> {
        if training {
            channel_stats(xs, &x.shape)
                .iter()
                .map(|&(m, v)| (m, 1.0 / (v + eps).sqrt()))
                .collect()
        } else {
            (0..c)
                .map(|ch| (rm.data[ch], 1.0 / (rv.data[ch] + eps).sqrt()))
                .collect()
        }
    };
    let gi = numeric_vjp(&x.data, &go.data, |xs| {
        bn_apply(xs, &x.shape, &norm_of(xs), Some(&w.data), None)
    });
    let xhat = bn_apply(&x.data, &x.shape, &norm_of(&x.data), None, None);
    let mut gw = vec![0.0; c];
    let mut gb = vec![0.0; c];
    for (k, g) in go.data.iter().enumerate() {
        let ch = (k / inner) % c;
        gw[ch] += g * xhat[k];
        gb[ch] += g;
    }
    let cs = [c as i64];
    (
        HostTensor::new(x.dtype, &x.shape, gi),
        HostTensor::new(w.dtype, &cs, gw),
        HostTensor::new(w.dtype, &cs, gb),
    )
}

/// LayerNorm over the last `k` dims: (out, mean, rstd); mean and rstd have
/// the leading dims' shape.
pub(crate) fn layer_norm(
    x: &HostTensor,
    w: Option<&HostTensor>,
    b: Option<&HostTensor>,
    k: usize,
    eps: f64,
) -> (HostTensor, HostTensor, HostTensor) {
    let lead = &x.shape[..x.ndim() - k];
    let (out, stats) = ln_apply(
        &x.data,
        x.numel(),
        lead,
        w.map(|t| &t.data[..]),
        b.map(|t| &t.data[..]),
        eps,
    );
    (
        HostTensor::new(x.dtype, &x.shape, out),
        HostTensor::new(x.dtype, lead, stats.iter().map(|s| s.0).collect()),
        HostTensor::new(x.dtype, lead, stats.iter().map(|s| s.1).collect()),
    )
}

/// Normalises rows of `x` (rows = product of `lead`), affine by `w`, `b`.
fn ln_apply(
    x: &[f64],
    n: usize,
    lead: &[i64],
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    eps: f64,
) -> (Vec<f64>, Vec<(f64, f64)>) {
    let rows = lead.iter().product::<i64>() as usize;
    let len = n / rows.max(1);
    let mut out = vec![0.0; n];
    let mut stats = Vec::with_capacity(rows);
    for r in 0..rows {
        let row = &x[r * len..][..len];
        let m = row.iter().sum::<f64>() / len as f64;
        let v = row.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / len as f64;
        let rstd = 1.0 / (v + eps).sqrt();
        for (j, xv) in row.iter().enumerate() {
            out[r * len + j] = (xv - m) * rstd * w.map_or(1.0, |w| w[j]) + b.map_or(0.0, |b| b[j]);
        }
        stats.push((m, rstd));
    }
    (out, stats)
}

/// LayerNormBackward: (grad_input, grad_weight, grad_bias).
pub(crate) fn layer_norm_backward(
    go: &HostTensor,
    x: &HostTensor,
    w: &HostTensor,
    k: usize,
    eps: f64,
) -> (HostTensor, HostTensor, HostTensor) {
    let lead = &x.shape[..x.ndim() - k];
    let n = x.numel();
    let gi = numeric_vjp(&x.data, &go.data, |xs| {
        ln_apply(xs, n, lead, Some(&w.data), None, eps).0
    });
    let (xhat, _) = ln_apply(&x.data, n, lead, None, None, eps);
    let len = w.numel();
    let mut gw = vec![0.0; len];
    let mut gb = vec![0.0; len];
    for (i, g) in go.data.iter().enumerate() {
        gw[i % len] += g * xhat[i];
        gb[i % len] += g;
    }
    (
        HostTensor::new(x.dtype, &x.shape, gi),
        HostTensor::new(w.dtype, &w.shape, gw),
        HostTensor::new(w.dtype, &w.shape, gb),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;

    #[test]
    fn normalisation_by_hand() {
        // Channel 0: 1, 3 -> mean 2, var 1; channel 1: 2, 6 -> mean 4, var 4.
        let x = HostTensor::new(Dtype::F64, &[2, 2], vec![1.0, 2.0, 3.0, 6.0]);
        let rm = HostTensor::new(Dtype::F64, &[2], vec![0.0, 0.0]);
        let rv = HostTensor::new(Dtype::F64, &[2], vec![1.0, 1.0]);
        let r = batch_norm(&x, None, None, &rm, &rv, true, 0.1, 0.0);
        assert_eq!(r.out.data, vec![-1.0, -1.0, 1.0, 1.0]);
        assert_eq!(r.save_mean.data, vec![2.0, 4.0]);
        assert_eq!(r.save_invstd.data, vec![1.0, 0.5]);
        assert_eq!(r.running_mean.data, vec![0.2, 0.4]);
        // unbiased vars 2 and 8
        assert!(
            (r.running_var.data[0] - 1.1).abs() < 1e-15
                && (r.running_var.data[1] - 1.7).abs() < 1e-15
        );
        let (y, m, s) = layer_norm(&x, None, None, 1, 0.0);
        assert_eq!(y.data, vec![-1.0, 1.0, -1.0, 1.0]);
        assert_eq!((m.data, s.data), (vec![1.5, 4.5], vec![2.0, 2.0 / 3.0]));
        // The gradient of a normalised row against a constant go is 0.
        let go = HostTensor::new(Dtype::F64, &[2, 2], vec![1.0; 4]);
        let w = HostTensor::new(Dtype::F64, &[2], vec![1.0, 1.0]);
        let (gi, gw, gb) = layer_norm_backward(&go, &x, &w, 1, 1e-5);
        assert!(gi.data.iter().all(|g| g.abs() < 1e-6), "{gi:?}");
        assert_eq!(gb.data, vec![2.0, 2.0]);
        assert!(
            (gw.data[0] + 2.0).abs() < 1e-4 && (gw.data[1] - 2.0).abs() < 1e-4,
            "{gw:?}"
        );
    }
}
