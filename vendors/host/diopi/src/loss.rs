//! NLL and cross-entropy losses (class-index targets with optional class
//! weights, ignore_index and label smoothing; class-probability targets for
//! cross entropy) and their backwards. Input [N, C, *] or [C].

use crate::types::reduction;
use crate::view::{read, write, TView};

/// Loss options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossOpts {
    /// diopiReduction_t
    pub reduction: i32,
    /// target value to skip
    pub ignore_index: i64,
    /// label smoothing in [0, 1]
    pub smoothing: f64,
}

/// (N, C, S) of an input of shape [N, C, *] or [C].
pub fn ncs(x: &TView) -> (usize, usize, usize) {
    if x.ndim == 1 {
        return (1, x.shape[0] as usize, 1);
    }
    let s: i64 = x.shape()[2..].iter().product();
    (x.shape[0] as usize, x.shape[1] as usize, s as usize)
}

/// Rows of log-probabilities: log_softmax over C of (N, C, S).
fn log_softmax(xs: &[f64], n: usize, c: usize, s: usize) -> Vec<f64> {
    let mut out = vec![0f64; xs.len()];
    for i in 0..n {
        for k in 0..s {
            let at = |ch: usize| (i * c + ch) * s + k;
            let m = (0..c)
                .map(|ch| xs[at(ch)])
                .fold(f64::NEG_INFINITY, f64::max);
            let lse = (0..c).map(|ch| (xs[at(ch)] - m).exp()).sum::<f64>().ln() + m;
            for ch in 0..c {
                out[at(ch)] = xs[at(ch)] - lse;
            }
        }
    }
    out
}

/// Per-element losses and the mean's denominator for log-probabilities `lp`.
fn forward_terms(
    lp: &[f64],
    t: &[i64],
    w: &[f64],
    n: usize,
    c: usize,
    s: usize,
    o: LossOpts,
) -> (Vec<f64>, f64) {
    let mut losses = vec![0f64; n * s];
    let mut denom = 0f64;
    for i in 0..n {
        for k in 0..s {
            let tg = t[i * s + k];
            if tg == o.ignore_index || tg < 0 || tg as usize >= c {
                continue;
            }
            let at = |ch: usize| (i * c + ch) * s + k;
            let wt = w[tg as usize];
            let mut l = -(1.0 - o.smoothing) * wt * lp[at(tg as usize)];
            if o.smoothing > 0.0 {
                l -= o.smoothing / c as f64 * (0..c).map(|ch| w[ch] * lp[at(ch)]).sum::<f64>();
            }
            losses[i * s + k] = l;
            denom += wt;
        }
    }
    (losses, denom)
}

fn reduce_out(out: &TView, losses: Vec<f64>, denom: f64, red: i32) {
    match red {
        reduction::NONE => write(out, &losses),
        reduction::SUM => write(out, &[losses.iter().sum::<f64>()]),
        _ => write(out, &[losses.iter().sum::<f64>() / denom]),
    }
}

fn weights(w: Option<&TView>, c: usize) -> Vec<f64> {
    w.map(|t| read::<f64>(t).into_owned())
        .unwrap_or_else(|| vec![1.0; c])
}

/// NLL loss of log-probabilities `x` (no smoothing).
pub fn nll(out: &TView, x: &TView, target: &TView, w: Option<&TView>, o: LossOpts) {
    let (n, c, s) = ncs(x);
    let xs = read::<f64>(x);
    let t = read::<i64>(target);
    let (l, d) = forward_terms(
        &xs,
        &t,
        &weights(w, c),
        n,
        c,
        s,
        LossOpts {
            smoothing: 0.0,
            ..o
        },
    );
    reduce_out(out, l, d, o.reduction);
}

/// The gradient scale of each element: go (none), go (sum) or go / denom (mean).
fn scales(go: &TView, n: usize, s: usize, denom: f64, red: i32) -> Vec<f64> {
    let g = read::<f64>(go);
    match red {
        reduction::NONE => g.into_owned(),
        reduction::SUM => vec![g[0]; n * s],
        _ => vec![g[0] / denom; n * s],
    }
}

