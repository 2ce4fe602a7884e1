//! Fused functions of large language models (DIOPI's `functions_ext.h`):
//! RMS normalisation, rotary position embedding and scaled masked softmax,
//! forward and backward. Every kernel reads its inputs as f64, computes in
//! f64 (so f16/bf16/f32 inputs accumulate in more than fp32) and rounds
//! once into the output's dtype.

use crate::view::{read, read_bcast, write, TView};

/// The value a hidden score takes before the softmax, as DIOPI specifies.
pub const MASKED_SCORE: f64 = -10000.0;

/// RMS norm over the trailing `d` elements of each row of `x`:
/// `out = x * inv_rms * weight + bias` with
/// `inv_rms = 1 / sqrt(mean(x²) + eps)` per row, saved when given.
pub fn rms_norm(
    out: &TView,
    inv_rms: Option<&TView>,
    x: &TView,
    w: Option<&TView>,
    b: Option<&TView>,
    d: usize,
    eps: f64,
) {
    let xs = read::<f64>(x);
    let rows = xs.len().checked_div(d).unwrap_or(0);
    let ws = w.map(|t| read::<f64>(t).into_owned());
    let bs = b.map(|t| read::<f64>(t).into_owned());
    let mut o = vec![0f64; xs.len()];
    let mut inv = vec![0f64; rows];
    if let Some(per) = 8192usize.checked_div(d) {
        let per = per.max(1);
        crate::par::chunks2_each(
            &mut o,
            per * d,
            &mut inv,
            per,
            xs.len() * 4,
            |blk, dsts, rs| {
                for (k, (dst, r)) in dsts.chunks_mut(d).zip(rs.iter_mut()).enumerate() {
                    let src = &xs[(blk * per + k) * d..][..d];
                    let ms = src.iter().map(|v| v * v).sum::<f64>() / d as f64;
                    *r = 1.0 / (ms + eps).sqrt();
                    for (j, (dv, &v)) in dst.iter_mut().zip(src).enumerate() {
                        let wj = ws.as_ref().map_or(1.0, |w| w[j]);
                        let bj = bs.as_ref().map_or(0.0, |b| b[j]);
                        *dv = v * *r * wj + bj;
                    }
                }
            },
        );
    }
    write(out, &o);
    if let Some(t) = inv_rms {
        write(t, &inv);
    }
}

/// Gradients of [`rms_norm`] from the saved `inv_rms`; each output optional.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_backward(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    go: &TView,
    x: &TView,
    w: Option<&TView>,
    inv_rms: &TView,
    d: usize,
) {
    let xs = read::<f64>(x);
    let gs = read::<f64>(go);
    let rs = read::<f64>(inv_rms);
    let rows = xs.len().checked_div(d).unwrap_or(0);
    let ws = w
        .map(|t| read::<f64>(t).into_owned())
        .unwrap_or_else(|| vec![1.0; d]);
    if let Some(gi) = gi {
        let mut out = vec![0f64; rows * d];
        if let Some(per) = 8192usize.checked_div(d) {
            let per = per.max(1);
            crate::par::chunks_each(&mut out, per * d, rows * d * 4, |blk, dsts| {
                for (k, dst) in dsts.chunks_mut(d).enumerate() {
                    let r = blk * per + k;
                    let ir = rs[r];
                    let (xr, gr) = (&xs[r * d..][..d], &gs[r * d..][..d]);
                    // mean over the row of (grad_output * weight) * x̂
                    let dot = xr
                        .iter()
                        .zip(gr)
                        .zip(&ws)
                        .map(|((x, g), w)| g * w * x * ir)
                        .sum::<f64>()
                        / d as f64;
                    for (((dv, x), g), w) in dst.iter_mut().zip(xr).zip(gr).zip(&ws) {
                        *dv = ir * (g * w - x * ir * dot);
                    }
                }
            });
        }
        write(gi, &out);
    }
    if gw.is_none() && gb.is_none() {
        return;
    }
    let (mut sw, mut sb) = (vec![0f64; d], vec![0f64; d]);
    for r in 0..rows {
        let ir = rs[r];
        for j in 0..d {
            let g = gs[r * d + j];
            sw[j] += g * xs[r * d + j] * ir;
            sb[j] += g;
        }
    }
    if let Some(t) = gw {
        write(t, &sw);
    }
    if let Some(t) = gb {
        write(t, &sb);
    }
}

/// Rotary embedding of `x`'s last dimension (even length `dim`) into `out`
/// (which may alias `x`). `cos`/`sin` have last dimension `dim / 2` and
/// broadcast against `x[..., :dim/2]`. Halves are paired (GPT-NeoX) or,
/// with `interleaved`, neighbours (GPT-J); `conj` rotates by the opposite
/// angle (the backward).
pub fn rotary(out: &TView, x: &TView, cos: &TView, sin: &TView, conj: bool, interleaved: bool) {
    let shape = x.shape().to_vec();
    let n = x.numel();
    if n == 0 {
        return;
    }
    let dim = shape[shape.len() - 1] as usize;
    let half = dim / 2;
    let mut hshape = shape.clone();
    *hshape.last_mut().expect("x has a last dimension") = half as i64;
    let xs = read::<f64>(x).into_owned();
    let cs = read_bcast::<f64>(cos, &hshape);
    let ss = read_bcast::<f64>(sin, &hshape);
    let sign = if conj { -1.0 } else { 1.0 };
    let mut o = vec![0f64; n];
    for ((orow, xrow), (crow, srow)) in o
        .chunks_mut(dim)
        .zip(xs.chunks(dim))
        .zip(cs.chunks(half).zip(ss.chunks(half)))
    {
        for i in 0..half {
            let (a, b) = if interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half)
            };
            let (c, s) = (crow[i], sign * srow[i]);
            orow[a] = xrow[a] * c - xrow[b] * s;
            orow[b] = xrow[a] * s + xrow[b] * c;
        }
    }
    write(out, &o);
}

