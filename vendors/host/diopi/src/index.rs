//! Gathers, scatters and copies that reshape: embedding, index_select,
//! cat/stack, transpose/permute, tril/triu, arange.

use crate::elementwise::kind_of;
use crate::types::Scalar;
use crate::view::{copy, for_each_offset, permuted, read, read_owned, write, Num, TView};

/// `v` with dimension `d` fixed at `i` (the dimension removed).
pub fn select(v: &TView, d: usize, i: i64) -> TView {
    let ptr = v
        .ptr
        .wrapping_offset((i * v.strides[d]) as isize * v.elem_size() as isize);
    let mut shape = v.shape().to_vec();
    let mut strides = v.strides().to_vec();
    shape.remove(d);
    strides.remove(d);
    TView::new(ptr, v.dtype, &shape, &strides)
}

/// `v` restricted to `start..start+len` along `d`.
pub fn narrow(v: &TView, d: usize, start: i64, len: i64) -> TView {
    let mut r = *v;
    r.ptr = v
        .ptr
        .wrapping_offset((start * v.strides[d]) as isize * v.elem_size() as isize);
    r.shape[d] = len;
    r
}

fn norm_index(i: i64, n: i64) -> Option<i64> {
    let r = if i < 0 { i + n } else { i };
    (0..n).contains(&r).then_some(r)
}

/// `out[..., :] = weight[indices[...], :]` (out-of-range rows stay zero).
pub fn embedding(out: &TView, w: &TView, idx: &TView) {
    let ids = read::<i64>(idx);
    let lead = &out.strides()[..out.ndim - 1];
    let d = out.ndim - 1;
    let v = w.shape[0];
    let mut offs = Vec::with_capacity(ids.len());
    for_each_offset(idx.shape(), lead, |_, off| offs.push(off));
    for (k, &off) in offs.iter().enumerate() {
        let mut dst = select(out, 0, 0);
        // row of out at `off`
        dst.ptr = out.ptr.wrapping_offset(off * out.elem_size() as isize);
        dst.ndim = 1;
        dst.shape[0] = out.shape[d];
        dst.strides[0] = out.strides[d];
        match norm_index(ids[k], v) {
            Some(r) => copy(&dst, &select(w, 0, r)),
            None => crate::elementwise::fill(&dst, Scalar::Int(0)),
        }
    }
}

/// Embedding backward: rows of `grad` summed into `out` [num_weights, D]
/// (padding_idx skipped; scaled by 1/frequency when asked).
pub fn embedding_backward(
    out: &TView,
    grad: &TView,
    idx: &TView,
    padding_idx: i64,
    scale_by_freq: bool,
) {
    let ids = read::<i64>(idx);
    let gs = read::<f64>(grad);
    let (v, dd) = (out.shape[0], out.shape[1] as usize);
    let mut acc = vec![0f64; v as usize * dd];
    let mut counts = vec![0u64; v as usize];
    for &i in ids.iter() {
        if let Some(r) = norm_index(i, v) {
            counts[r as usize] += 1;
        }
    }
    for (k, &i) in ids.iter().enumerate() {
        if i == padding_idx {
            continue;
        }
        if let Some(r) = norm_index(i, v) {
            let sc = if scale_by_freq {
                1.0 / counts[r as usize] as f64
            } else {
                1.0
            };
            let row = &mut acc[r as usize * dd..][..dd];
            for (a, g) in row.iter_mut().zip(&gs[k * dd..][..dd]) {
                *a += g * sc;
            }
        }
    }
    write(out, &acc);
}

/// `out = input.index_select(dim, index)`.
pub fn index_select(out: &TView, x: &TView, dim: usize, index: &TView) {
    let ids = read::<i64>(index);
    if x.ndim == 0 {
        return copy(out, x);
    }
    for (k, &i) in ids.iter().enumerate() {
        let dst = select(out, dim, k as i64);
        match norm_index(i, x.shape[dim]) {
            Some(r) => copy(&dst, &select(x, dim, r)),
            None => crate::elementwise::fill(&dst, Scalar::Int(0)),
        }
    }
}

/// index_select backward: `gi` zeroed, then `gi[.., index[k], ..] += grad[.., k, ..]`.
pub fn index_select_backward(gi: &TView, grad: &TView, dim: usize, index: &TView) {
    let ids = read::<i64>(index);
    if gi.ndim == 0 {
        return copy(gi, grad);
    }
    let gs = read::<f64>(grad);
    let (outer, glen, inner) = crate::reduce::split(grad.shape(), dim);
    let ilen = gi.shape[dim] as usize;
    let mut acc = vec![0f64; outer * ilen * inner];
    for o in 0..outer {
        for (k, &i) in ids.iter().enumerate().take(glen) {
            if let Some(r) = norm_index(i, ilen as i64) {
                for j in 0..inner {
                    acc[(o * ilen + r as usize) * inner + j] += gs[(o * glen + k) * inner + j];
                }
            }
        }
    }
    write(gi, &acc);
}

