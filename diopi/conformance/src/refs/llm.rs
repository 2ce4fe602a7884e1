//! References of DIOPI's fused LLM functions (`functions_ext.h`): RMS norm,
//! rotary embedding, scaled masked softmax, in f64 loops.

use super::broadcast_index;
use crate::dtype::Dtype;
use crate::tensor::HostTensor;

/// RMSNorm over the last `k` dims: (out, inv_rms); inv_rms has the leading
/// dims' shape and dtype `stat` (float32 for half inputs).
pub(crate) fn rms_norm(
    x: &HostTensor,
    w: Option<&HostTensor>,
    b: Option<&HostTensor>,
    k: usize,
    eps: f64,
    stat: Dtype,
) -> (HostTensor, HostTensor) {
    let lead = &x.shape[..x.ndim() - k];
    let rows: usize = lead.iter().product::<i64>() as usize;
    let len = x.numel() / rows.max(1);
    let mut out = vec![0.0; x.numel()];
    let mut inv = vec![0.0; rows];
    for r in 0..rows {
        let mut sq = 0.0;
        for j in 0..len {
            sq += x.data[r * len + j] * x.data[r * len + j];
        }
        let rms = (sq / len as f64 + eps).sqrt();
        inv[r] = 1.0 / rms;
        for j in 0..len {
            let mut v = x.data[r * len + j] / rms;
            if let Some(w) = w {
                v *= w.data[j];
            }
            if let Some(b) = b {
                v += b.data[j];
            }
            out[r * len + j] = v;
        }
    }
    (
        HostTensor::new(x.dtype, &x.shape, out),
        HostTensor::new(stat, lead, inv),
    )
}

/// RMSNormBackward from the saved `inv` (one per row): (grad_input,
/// grad_weight, grad_bias), by the chain rule through
/// `y_j = w_j x_j r` and `dr/dx_k = -r³ x_k / len`.
pub(crate) fn rms_norm_backward(
    go: &HostTensor,
    x: &HostTensor,
    w: &HostTensor,
    inv: &HostTensor,
) -> (HostTensor, HostTensor, HostTensor) {
    let len = w.numel();
    let rows = x.numel() / len.max(1);
    let mut gi = vec![0.0; x.numel()];
    let mut gw = vec![0.0; len];
    let mut gb = vec![0.0; len];
    for r in 0..rows {
        let ir = inv.data[r];
        let at = |j: usize| r * len + j;
        let mut s = 0.0;
        for j in 0..len {
            s += go.data[at(j)] * w.data[j] * x.data[at(j)];
        }
        for k in 0..len {
            gi[at(k)] =
                go.data[at(k)] * w.data[k] * ir - ir * ir * ir * x.data[at(k)] * s / len as f64;
            gw[k] += go.data[at(k)] * x.data[at(k)] * ir;
            gb[k] += go.data[at(k)];
        }
    }
    (
        HostTensor::new(x.dtype, &x.shape, gi),
        HostTensor::new(w.dtype, &w.shape, gw),
        HostTensor::new(w.dtype, &w.shape, gb),
    )
}

/// Rotary embedding: each pair `(a, b)` of the last dim (halves, or
/// neighbours when `interleaved`) is multiplied as the complex number
/// `a + ib` by `cos + i·sin` (`cos − i·sin` when `conj`).
pub(crate) fn rotary(
    x: &HostTensor,
    cos: &HostTensor,
    sin: &HostTensor,
    conj: bool,
    interleaved: bool,
) -> HostTensor {
    let dim = *x.shape.last().expect("x has a last dim") as usize;
    let half = dim / 2;
    let mut hshape = x.shape.clone();
    *hshape.last_mut().expect("x has a last dim") = half as i64;
    let ci = broadcast_index(&cos.shape, &hshape);
    let si = broadcast_index(&sin.shape, &hshape);
    let mut out = vec![0.0; x.numel()];
    let rows = x.numel() / dim.max(1);
    for r in 0..rows {
        for i in 0..half {
            let (pa, pb) = if interleaved {
                (r * dim + 2 * i, r * dim + 2 * i + 1)
            } else {
                (r * dim + i, r * dim + half + i)
            };
            let (re, im) = (x.data[pa], x.data[pb]);
            let c = cos.data[ci[r * half + i]];
            let s = sin.data[si[r * half + i]] * if conj { -1.0 } else { 1.0 };
            out[pa] = re * c - im * s;
            out[pb] = re * s + im * c;
        }
    }
    HostTensor::new(x.dtype, &x.shape, out)
}

/// Whether each element of `shape` is hidden: above the diagonal of the
/// last two dims when `triu`, else where `mask` (broadcast) is true.
fn hidden(shape: &[i64], mask: Option<&HostTensor>, triu: bool) -> Vec<bool> {
    let n: usize = shape.iter().product::<i64>() as usize;
    let cols = shape[shape.len() - 1] as usize;
    let rows = shape[shape.len() - 2] as usize;
    if triu {
        return (0..n).map(|e| e % cols > (e / cols) % rows).collect();
    }
    let m = mask.expect("a mask without triu");
    broadcast_index(&m.shape, shape)
        .into_iter()
        .map(|i| m.data[i] != 0.0)
        .collect()
}

/// ScaledMaskedSoftmax: softmax over the last dim of `x·scale`, hidden
/// scores replaced by −10000.
pub(crate) fn scaled_masked_softmax(
    x: &HostTensor,
    mask: Option<&HostTensor>,
    scale: f64,
    triu: bool,
) -> HostTensor {
    let hid = hidden(&x.shape, mask, triu);
    let cols = *x.shape.last().expect("x has a last dim") as usize;
    let mut out = vec![0.0; x.numel()];
    for r in 0..x.numel() / cols.max(1) {
        let score = |j: usize| {
            if hid[r * cols + j] {
                -10000.0
            } else {
                x.data[r * cols + j] * scale
            }
        };
        let top = (0..cols).map(score).fold(f64::MIN, f64::max);
        let total: f64 = (0..cols).map(|j| (score(j) - top).exp()).sum();
        for j in 0..cols {
            out[r * cols + j] = (score(j) - top).exp() / total;
        }
    }
    HostTensor::new(x.dtype, &x.shape, out)
}

/// ScaledMaskedSoftmaxBackward from the output `y`: the softmax Jacobian
/// `y_j (δ_jk − y_k)` times `scale`, zero at hidden inputs.
pub(crate) fn scaled_masked_softmax_backward(
    go: &HostTensor,
    y: &HostTensor,
    mask: Option<&HostTensor>,
    scale: f64,
    triu: bool,
) -> HostTensor {
    let hid = hidden(&y.shape, mask, triu);
    let cols = *y.shape.last().expect("y has a last dim") as usize;
    let mut gi = vec![0.0; y.numel()];
    for r in 0..y.numel() / cols.max(1) {
        for k in 0..cols {
            if hid[r * cols + k] {
                continue;
            }
            let mut acc = 0.0;
            for j in 0..cols {
                let jac = y.data[r * cols + j] * (f64::from(j == k) - y.data[r * cols + k]);
                acc += go.data[r * cols + j] * jac;
            }
            gi[r * cols + k] = scale * acc;
        }
    }
    HostTensor::new(y.dtype, &y.shape, gi)
}
