//! Reductions (sum, mean, max/min with indices, argmax) and softmax along
//! a dimension. Inputs are read through any strides into a contiguous
//! copy in the compute type; outputs are written through their strides.

use crate::elementwise::{kind_of, Float, Kind};
use crate::view::{contiguous_strides, for_each_offset, read, with_out, write, Num, TView};

/// (outer, len, inner) of a contiguous shape split around `dim`.
pub fn split(shape: &[i64], dim: usize) -> (usize, usize, usize) {
    if shape.is_empty() {
        return (1, 1, 1);
    }
    let outer: i64 = shape[..dim].iter().product();
    let inner: i64 = shape[dim + 1..].iter().product();
    (outer as usize, shape[dim] as usize, inner as usize)
}

/// Strides that map each input element to its output slot when `reduced`
/// dims collapse (0 stride on them).
fn acc_strides(shape: &[i64], reduced: &[bool]) -> Vec<i64> {
    let kept: Vec<i64> = shape
        .iter()
        .zip(reduced)
        .map(|(&s, &r)| if r { 1 } else { s })
        .collect();
    let cs = contiguous_strides(&kept);
    cs.iter()
        .zip(reduced)
        .map(|(&s, &r)| if r { 0 } else { s })
        .collect()
}

fn sum_typed<C: Num>(out: &TView, x: &TView, reduced: &[bool], mean: bool) {
    let xs = read::<C>(x);
    let acc_n: usize = x
        .shape()
        .iter()
        .zip(reduced)
        .map(|(&s, &r)| if r { 1 } else { s as usize })
        .product();
    let count: usize = x
        .shape()
        .iter()
        .zip(reduced)
        .map(|(&s, &r)| if r { s as usize } else { 1 })
        .product();
    let mut acc = vec![C::default(); acc_n];
    let st = acc_strides(x.shape(), reduced);
    for_each_offset(x.shape(), &st, |i, off| {
        let a = &mut acc[off as usize];
        *a = a.add(xs[i]);
    });
    if mean {
        let c = C::from_i64(count as i64);
        for a in acc.iter_mut() {
            *a = a.div(c);
        }
    }
    write(out, &acc);
}

/// The sums of contiguous f32 input whose reduced dims are all leading or
/// all trailing (every bias gradient and row sum, and sums of everything),
/// accumulated in f64 as [`sum`] does, in loops that vectorize. False when
/// the case is not one of these.
fn sum_f32_fast(out: &TView, x: &TView, reduced: &[bool], mean: bool) -> bool {
    use crate::types::dtype;
    if x.dtype != dtype::F32 || !x.is_contiguous() || kind_of(out.dtype) != Kind::F32 {
        return false;
    }
    let shape = x.shape();
    let nd = shape.len();
    let lead = reduced.iter().take_while(|&&r| r).count();
    let trail = reduced.iter().rev().take_while(|&&r| r).count();
    let n = x.numel();
    // SAFETY: contiguous f32 memory of n elements.
    let xs = unsafe { std::slice::from_raw_parts(x.ptr as *const f32, n) };
    let (rows, cols, leading) = if lead == nd {
        (1, n, false)
    } else if lead > 0 && reduced[lead..].iter().all(|&r| !r) {
        let cols: i64 = shape[lead..].iter().product();
        (n / cols.max(1) as usize, cols as usize, true)
    } else if trail > 0 && reduced[..nd - trail].iter().all(|&r| !r) {
        let cols: i64 = shape[nd - trail..].iter().product();
        (n / cols.max(1) as usize, cols as usize, false)
    } else {
        return false;
    };
    if n == 0 {
        return false;
    }
    let sums: Vec<f64> = if leading {
        // out[j] = sum over rows of x[r, j]
        let mut acc = vec![0f64; cols];
        for row in xs.chunks_exact(cols) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v as f64;
            }
        }
        acc
    } else {
        crate::par::map_range(rows, n, |r| {
            let row = &xs[r * cols..(r + 1) * cols];
            let mut lanes = [0f64; 8];
            let mut it = row.chunks_exact(8);
            for c in &mut it {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += v as f64;
                }
            }
            it.remainder().iter().map(|&v| v as f64).sum::<f64>() + lanes.iter().sum::<f64>()
        })
    };
    let count = if leading { rows } else { cols } as f64;
    let vals: Vec<f32> = sums
        .iter()
        .map(|&v| if mean { (v / count) as f32 } else { v as f32 })
        .collect();
    write(out, &vals);
    true
}

