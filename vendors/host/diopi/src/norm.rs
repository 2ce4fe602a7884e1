//! Batch and layer normalisation, forward and backward. Statistics
//! accumulate in f64; values compute in f32 (f16/bf16 through f32) or f64.

use crate::elementwise::Float;
use crate::types::dtype;
use crate::view::{read, with_out, write, Num, TView};

fn is_f64(v: &TView) -> bool {
    v.dtype == dtype::F64
}

/// Batch norm of `x` ([N, C, *]) into `out`. Training: batch statistics
/// (saved as mean and 1/sqrt(var+eps)), running stats updated with the
/// unbiased variance; eval: running statistics.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    out: &TView,
    save_mean: Option<&TView>,
    save_invstd: Option<&TView>,
    x: &TView,
    w: Option<&TView>,
    b: Option<&TView>,
    rm: Option<&TView>,
    rv: Option<&TView>,
    training: bool,
    momentum: f64,
    eps: f64,
) {
    let (n, c) = (x.shape[0] as usize, x.shape[1] as usize);
    let s: usize = x.shape()[2..].iter().product::<i64>() as usize;
    let count = n * s;
    let stats: Vec<(f64, f64)> = if training {
        let xs = read::<f64>(x);
        crate::par::map_range(c, xs.len() * 2, |ch| {
            let mut sum = 0f64;
            for i in 0..n {
                sum += xs[(i * c + ch) * s..][..s].iter().sum::<f64>();
            }
            let mean = sum / count.max(1) as f64;
            let mut sq = 0f64;
            for i in 0..n {
                sq += xs[(i * c + ch) * s..][..s]
                    .iter()
                    .map(|v| (v - mean) * (v - mean))
                    .sum::<f64>();
            }
            (mean, sq / count.max(1) as f64)
        })
    } else {
        let m = rm
            .map(|t| read::<f64>(t).into_owned())
            .unwrap_or_else(|| vec![0.0; c]);
        let v = rv
            .map(|t| read::<f64>(t).into_owned())
            .unwrap_or_else(|| vec![1.0; c]);
        m.into_iter().zip(v).collect()
    };
    let invstd: Vec<f64> = stats.iter().map(|&(_, v)| 1.0 / (v + eps).sqrt()).collect();
    let ws = w
        .map(|t| read::<f64>(t).into_owned())
        .unwrap_or_else(|| vec![1.0; c]);
    let bs = b
        .map(|t| read::<f64>(t).into_owned())
        .unwrap_or_else(|| vec![0.0; c]);
    let scale: Vec<f64> = (0..c).map(|ch| ws[ch] * invstd[ch]).collect();
    let shift: Vec<f64> = (0..c).map(|ch| bs[ch] - stats[ch].0 * scale[ch]).collect();
    fn apply<C: Float>(out: &TView, x: &TView, c: usize, s: usize, scale: &[f64], shift: &[f64]) {
        let xs = read::<C>(x);
        with_out::<C>(out, &[x], |o| {
            if s == 0 {
                return;
            }
            crate::par::chunks_each(o, s, o.len() * 4, |blk, dst| {
                let ch = blk % c;
                let (a, b) = (C::from_f64(scale[ch]), C::from_f64(shift[ch]));
                for (d, &v) in dst.iter_mut().zip(&xs[blk * s..][..s]) {
                    *d = v.mul(a).add(b);
                }
            });
        });
    }
    if is_f64(out) {
        apply::<f64>(out, x, c, s, &scale, &shift)
    } else {
        apply::<f32>(out, x, c, s, &scale, &shift)
    }
    if training {
        let means: Vec<f64> = stats.iter().map(|s| s.0).collect();
        if let Some(t) = save_mean.filter(|t| t.numel() == c) {
            write(t, &means);
        }
        if let Some(t) = save_invstd.filter(|t| t.numel() == c) {
            write(t, &invstd);
        }
        let unbias = if count > 1 {
            count as f64 / (count - 1) as f64
        } else {
            1.0
        };
        if let Some(t) = rm {
            let old = read::<f64>(t).into_owned();
            let new: Vec<f64> = old
                .iter()
                .zip(&means)
                .map(|(o, m)| (1.0 - momentum) * o + momentum * m)
                .collect();
            write(t, &new);
        }
        if let Some(t) = rv {
            let old = read::<f64>(t).into_owned();
            let new: Vec<f64> = old
                .iter()
                .zip(&stats)
                .map(|(o, s)| (1.0 - momentum) * o + momentum * s.1 * unbias)
                .collect();
            write(t, &new);
        }
    }
}