/// Concatenates `ins` along `dim` into `out` (1-D empty inputs skipped).
pub fn cat(out: &TView, ins: &[TView], dim: usize) {
    let mut at = 0i64;
    for t in ins {
        if t.ndim == 1 && t.shape[0] == 0 && out.ndim != 1 {
            continue;
        }
        let len = if t.ndim == 0 { 1 } else { t.shape[dim] };
        copy(&narrow(out, dim, at, len), t);
        at += len;
    }
}

/// Stacks `ins` along a new `dim` of `out`.
pub fn stack(out: &TView, ins: &[TView], dim: usize) {
    for (k, t) in ins.iter().enumerate() {
        copy(&select(out, dim, k as i64), t);
    }
}

/// `out = x.permute(dims)` materialised.
pub fn permute(out: &TView, x: &TView, dims: &[usize]) {
    copy(out, &permuted(x, dims))
}

/// Lower (`upper` false) or upper triangle of the last two dims, rest zero.
pub fn tri(out: &TView, x: &TView, diagonal: i64, upper: bool) {
    crate::with_kind!(kind_of(out.dtype), C => {
        let mut v: Vec<C> = read_owned::<C>(x);
        let nd = x.ndim;
        let (m, n) = (x.shape[nd - 2].max(1) as usize, x.shape[nd - 1].max(1) as usize);
        for (k, e) in v.iter_mut().enumerate() {
            let (i, j) = (((k / n) % m) as i64, (k % n) as i64);
            let keep = if upper { j - i >= diagonal } else { j - i <= diagonal };
            if !keep {
                *e = C::default();
            }
        }
        write(out, &v);
    })
}

/// `out[i] = start + i * step`.
pub fn arange(out: &TView, start: Scalar, step: Scalar) {
    crate::with_kind!(kind_of(out.dtype), C => {
        let n = out.numel();
        let v: Vec<C> = if C::DTYPE == crate::types::dtype::I64 {
            (0..n).map(|i| C::from_i64(start.i64() + i as i64 * step.i64())).collect()
        } else {
            (0..n).map(|i| C::from_f64(start.f64() + i as f64 * step.f64())).collect()
        };
        write(out, &v);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::dtype;
    use crate::view::testutil::*;

    #[test]
    fn embedding_forward_backward() {
        let mut w: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let wv = f32v(&mut w, &[4, 2]);
        let mut ids = vec![3i64, 0, 3];
        let iv = view_of(&mut ids, dtype::I64, &[3], &[1]);
        let mut o = vec![0f32; 6];
        let ov = f32v(&mut o, &[3, 2]);
        embedding(&ov, &wv, &iv);
        assert_eq!(o, vec![6.0, 7.0, 0.0, 1.0, 6.0, 7.0]);
        let mut g = vec![1.0f32; 6];
        let gv = f32v(&mut g, &[3, 2]);
        let mut gw = vec![9f32; 8];
        let gwv = f32v(&mut gw, &[4, 2]);
        embedding_backward(&gwv, &gv, &iv, 0, false);
        assert_eq!(gw, vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 2.0]);
        embedding_backward(&gwv, &gv, &iv, -1, true);
        assert_eq!(gw, vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    }

    #[test]
    fn index_select_cat_stack_tri() {
        let mut x: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let xv = f32v(&mut x, &[2, 3]);
        let mut idx = vec![2i64, 0];
        let iv = view_of(&mut idx, dtype::I64, &[2], &[1]);
        let mut o = vec![0f32; 4];
        let ov = f32v(&mut o, &[2, 2]);
        index_select(&ov, &xv, 1, &iv);
        assert_eq!(o, vec![2.0, 0.0, 5.0, 3.0]);
        let mut gi = vec![0f32; 6];
        let giv = f32v(&mut gi, &[2, 3]);
        index_select_backward(&giv, &ov, 1, &iv);
        assert_eq!(gi, vec![0.0, 0.0, 2.0, 3.0, 0.0, 5.0]);
        let mut c = vec![0f32; 10];
        let cv = f32v(&mut c, &[2, 5]);
        cat(&cv, &[xv, ov], 1);
        assert_eq!(c, vec![0.0, 1.0, 2.0, 2.0, 0.0, 3.0, 4.0, 5.0, 5.0, 3.0]);
        let mut s = vec![0f32; 8];
        let sv = f32v(&mut s, &[2, 2, 2]);
        stack(&sv, &[ov, ov], 1);
        assert_eq!(s, vec![2.0, 0.0, 2.0, 0.0, 5.0, 3.0, 5.0, 3.0]);
        let mut t = vec![0f32; 6];
        let tv = f32v(&mut t, &[2, 3]);
        tri(&tv, &xv, 0, false);
        assert_eq!(t, vec![0.0, 0.0, 0.0, 3.0, 4.0, 0.0]);
        tri(&tv, &xv, 1, true);
        assert_eq!(t, vec![0.0, 1.0, 2.0, 0.0, 0.0, 5.0]);
        let mut p = vec![0f32; 6];
        let pv = f32v(&mut p, &[3, 2]);
        permute(&pv, &xv, &[1, 0]);
        assert_eq!(p, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let mut a = vec![0i64; 4];
        let av = view_of(&mut a, dtype::I64, &[4], &[1]);
        arange(&av, Scalar::Int(3), Scalar::Int(-2));
        assert_eq!(a, vec![3, 1, -1, -3]);
    }
}