/// Sum (or mean) of `x` over the dims flagged in `reduced` into `out`
/// (which holds the kept dims, with or without size-1 reduced dims).
/// Float sums accumulate in f64.
pub fn sum(out: &TView, x: &TView, reduced: &[bool], mean: bool) {
    if sum_f32_fast(out, x, reduced, mean) {
        return;
    }
    match kind_of(out.dtype) {
        Kind::I64 if !mean => sum_typed::<i64>(out, x, reduced, false),
        _ => sum_typed::<f64>(out, x, reduced, mean),
    }
}

/// Max (or min) along `dim` with the index of the first extreme (NaN
/// counts as the extreme); `vals`/`idx` hold the kept dims.
pub fn max_dim(vals: Option<&TView>, idx: Option<&TView>, x: &TView, dim: usize, is_max: bool) {
    fn go<C: Num>(vals: Option<&TView>, idx: Option<&TView>, x: &TView, dim: usize, is_max: bool) {
        let xs = read::<C>(x);
        let (outer, len, inner) = split(x.shape(), dim);
        let mut v = vec![C::default(); outer * inner];
        let mut ix = vec![0i64; outer * inner];
        for o in 0..outer {
            for i in 0..inner {
                let base = o * len * inner + i;
                let mut best = xs[base];
                let mut bi = 0usize;
                if !best.is_nan() {
                    for k in 1..len {
                        let e = xs[base + k * inner];
                        if e.is_nan() {
                            best = e;
                            bi = k;
                            break;
                        }
                        if (is_max && e > best) || (!is_max && e < best) {
                            best = e;
                            bi = k;
                        }
                    }
                }
                v[o * inner + i] = best;
                ix[o * inner + i] = bi as i64;
            }
        }
        if let Some(t) = vals {
            write(t, &v);
        }
        if let Some(t) = idx {
            write(t, &ix);
        }
    }
    if x.numel() == 0 {
        return;
    }
    crate::with_kind!(kind_of(x.dtype), C => go::<C>(vals, idx, x, dim, is_max))
}

/// Max (or min) over all elements into a one-element `out` (NaN wins).
pub fn max_all(out: &TView, x: &TView, is_max: bool) {
    crate::with_kind!(kind_of(x.dtype), C => {
        let xs = read::<C>(x);
        if xs.is_empty() {
            return;
        }
        let mut best = xs[0];
        for &e in xs.iter() {
            if e.is_nan() {
                best = e;
                break;
            }
            if (is_max && e > best) || (!is_max && e < best) {
                best = e;
            }
        }
        write(out, &[best]);
    })
}

/// Argmax along `dim` (None: over the flattened tensor) into int64 `out`.
pub fn argmax(out: &TView, x: &TView, dim: Option<usize>) {
    match dim {
        Some(d) => max_dim(None, Some(out), x, d, true),
        None => {
            crate::with_kind!(kind_of(x.dtype), C => {
                let xs = read::<C>(x);
                let mut bi = 0usize;
                for (k, &e) in xs.iter().enumerate() {
                    if e.is_nan() {
                        bi = k;
                        break;
                    }
                    if e > xs[bi] {
                        bi = k;
                    }
                }
                write(out, &[bi as i64]);
            })
        }
    }
}

/// `sum(xs)` in eight lanes (a loop that vectorizes; the order of the
/// additions differs from a plain left-to-right sum).
#[inline(always)]
fn lane_sum<C: Num>(xs: &[C]) -> C {
    let mut lanes = [C::default(); 8];
    let mut it = xs.chunks_exact(8);
    for c in &mut it {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.add(v);
        }
    }
    let mut s = C::default();
    for &v in it.remainder() {
        s = s.add(v);
    }
    lanes.iter().fold(s, |a, &b| a.add(b))
}

/// One contiguous row of softmax (or log-softmax). A NaN in the row makes
/// every output NaN, through the sum.
#[inline(always)]
fn softmax_row<C: Float>(dst: &mut [C], row: &[C], log: bool) {
    let mut lanes = [row[0]; 8];
    let mut it = row.chunks_exact(8);
    for c in &mut it {
        for (l, &v) in lanes.iter_mut().zip(c) {
            // not max_nan: a NaN reaches every output through the sum below
            *l = if v > *l { v } else { *l };
        }
    }
    let m = it
        .remainder()
        .iter()
        .chain(lanes.iter())
        .fold(row[0], |a, &b| if b > a { b } else { a });
    for (d, &v) in dst.iter_mut().zip(row) {
        *d = v.sub(m).exp();
    }
    let s = lane_sum(dst);
    if log {
        let ls = s.ln().add(m);
        for (d, &v) in dst.iter_mut().zip(row) {
            *d = v.sub(ls);
        }
    } else {
        let inv = C::from_i64(1).div(s);
        for d in dst.iter_mut() {
            *d = d.mul(inv);
        }
    }
}