/// Gradients of [`batch_norm`]; each output optional.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_backward(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    go: &TView,
    x: &TView,
    w: Option<&TView>,
    rm: Option<&TView>,
    rv: Option<&TView>,
    save_mean: Option<&TView>,
    save_invstd: Option<&TView>,
    training: bool,
    eps: f64,
) {
    let (n, c) = (x.shape[0] as usize, x.shape[1] as usize);
    let s: usize = x.shape()[2..].iter().product::<i64>() as usize;
    let count = (n * s).max(1) as f64;
    let (mean, invstd): (Vec<f64>, Vec<f64>) =
        if training && save_mean.is_some() && save_invstd.is_some() {
            (
                read::<f64>(save_mean.unwrap_or(x)).into_owned(),
                read::<f64>(save_invstd.unwrap_or(x)).into_owned(),
            )
        } else {
            let m = rm
                .map(|t| read::<f64>(t).into_owned())
                .unwrap_or_else(|| vec![0.0; c]);
            let v = rv
                .map(|t| read::<f64>(t).into_owned())
                .unwrap_or_else(|| vec![1.0; c]);
            (m, v.iter().map(|v| 1.0 / (v + eps).sqrt()).collect())
        };
    let ws = w
        .map(|t| read::<f64>(t).into_owned())
        .unwrap_or_else(|| vec![1.0; c]);
    let xs = read::<f64>(x);
    let gs = read::<f64>(go);
    let sums: Vec<(f64, f64)> = crate::par::map_range(c, xs.len() * 2, |ch| {
        let (mut sdy, mut sdyx) = (0f64, 0f64);
        for i in 0..n {
            let base = (i * c + ch) * s;
            for k in 0..s {
                let dy = gs[base + k];
                sdy += dy;
                sdyx += dy * (xs[base + k] - mean[ch]) * invstd[ch];
            }
        }
        (sdy, sdyx)
    });
    if let Some(t) = gw {
        write(t, &sums.iter().map(|p| p.1).collect::<Vec<_>>());
    }
    if let Some(t) = gb {
        write(t, &sums.iter().map(|p| p.0).collect::<Vec<_>>());
    }
    if let Some(gi) = gi {
        let mut out = vec![0f64; n * c * s];
        if s > 0 {
            crate::par::chunks_each(&mut out, s, n * c * s * 4, |blk, dst| {
                let ch = blk % c;
                let k = ws[ch] * invstd[ch];
                for (j, d) in dst.iter_mut().enumerate() {
                    let dy = gs[blk * s + j];
                    *d = if training {
                        let xh = (xs[blk * s + j] - mean[ch]) * invstd[ch];
                        k * (dy - sums[ch].0 / count - xh * sums[ch].1 / count)
                    } else {
                        k * dy
                    };
                }
            });
        }
        write(gi, &out);
    }
}