/// Whether position `(row, col)` of the last two dimensions is hidden by
/// the fixed causal mask.
fn triu_hidden(i: usize, cols: usize, rows: usize) -> bool {
    let row = (i / cols) % rows.max(1);
    i % cols > row
}

/// The hidden flags of `shape`'s elements: the causal mask over the last
/// two dimensions, or `mask` (true = hide) broadcast to `shape`.
fn hidden_flags(shape: &[i64], mask: Option<&TView>, triu: bool) -> Vec<bool> {
    let n: usize = shape.iter().product::<i64>() as usize;
    let cols = *shape.last().unwrap_or(&1) as usize;
    let rows = if shape.len() >= 2 {
        shape[shape.len() - 2] as usize
    } else {
        1
    };
    if triu {
        (0..n).map(|i| triu_hidden(i, cols, rows)).collect()
    } else if let Some(m) = mask {
        read_bcast::<f64>(m, shape)
            .iter()
            .map(|&v| v != 0.0)
            .collect()
    } else {
        vec![false; n]
    }
}

/// `softmax(masked_fill(input * scale, hidden, -10000))` over the last
/// dimension into `out`.
pub fn scaled_masked_softmax(out: &TView, x: &TView, mask: Option<&TView>, scale: f64, triu: bool) {
    let shape = x.shape().to_vec();
    let cols = *shape.last().unwrap_or(&1) as usize;
    let xs = read::<f64>(x);
    let hid = hidden_flags(&shape, mask, triu);
    let mut o: Vec<f64> = xs
        .iter()
        .zip(&hid)
        .map(|(&v, &h)| if h { MASKED_SCORE } else { v * scale })
        .collect();
    if cols > 0 {
        for row in o.chunks_mut(cols) {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for v in row.iter_mut() {
                *v = (*v - m).exp();
                sum += *v;
            }
            for v in row.iter_mut() {
                *v /= sum;
            }
        }
    }
    write(out, &o);
}

/// Gradient of [`scaled_masked_softmax`] from its output `y`:
/// `scale * y * (g - Σ g·y)` over the last dimension, 0 where hidden.
pub fn scaled_masked_softmax_backward(
    gi: &TView,
    go: &TView,
    y: &TView,
    mask: Option<&TView>,
    scale: f64,
    triu: bool,
) {
    let shape = y.shape().to_vec();
    let cols = *shape.last().unwrap_or(&1) as usize;
    let gs = read::<f64>(go);
    let ys = read::<f64>(y);
    let hid = hidden_flags(&shape, mask, triu);
    let mut o = vec![0f64; ys.len()];
    if cols > 0 {
        for (r, row) in o.chunks_mut(cols).enumerate() {
            let base = r * cols;
            let dot: f64 = (0..cols).map(|j| gs[base + j] * ys[base + j]).sum();
            for (j, v) in row.iter_mut().enumerate() {
                let k = base + j;
                *v = if hid[k] {
                    0.0
                } else {
                    scale * ys[k] * (gs[k] - dot)
                };
            }
        }
    }
    write(gi, &o);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::dtype;
    use crate::view::testutil::*;

    #[test]
    fn rms_norm_of_a_row_without_weight() {
        let mut x = vec![3.0f32, 4.0];
        let xv = f32v(&mut x, &[1, 2]);
        let (mut o, mut r) = (vec![0f32; 2], vec![0f32; 1]);
        let (ov, rv) = (f32v(&mut o, &[1, 2]), f32v(&mut r, &[1]));
        rms_norm(&ov, Some(&rv), &xv, None, None, 2, 0.0);
        let inv = 1.0 / 12.5f32.sqrt();
        close(&r, &[inv], 2);
        close(&o, &[3.0 * inv, 4.0 * inv], 2);
    }

    #[test]
    fn rotary_then_its_conjugate_is_the_identity() {
        let mut x: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let xv = f32v(&mut x, &[2, 4]);
        let (mut c, mut s) = (vec![0.6f32, 0.8], vec![0.8f32, -0.6]);
        let (cv, sv) = (f32v(&mut c, &[1, 2]), f32v(&mut s, &[1, 2]));
        for interleaved in [false, true] {
            let mut y = vec![0f32; 8];
            let yv = f32v(&mut y, &[2, 4]);
            rotary(&yv, &xv, &cv, &sv, false, interleaved);
            assert_ne!(y, x);
            rotary(&yv, &yv, &cv, &sv, true, interleaved);
            close(&y, &x, 2);
        }
    }

    #[test]
    fn causal_softmax_hides_the_upper_triangle() {
        let mut x = vec![1.0f32; 4];
        let xv = f32v(&mut x, &[2, 2]);
        let mut o = vec![0f32; 4];
        let ov = f32v(&mut o, &[2, 2]);
        scaled_masked_softmax(&ov, &xv, None, 2.0, true);
        close(&o, &[1.0, 0.0, 0.5, 0.5], 2);
        let mut m = [0u8, 1, 0, 0];
        let mv = view_of(&mut m, dtype::BOOL, &[2, 2], &[2, 1]);
        scaled_masked_softmax(&ov, &xv, Some(&mv), 2.0, false);
        close(&o, &[1.0, 0.0, 0.5, 0.5], 2);
    }
}