/// Softmax (or log-softmax) of `x` along `dim` into `out` (same shape).
pub fn softmax(out: &TView, x: &TView, dim: usize, log: bool) {
    fn go<C: Float>(out: &TView, x: &TView, dim: usize, log: bool) {
        let xs = read::<C>(x);
        let (outer, len, inner) = split(x.shape(), dim);
        if xs.is_empty() {
            return;
        }
        with_out::<C>(out, &[x], |o| {
            if inner == 1 {
                // contiguous rows, blocks of rows per rayon task
                let per = (8192 / len).max(1);
                crate::par::chunks_each(o, per * len, o.len() * 4, |blk, dsts| {
                    let src = &xs[blk * per * len..][..dsts.len()];
                    for (dst, row) in dsts.chunks_mut(len).zip(src.chunks(len)) {
                        softmax_row(dst, row, log);
                    }
                });
                return;
            }
            for ob in 0..outer {
                for i in 0..inner {
                    let base = ob * len * inner + i;
                    let mut m = xs[base];
                    for k in 1..len {
                        m = m.max_nan(xs[base + k * inner]);
                    }
                    let mut s = C::default();
                    for k in 0..len {
                        s = s.add(xs[base + k * inner].sub(m).exp());
                    }
                    if log {
                        let ls = s.ln().add(m);
                        for k in 0..len {
                            o[base + k * inner] = xs[base + k * inner].sub(ls);
                        }
                    } else {
                        for k in 0..len {
                            o[base + k * inner] = xs[base + k * inner].sub(m).exp().div(s);
                        }
                    }
                }
            }
        });
    }
    if kind_of(out.dtype) == Kind::F64 {
        go::<f64>(out, x, dim, log)
    } else {
        go::<f32>(out, x, dim, log)
    }
}