/// Layer norm over the trailing `d` elements of each row of `x`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    out: &TView,
    save_mean: Option<&TView>,
    save_rstd: Option<&TView>,
    x: &TView,
    w: Option<&TView>,
    b: Option<&TView>,
    d: usize,
    eps: f64,
) {
    #[allow(clippy::too_many_arguments)]
    fn go<C: Float>(
        out: &TView,
        sm: Option<&TView>,
        sr: Option<&TView>,
        x: &TView,
        w: Option<&TView>,
        b: Option<&TView>,
        d: usize,
        eps: f64,
    ) {
        let xs = read::<C>(x);
        let rows = xs.len().checked_div(d).unwrap_or(0);
        let ws = w.map(|t| read::<C>(t).into_owned());
        let bs = b.map(|t| read::<C>(t).into_owned());
        let mut stats = vec![(0f64, 0f64); rows];
        with_out::<C>(out, &[x], |o| {
            if d == 0 {
                return;
            }
            // blocks of rows per task: rayon's overhead stays small next to the work
            let per = (8192 / d).max(1);
            crate::par::chunks2_each(
                o,
                per * d,
                &mut stats,
                per,
                xs.len() * 8,
                |blk, dsts, sts| {
                    for (k, (dst, st)) in dsts.chunks_mut(d).zip(sts.iter_mut()).enumerate() {
                        let src = &xs[(blk * per + k) * d..][..d];
                        let mean = src.iter().map(|v| v.to_f64()).sum::<f64>() / d as f64;
                        let var = src
                            .iter()
                            .map(|v| {
                                let c = v.to_f64() - mean;
                                c * c
                            })
                            .sum::<f64>()
                            / d as f64;
                        let rstd = 1.0 / (var + eps).sqrt();
                        *st = (mean, rstd);
                        let (mc, rc) = (C::from_f64(mean), C::from_f64(rstd));
                        for (dv, &v) in dst.iter_mut().zip(src) {
                            *dv = v.sub(mc).mul(rc);
                        }
                        if let Some(w) = &ws {
                            for (dv, &wj) in dst.iter_mut().zip(w.iter()) {
                                *dv = dv.mul(wj);
                            }
                        }
                        if let Some(b) = &bs {
                            for (dv, &bj) in dst.iter_mut().zip(b.iter()) {
                                *dv = dv.add(bj);
                            }
                        }
                    }
                },
            );
        });
        if let Some(t) = sm.filter(|t| t.numel() == rows) {
            write(t, &stats.iter().map(|s| s.0).collect::<Vec<_>>());
        }
        if let Some(t) = sr.filter(|t| t.numel() == rows) {
            write(t, &stats.iter().map(|s| s.1).collect::<Vec<_>>());
        }
    }
    if is_f64(out) {
        go::<f64>(out, save_mean, save_rstd, x, w, b, d, eps)
    } else {
        go::<f32>(out, save_mean, save_rstd, x, w, b, d, eps)
    }
}

/// Gradients of [`layer_norm`] from the saved mean and rstd; each output optional.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_backward(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    go: &TView,
    x: &TView,
    w: Option<&TView>,
    mean: &TView,
    rstd: &TView,
    d: usize,
) {
    if is_f64(x) {
        layer_norm_backward_as::<f64>(gi, gw, gb, go, x, w, mean, rstd, d)
    } else {
        layer_norm_backward_as::<f32>(gi, gw, gb, go, x, w, mean, rstd, d)
    }
}