/// NLL loss backward.
pub fn nll_backward(
    gi: &TView,
    go: &TView,
    x: &TView,
    target: &TView,
    w: Option<&TView>,
    o: LossOpts,
) {
    let (n, c, s) = ncs(x);
    let t = read::<i64>(target);
    let w = weights(w, c);
    let denom: f64 = t
        .iter()
        .filter(|&&tg| tg != o.ignore_index && tg >= 0 && (tg as usize) < c)
        .map(|&tg| w[tg as usize])
        .sum();
    let sc = scales(go, n, s, denom, o.reduction);
    let mut g = vec![0f64; n * c * s];
    for i in 0..n {
        for k in 0..s {
            let tg = t[i * s + k];
            if tg == o.ignore_index || tg < 0 || tg as usize >= c {
                continue;
            }
            g[(i * c + tg as usize) * s + k] = -w[tg as usize] * sc[i * s + k];
        }
    }
    write(gi, &g);
}

/// Cross entropy of logits `x`: class-index targets (integer dtype) or
/// class probabilities (float target shaped like `x`).
pub fn cross_entropy(out: &TView, x: &TView, target: &TView, w: Option<&TView>, o: LossOpts) {
    let (n, c, s) = ncs(x);
    let lp = log_softmax(&read::<f64>(x), n, c, s);
    let w = weights(w, c);
    if crate::types::dtype::is_float(target.dtype) {
        let tp = read::<f64>(target);
        let mut losses = vec![0f64; n * s];
        for i in 0..n {
            for k in 0..s {
                let at = |ch: usize| (i * c + ch) * s + k;
                losses[i * s + k] = -(0..c)
                    .map(|ch| {
                        w[ch]
                            * (tp[at(ch)] * (1.0 - o.smoothing) + o.smoothing / c as f64)
                            * lp[at(ch)]
                    })
                    .sum::<f64>();
            }
        }
        return reduce_out(out, losses, (n * s) as f64, o.reduction);
    }
    let t = read::<i64>(target);
    let (l, d) = forward_terms(&lp, &t, &w, n, c, s, o);
    reduce_out(out, l, d, o.reduction);
}