/// Softmax backward (`log`: log-softmax backward) from the forward output `y`.
pub fn softmax_backward(gi: &TView, go_: &TView, y: &TView, dim: usize, log: bool) {
    fn go<C: Float>(gi: &TView, g: &TView, y: &TView, dim: usize, log: bool) {
        let gs = read::<C>(g);
        let ys = read::<C>(y);
        let (outer, len, inner) = split(y.shape(), dim);
        if ys.is_empty() {
            return;
        }
        let row = |o: &mut [C], base: usize| {
            let mut s = C::default();
            for k in 0..len {
                let j = base + k * inner;
                s = if log {
                    s.add(gs[j])
                } else {
                    s.add(gs[j].mul(ys[j]))
                };
            }
            (0..len).map(move |k| base + k * inner).for_each(|j| {
                o[j - base] = if log {
                    gs[j].sub(ys[j].exp().mul(s))
                } else {
                    ys[j].mul(gs[j].sub(s))
                };
            });
        };
        with_out::<C>(gi, &[g, y], |o| {
            if inner == 1 {
                let per = (8192 / len).max(1);
                crate::par::chunks_each(o, per * len, o.len() * 4, |blk, dsts| {
                    for (r, dst) in dsts.chunks_mut(len).enumerate() {
                        row(dst, (blk * per + r) * len);
                    }
                });
                return;
            }
            let mut tmp = vec![C::default(); (len - 1) * inner + 1];
            for ob in 0..outer {
                for i in 0..inner {
                    let base = ob * len * inner + i;
                    row(&mut tmp, base);
                    for k in 0..len {
                        o[base + k * inner] = tmp[k * inner];
                    }
                }
            }
        });
    }
    if kind_of(gi.dtype) == Kind::F64 {
        go::<f64>(gi, go_, y, dim, log)
    } else {
        go::<f32>(gi, go_, y, dim, log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::dtype;
    use crate::view::testutil::*;

    #[test]
    fn sum_mean_over_dims_strided() {
        // x = 2x3 transposed view of [[1,4],[2,5],[3,6]] -> [[1,2,3],[4,5,6]]
        let mut m = vec![1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        let x = view_of(&mut m, dtype::F32, &[2, 3], &[1, 2]);
        let mut o = vec![0f32; 3];
        let ov = f32v(&mut o, &[3]);
        sum(&ov, &x, &[true, false], false);
        assert_eq!(o, vec![5.0, 7.0, 9.0]);
        let mut o2 = vec![0f32; 2];
        let ov2 = f32v(&mut o2, &[2, 1]);
        sum(&ov2, &x, &[false, true], true);
        assert_eq!(o2, vec![2.0, 5.0]);
        let mut all = vec![0f32];
        let av = f32v(&mut all, &[]);
        sum(&av, &x, &[true, true], false);
        assert_eq!(all, vec![21.0]);
        // 0-dim input
        let mut z = vec![4.0f32];
        let zv = f32v(&mut z, &[]);
        sum(&av, &zv, &[], true);
        assert_eq!(all, vec![4.0]);
    }

    #[test]
    fn max_min_argmax() {
        let mut m = vec![1.0f32, 9.0, 3.0, 7.0, 2.0, 7.0];
        let x = f32v(&mut m, &[2, 3]);
        let mut v = vec![0f32; 2];
        let mut i = vec![0i64; 2];
        let (vv, iv) = (f32v(&mut v, &[2]), view_of(&mut i, dtype::I64, &[2], &[1]));
        max_dim(Some(&vv), Some(&iv), &x, 1, true);
        assert_eq!((v.clone(), i.clone()), (vec![9.0, 7.0], vec![1, 0]));
        max_dim(Some(&vv), Some(&iv), &x, 1, false);
        assert_eq!((v, i), (vec![1.0, 2.0], vec![0, 1]));
        let mut a = vec![0i64];
        let av = view_of(&mut a, dtype::I64, &[], &[]);
        argmax(&av, &x, None);
        assert_eq!(a, vec![1]);
        let mut mx = vec![0f32];
        let mv = f32v(&mut mx, &[]);
        max_all(&mv, &x, false);
        assert_eq!(mx, vec![1.0]);
    }

    #[test]
    fn softmax_rows_and_backward_numeric() {
        let xs = vec![0.1f32, -1.0, 2.0, 0.5, 0.5, 0.5];
        let mut x = xs.clone();
        let xv = f32v(&mut x, &[2, 3]);
        let mut y = vec![0f32; 6];
        let yv = f32v(&mut y, &[2, 3]);
        softmax(&yv, &xv, 1, false);
        assert!((y[0] + y[1] + y[2] - 1.0).abs() < 1e-6);
        close(&y[3..], &[1.0 / 3.0; 3], 3);
        // in place log-softmax along dim 0 equals log of softmax along dim 0
        let mut l = xs.clone();
        let lv = f32v(&mut l, &[2, 3]);
        softmax(&lv, &lv, 0, true);
        let mut s0 = vec![0f32; 6];
        let sv = f32v(&mut s0, &[2, 3]);
        softmax(&sv, &xv, 0, false);
        close(&l, &s0.iter().map(|v| v.ln()).collect::<Vec<_>>(), 2);
        // backward: d/dx of sum(g * softmax(x))
        let g = [0.3f32, -0.2, 1.0, 0.0, 2.0, -1.0];
        for log in [false, true] {
            let mut gm = g.to_vec();
            let gv = f32v(&mut gm, &[2, 3]);
            let mut ym = vec![0f32; 6];
            let yv = f32v(&mut ym, &[2, 3]);
            softmax(&yv, &xv, 1, log);
            let mut gi = vec![0f32; 6];
            let giv = f32v(&mut gi, &[2, 3]);
            softmax_backward(&giv, &gv, &yv, 1, log);
            let f = |xx: &[f32]| -> f32 {
                let mut a = xx.to_vec();
                let av = f32v(&mut a, &[2, 3]);
                let mut o = vec![0f32; 6];
                let ov = f32v(&mut o, &[2, 3]);
                softmax(&ov, &av, 1, log);
                o.iter().zip(&g).map(|(p, q)| p * q).sum()
            };
            for j in 0..6 {
                let h = 1e-2f32;
                let (mut p, mut q) = (xs.clone(), xs.clone());
                p[j] += h;
                q[j] -= h;
                let num = (f(&p) - f(&q)) / (2.0 * h);
                assert!(
                    (num - gi[j]).abs() < 2e-3,
                    "log={log} j={j}: {num} vs {}",
                    gi[j]
                );
            }
        }
    }
}