/// [`layer_norm_backward`] reading `x` and `go` as `C`, accumulating in f64.
#[allow(clippy::too_many_arguments)]
fn layer_norm_backward_as<C: Num>(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    go: &TView,
    x: &TView,
    w: Option<&TView>,
    mean: &TView,
    rstd: &TView,
    d: usize,
) {
    let xs = read::<C>(x);
    let gs = read::<C>(go);
    let ms = read::<f64>(mean);
    let rs = read::<f64>(rstd);
    let rows = xs.len().checked_div(d).unwrap_or(0);
    let ws = w
        .map(|t| read::<f64>(t).into_owned())
        .unwrap_or_else(|| vec![1.0; d]);
    if let Some(gi) = gi {
        let mut out = vec![C::default(); rows * d];
        if let Some(per) = 8192usize.checked_div(d) {
            let per = per.max(1);
            crate::par::chunks_each(&mut out, per * d, rows * d * 4, |blk, dsts| {
                for (k, dst) in dsts.chunks_mut(d).enumerate() {
                    let r = blk * per + k;
                    let (m, rr) = (ms[r], rs[r]);
                    let (xr, gr) = (&xs[r * d..(r + 1) * d], &gs[r * d..(r + 1) * d]);
                    let (mut s1, mut s2) = (0f64, 0f64);
                    for ((&x, &g), &w) in xr.iter().zip(gr).zip(&ws) {
                        let dxh = g.to_f64() * w;
                        s1 += dxh;
                        s2 += dxh * (x.to_f64() - m) * rr;
                    }
                    let (a, b) = (s1 / d as f64, s2 / d as f64);
                    for (((dv, &x), &g), &w) in dst.iter_mut().zip(xr).zip(gr).zip(&ws) {
                        let xh = (x.to_f64() - m) * rr;
                        *dv = C::from_f64(rr * (g.to_f64() * w - a - xh * b));
                    }
                }
            });
        }
        write(gi, &out);
    }
    let per = 16384usize.checked_div(d).map(|p| p.max(1));
    if let Some(per) = per.filter(|_| gw.is_some() || gb.is_some()) {
        // partial sums over blocks of rows, in parallel, then added up
        let blocks = rows.div_ceil(per);
        let parts = crate::par::map_range(blocks, rows * d * 2, |b| {
            let mut sw = vec![0f64; d];
            let mut sb = vec![0f64; d];
            for r in b * per..((b + 1) * per).min(rows) {
                let (m, rr) = (ms[r], rs[r]);
                let (xr, gr) = (&xs[r * d..(r + 1) * d], &gs[r * d..(r + 1) * d]);
                for (((w, bb), &x), &g) in sw.iter_mut().zip(sb.iter_mut()).zip(xr).zip(gr) {
                    *w += g.to_f64() * (x.to_f64() - m) * rr;
                    *bb += g.to_f64();
                }
            }
            (sw, sb)
        });
        let mut sw = vec![0f64; d];
        let mut sb = vec![0f64; d];
        for (pw, pb) in &parts {
            for (a, b) in sw.iter_mut().zip(pw) {
                *a += b;
            }
            for (a, b) in sb.iter_mut().zip(pb) {
                *a += b;
            }
        }
        if let Some(t) = gw {
            write(t, &sw);
        }
        if let Some(t) = gb {
            write(t, &sb);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::testutil::*;

    #[test]
    fn batch_norm_training_stats_and_grads() {
        // N=2, C=2, S=2
        let x = vec![1.0f32, 2.0, 10.0, 20.0, 3.0, 4.0, 30.0, 40.0];
        let mut xm = x.clone();
        let xv = f32v(&mut xm, &[2, 2, 2]);
        let (mut w, mut b) = (vec![2.0f32, 1.0], vec![0.5f32, 0.0]);
        let (wv, bv) = (f32v(&mut w, &[2]), f32v(&mut b, &[2]));
        let (mut rm, mut rv) = (vec![0f32; 2], vec![1f32; 2]);
        let (rmv, rvv) = (f32v(&mut rm, &[2]), f32v(&mut rv, &[2]));
        let (mut sm, mut si) = (vec![0f32; 2], vec![0f32; 2]);
        let (smv, siv) = (f32v(&mut sm, &[2]), f32v(&mut si, &[2]));
        let mut o = vec![0f32; 8];
        let ov = f32v(&mut o, &[2, 2, 2]);
        batch_norm(
            &ov,
            Some(&smv),
            Some(&siv),
            &xv,
            Some(&wv),
            Some(&bv),
            Some(&rmv),
            Some(&rvv),
            true,
            0.1,
            1e-5,
        );
        assert_eq!(sm, vec![2.5, 25.0]);
        let var0 = 1.25f32; // values 1,2,3,4
        close(&si[..1], &[1.0 / (var0 + 1e-5).sqrt()], 4);
        close(&rm, &[0.25, 2.5], 4);
        close(&rv[..1], &[0.9 + 0.1 * var0 * 4.0 / 3.0], 4);
        close(
            &o[..2],
            &[
                2.0 * (1.0 - 2.5) * si[0] + 0.5,
                2.0 * (2.0 - 2.5) * si[0] + 0.5,
            ],
            4,
        );
        // gradient check on sum(g * bn(x)) wrt x[0] by finite differences
        let g = vec![1.0f32, -2.0, 0.5, 0.0, 3.0, 1.0, -1.0, 2.0];
        let mut gm = g.clone();
        let gv = f32v(&mut gm, &[2, 2, 2]);
        let mut gi = vec![0f32; 8];
        let giv = f32v(&mut gi, &[2, 2, 2]);
        let (mut gw, mut gb) = (vec![0f32; 2], vec![0f32; 2]);
        let (gwv, gbv) = (f32v(&mut gw, &[2]), f32v(&mut gb, &[2]));
        batch_norm_backward(
            Some(&giv),
            Some(&gwv),
            Some(&gbv),
            &gv,
            &xv,
            Some(&wv),
            None,
            None,
            Some(&smv),
            Some(&siv),
            true,
            1e-5,
        );
        let f = |xx: &[f32]| -> f32 {
            let mut a = xx.to_vec();
            let av = f32v(&mut a, &[2, 2, 2]);
            let mut oo = vec![0f32; 8];
            let oov = f32v(&mut oo, &[2, 2, 2]);
            batch_norm(
                &oov,
                None,
                None,
                &av,
                Some(&wv),
                Some(&bv),
                None,
                None,
                true,
                0.1,
                1e-5,
            );
            oo.iter().zip(&g).map(|(p, q)| p * q).sum()
        };
        for j in [0, 3, 5] {
            let h = 1e-2;
            let (mut p, mut q) = (x.clone(), x.clone());
            p[j] += h;
            q[j] -= h;
            let num = (f(&p) - f(&q)) / (2.0 * h);
            assert!((num - gi[j]).abs() < 2e-2, "gi[{j}] {num} vs {}", gi[j]);
        }
        assert_eq!(gb, vec![1.0 - 2.0 + 3.0 + 1.0, 0.5 + 0.0 - 1.0 + 2.0]);
    }

    #[test]
    fn layer_norm_and_backward() {
        let x = vec![1.0f32, 2.0, 4.0, -1.0, 0.0, 1.0];
        let mut xm = x.clone();
        let xv = f32v(&mut xm, &[2, 3]);
        let (mut w, mut b) = (vec![1.0f32, 2.0, 0.5], vec![0.0f32, 1.0, 0.0]);
        let (wv, bv) = (f32v(&mut w, &[3]), f32v(&mut b, &[3]));
        let (mut m, mut r) = (vec![0f32; 2], vec![0f32; 2]);
        let (mv, rv) = (f32v(&mut m, &[2, 1]), f32v(&mut r, &[2, 1]));
        let mut o = vec![0f32; 6];
        let ov = f32v(&mut o, &[2, 3]);
        layer_norm(
            &ov,
            Some(&mv),
            Some(&rv),
            &xv,
            Some(&wv),
            Some(&bv),
            3,
            1e-5,
        );
        close(&m, &[7.0 / 3.0, 0.0], 3);
        let rstd1 = 1.0 / (2.0f32 / 3.0 + 1e-5).sqrt();
        close(&o[3..], &[-rstd1, 1.0, 0.5 * rstd1], 3);
        let g = vec![0.3f32, -1.0, 2.0, 1.0, 1.0, -0.5];
        let mut gm = g.clone();
        let gv = f32v(&mut gm, &[2, 3]);
        let mut gi = vec![0f32; 6];
        let giv = f32v(&mut gi, &[2, 3]);
        layer_norm_backward(Some(&giv), None, None, &gv, &xv, Some(&wv), &mv, &rv, 3);
        let f = |xx: &[f32]| -> f32 {
            let mut a = xx.to_vec();
            let av = f32v(&mut a, &[2, 3]);
            let mut oo = vec![0f32; 6];
            let oov = f32v(&mut oo, &[2, 3]);
            layer_norm(&oov, None, None, &av, Some(&wv), Some(&bv), 3, 1e-5);
            oo.iter().zip(&g).map(|(p, q)| p * q).sum()
        };
        for j in 0..6 {
            let h = 1e-2;
            let (mut p, mut q) = (x.clone(), x.clone());
            p[j] += h;
            q[j] -= h;
            let num = (f(&p) - f(&q)) / (2.0 * h);
            assert!((num - gi[j]).abs() < 1e-2, "gi[{j}] {num} vs {}", gi[j]);
        }
    }
}