/// Cross entropy backward.
pub fn cross_entropy_backward(
    gi: &TView,
    go: &TView,
    x: &TView,
    target: &TView,
    w: Option<&TView>,
    o: LossOpts,
) {
    let (n, c, s) = ncs(x);
    let lp = log_softmax(&read::<f64>(x), n, c, s);
    let w = weights(w, c);
    let mut g = vec![0f64; n * c * s];
    let eps = o.smoothing;
    if crate::types::dtype::is_float(target.dtype) {
        let tp = read::<f64>(target);
        let sc = scales(go, n, s, (n * s) as f64, o.reduction);
        for i in 0..n {
            for k in 0..s {
                let at = |ch: usize| (i * c + ch) * s + k;
                let a: Vec<f64> = (0..c)
                    .map(|ch| w[ch] * (tp[at(ch)] * (1.0 - eps) + eps / c as f64))
                    .collect();
                let sa: f64 = a.iter().sum();
                for ch in 0..c {
                    g[at(ch)] = sc[i * s + k] * (lp[at(ch)].exp() * sa - a[ch]);
                }
            }
        }
        return write(gi, &g);
    }
    let t = read::<i64>(target);
    let valid = |tg: i64| tg != o.ignore_index && tg >= 0 && (tg as usize) < c;
    let denom: f64 = t
        .iter()
        .filter(|&&tg| valid(tg))
        .map(|&tg| w[tg as usize])
        .sum();
    let sc = scales(go, n, s, denom, o.reduction);
    let wsum: f64 = w.iter().sum();
    for i in 0..n {
        for k in 0..s {
            let tg = t[i * s + k];
            if !valid(tg) {
                continue;
            }
            let at = |ch: usize| (i * c + ch) * s + k;
            let wt = w[tg as usize];
            // a_ch = (1-eps) w_t [ch == t] + eps/C w_ch; grad = p * sum(a) - a
            let sa = (1.0 - eps) * wt + eps / c as f64 * wsum;
            for ch in 0..c {
                let mut a = eps / c as f64 * w[ch];
                if ch == tg as usize {
                    a += (1.0 - eps) * wt;
                }
                g[at(ch)] = sc[i * s + k] * (lp[at(ch)].exp() * sa - a);
            }
        }
    }
    write(gi, &g);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::dtype;
    use crate::view::testutil::*;

    fn ce_value(
        x: &[f32],
        t: &mut [i64],
        w: Option<&mut Vec<f32>>,
        o: LossOpts,
        shape: &[i64],
    ) -> f32 {
        let mut xm = x.to_vec();
        let xv = f32v(&mut xm, shape);
        let tv = view_of(t, dtype::I64, &[shape[0]], &[1]);
        let wv = w.map(|w| f32v(w, &[shape[1]]));
        let mut out = vec![0f32];
        let ov = f32v(&mut out, &[]);
        cross_entropy(&ov, &xv, &tv, wv.as_ref(), o);
        out[0]
    }

    #[test]
    fn cross_entropy_matches_formula_and_gradient() {
        let x = vec![1.0f32, 2.0, 0.5, -1.0, 0.0, 3.0];
        let mut t = vec![1i64, 2];
        let o = LossOpts {
            reduction: reduction::MEAN,
            ignore_index: -100,
            smoothing: 0.0,
        };
        let l = ce_value(&x, &mut t, None, o, &[2, 3]);
        let lse = |a: &[f32]| a.iter().map(|v| v.exp()).sum::<f32>().ln();
        let want = ((lse(&x[..3]) - 2.0) + (lse(&x[3..]) - 3.0)) / 2.0;
        assert!((l - want).abs() < 1e-5);
        // with weights, smoothing and an ignored row: gradient by finite differences
        for o in [
            LossOpts {
                reduction: reduction::MEAN,
                ignore_index: 0,
                smoothing: 0.1,
            },
            LossOpts {
                reduction: reduction::SUM,
                ignore_index: -100,
                smoothing: 0.2,
            },
        ] {
            let x3 = vec![1.0f32, 2.0, 0.5, -1.0, 0.0, 3.0, 0.2, 0.1, 0.0];
            let mut t3 = vec![1i64, 2, 0];
            let mut w = vec![1.0f32, 2.0, 0.5];
            let mut xm = x3.clone();
            let xv = f32v(&mut xm, &[3, 3]);
            let tv = view_of(&mut t3, dtype::I64, &[3], &[1]);
            let wv = f32v(&mut w, &[3]);
            let mut g = vec![1.0f32];
            let gv = f32v(&mut g, &[]);
            let mut gi = vec![0f32; 9];
            let giv = f32v(&mut gi, &[3, 3]);
            cross_entropy_backward(&giv, &gv, &xv, &tv, Some(&wv), o);
            for j in 0..9 {
                let h = 1e-2;
                let (mut p, mut q) = (x3.clone(), x3.clone());
                p[j] += h;
                q[j] -= h;
                let mut tt = vec![1i64, 2, 0];
                let mut w2 = w.clone();
                let fp = ce_value(&p, &mut tt, Some(&mut w2), o, &[3, 3]);
                let fq = ce_value(&q, &mut tt, Some(&mut w2), o, &[3, 3]);
                let num = (fp - fq) / (2.0 * h);
                assert!(
                    (num - gi[j]).abs() < 2e-3,
                    "{o:?} j={j}: {num} vs {}",
                    gi[j]
                );
            }
        }
    }

    #[test]
    fn nll_none_and_backward() {
        let mut x = vec![-1.0f32, -2.0, -3.0, -0.5];
        let xv = f32v(&mut x, &[2, 2]);
        let mut t = vec![1i64, 0];
        let tv = view_of(&mut t, dtype::I64, &[2], &[1]);
        let mut out = vec![0f32; 2];
        let ov = f32v(&mut out, &[2]);
        let o = LossOpts {
            reduction: reduction::NONE,
            ignore_index: -100,
            smoothing: 0.0,
        };
        nll(&ov, &xv, &tv, None, o);
        assert_eq!(out, vec![2.0, 3.0]);
        let mut g = vec![1.0f32, 2.0];
        let gv = f32v(&mut g, &[2]);
        let mut gi = vec![5f32; 4];
        let giv = f32v(&mut gi, &[2, 2]);
        nll_backward(&giv, &gv, &xv, &tv, None, o);
        assert_eq!(gi, vec![0.0, -1.0, -2.0, 0.0]);
    }
}
