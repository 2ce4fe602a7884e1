//! Matrix products on strided views with the `matrixmultiply` crate:
//! (batched, broadcast) GEMM with an optional broadcast addend, in f32
//! (f16 and bf16 convert to f32) or f64. Transposes are free (strides).

use crate::elementwise::Float;
use crate::view::{copy, read, read_owned, with_out, Num, TView};
use std::borrow::Cow;

/// A compute type with a GEMM.
pub trait Gemm: Float {
    /// `c = alpha * a @ b + beta * c` on strided matrices (m x k, k x n, m x n).
    ///
    /// # Safety
    /// The pointers and strides must describe valid matrices; `c` must not
    /// overlap `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

impl Gemm for f32 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        beta: f32,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            matrixmultiply::sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    }
}

impl Gemm for f64 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        beta: f64,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            matrixmultiply::dgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    }
}

#[derive(Clone, Copy)]
struct P<T>(*const T);
// SAFETY: hands disjoint output blocks of one kernel to rayon workers.
unsafe impl<T> Send for P<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for P<T> {}

impl<T> P<T> {
    /// The pointer (a method, so closures capture the whole Send wrapper).
    fn get(self) -> *const T {
        self.0
    }
}

/// One strided matrix: pointer and row/column strides (elements).
#[derive(Clone, Copy)]
pub struct Mat<T> {
    /// Element (0, 0).
    pub ptr: *const T,
    /// Row stride.
    pub rs: isize,
    /// Column stride.
    pub cs: isize,
}

/// `c = alpha a b + beta c` for one matrix, splitting rows across rayon
/// workers when large. `c` must not overlap `a`/`b`.
///
/// # Safety
/// Valid matrices of the given sizes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_par<C: Gemm>(
    m: usize,
    k: usize,
    n: usize,
    alpha: C,
    a: Mat<C>,
    b: Mat<C>,
    beta: C,
    c: Mat<C>,
) {
    let work = m * n * k;
    let threads = rayon::current_num_threads();
    if work < (1 << 18) || threads < 2 || m < 2 * threads {
        // SAFETY: forwarded.
        unsafe {
            C::gemm(
                m,
                k,
                n,
                alpha,
                a.ptr,
                a.rs,
                a.cs,
                b.ptr,
                b.rs,
                b.cs,
                beta,
                c.ptr as *mut C,
                c.rs,
                c.cs,
            )
        };
        return;
    }
    let chunk = m.div_ceil(threads);
    let (ap, bp, cp) = (P(a.ptr), P(b.ptr), P(c.ptr));
    rayon::scope(|s| {
        for lo in (0..m).step_by(chunk) {
            let rows = chunk.min(m - lo);
            s.spawn(move |_| {
                // SAFETY: rows lo..lo+rows of a and c, disjoint across tasks.
                unsafe {
                    C::gemm(
                        rows,
                        k,
                        n,
                        alpha,
                        ap.get().offset(lo as isize * a.rs),
                        a.rs,
                        a.cs,
                        bp.get(),
                        b.rs,
                        b.cs,
                        beta,
                        (cp.get() as *mut C).offset(lo as isize * c.rs),
                        c.rs,
                        c.cs,
                    )
                }
            });
        }
    });
}

/// A view whose storage is `C` (the view itself) or a contiguous converted copy.
struct AsC<'a, C: Num> {
    view: TView,
    _buf: Option<Cow<'a, [C]>>,
}

fn as_c<C: Num>(v: &TView) -> AsC<'_, C> {
    if v.dtype == C::DTYPE {
        AsC {
            view: *v,
            _buf: None,
        }
    } else {
        let buf = read::<C>(v);
        let view = TView::contiguous(buf.as_ptr() as *mut u8, C::DTYPE, v.shape());
        AsC {
            view,
            _buf: Some(buf),
        }
    }
}

/// `out = beta * init + alpha * a @ b` over the last two dims, batch dims
/// of `a`, `b` and `init` broadcast to `out`'s (`init` None or beta 0:
/// `out = alpha * a @ b`). Any dtypes; computes in f64 for f64 outputs,
/// else f32. `out` may alias any input.
pub fn bgemm(out: &TView, a: &TView, b: &TView, init: Option<&TView>, alpha: f64, beta: f64) {
    if out.dtype == crate::types::dtype::F64 {
        bgemm_c::<f64>(out, a, b, init, alpha, beta)
    } else {
        bgemm_c::<f32>(out, a, b, init, alpha, beta)
    }
}

fn bgemm_c<C: Gemm>(
    out: &TView,
    a: &TView,
    b: &TView,
    init: Option<&TView>,
    alpha: f64,
    beta: f64,
) {
    let (ac, bc) = (as_c::<C>(a), as_c::<C>(b));
    let (a, b) = (&ac.view, &bc.view);
    let nd = out.ndim;
    let (m, n) = (out.shape[nd - 2] as usize, out.shape[nd - 1] as usize);
    let k = a.shape[a.ndim - 1] as usize;
    let init = init.filter(|_| beta != 0.0);
    let run = |o: &TView| {
        if let Some(i) = init {
            copy(o, i);
        }
        let batch = &out.shape()[..nd - 2];
        let bstr = |v: &TView| -> Vec<i64> {
            let bv = TView::new(
                v.ptr,
                v.dtype,
                &v.shape()[..v.ndim - 2],
                &v.strides()[..v.ndim - 2],
            );
            bv.broadcast_strides(batch)
                .expect("batch dims checked before launch")
        };
        let (sa, sb, so) = (bstr(a), bstr(b), bstr(o));
        let mut offs = Vec::new();
        let nb: usize = batch.iter().product::<i64>() as usize;
        if nb == 0 || m == 0 || n == 0 {
            return;
        }
        let mut idx = vec![0i64; batch.len()];
        for _ in 0..nb {
            let dot = |s: &[i64]| idx.iter().zip(s).map(|(i, s)| i * s).sum::<i64>() as isize;
            offs.push((dot(&sa), dot(&sb), dot(&so)));
            for d in (0..batch.len()).rev() {
                idx[d] += 1;
                if idx[d] < batch[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        let beta_c = if init.is_some() {
            C::from_f64(beta)
        } else {
            C::default()
        };
        let alpha_c = C::from_f64(alpha);
        let mat = |v: &TView, off: isize| Mat {
            ptr: (v.ptr as *const C).wrapping_offset(off),
            rs: v.strides[v.ndim - 2] as isize,
            cs: v.strides[v.ndim - 1] as isize,
        };
        if k == 0 {
            // empty inner dimension: the product is zero
            crate::view::for_each_offset(o.shape(), o.strides(), |_, off| {
                // SAFETY: offsets inside o.
                unsafe {
                    let p = (o.ptr as *mut C).offset(off);
                    *p = if init.is_some() {
                        p.read().mul(beta_c)
                    } else {
                        C::default()
                    };
                }
            });
            return;
        }
        let one = |&(x, y, z): &(isize, isize, isize)| {
            // SAFETY: batch offsets inside the views; o overlaps neither a nor b.
            unsafe { gemm_par::<C>(m, k, n, alpha_c, mat(a, x), mat(b, y), beta_c, mat(o, z)) }
        };
        if offs.len() >= 2 && m * n * k >= 4096 {
            use rayon::prelude::*;
            let offs: Vec<P<()>> = offs
                .iter()
                .map(|t| P(Box::into_raw(Box::new(*t)) as *const ()))
                .collect();
            offs.par_iter().for_each(|p| {
                // SAFETY: each box was leaked above and is read and freed once.
                let t = unsafe { Box::from_raw(p.0 as *mut (isize, isize, isize)) };
                one(&t)
            });
        } else {
            offs.iter().for_each(one);
        }
    };
    if out.dtype == C::DTYPE && !out.overlaps(a) && !out.overlaps(b) {
        run(out);
    } else {
        let mut tmp: Vec<C> = vec![C::default(); out.numel()];
        let tv = TView::contiguous(tmp.as_mut_ptr() as *mut u8, C::DTYPE, out.shape());
        run(&tv);
        crate::view::write(out, &tmp);
    }
}

/// A view with a size-1 dimension inserted at `at` (stride 0).
pub fn unsqueeze(v: &TView, at: usize) -> TView {
    let mut shape = v.shape().to_vec();
    let mut strides = v.strides().to_vec();
    shape.insert(at, 1);
    strides.insert(at, 0);
    TView::new(v.ptr, v.dtype, &shape, &strides)
}

/// A view of `v` as a matrix [prod(leading dims), last dim], if its
/// leading dims collapse into one stride.
pub fn as_2d(v: &TView) -> Option<TView> {
    let nd = v.ndim;
    if nd == 0 {
        return Some(TView::new(v.ptr, v.dtype, &[1, 1], &[1, 1]));
    }
    if nd == 1 {
        return Some(TView::new(
            v.ptr,
            v.dtype,
            &[1, v.shape[0]],
            &[v.shape[0].max(1), v.strides[0]],
        ));
    }
    let mut rows = v.shape[nd - 2];
    let row_stride = v.strides[nd - 2];
    for d in (0..nd - 2).rev() {
        if v.shape[d] != 1 && v.strides[d] != v.strides[d + 1] * v.shape[d + 1] {
            return None;
        }
        rows *= v.shape[d];
    }
    Some(TView::new(
        v.ptr,
        v.dtype,
        &[rows, v.shape[nd - 1]],
        &[row_stride, v.strides[nd - 1]],
    ))
}

/// `v` as a matrix, through a contiguous copy in the view's dtype when
/// its dims do not collapse. The buffer (if any) must outlive the view.
pub fn matrix_of(v: &TView) -> (TView, Option<Vec<u8>>) {
    if let Some(m) = as_2d(v) {
        return (m, None);
    }
    let es = v.elem_size();
    let mut buf = vec![0u8; v.numel() * es];
    let c = TView::contiguous(buf.as_mut_ptr(), v.dtype, v.shape());
    copy(&c, v);
    (as_2d(&c).expect("contiguous views collapse"), Some(buf))
}

/// `out[..., o] = input[..., i] @ weight[o, i]^T + bias[o]`.
pub fn linear(out: &TView, x: &TView, w: &TView, bias: Option<&TView>) {
    let (x2, _xb) = matrix_of(x);
    let wt = w.transposed(0, 1);
    match as_2d(out) {
        Some(o2) => bgemm(&o2, &x2, &wt, bias, 1.0, 1.0),
        None => {
            let mut tmp = vec![0f64; out.numel()];
            let t = TView::contiguous(
                tmp.as_mut_ptr() as *mut u8,
                crate::types::dtype::F64,
                out.shape(),
            );
            let t2 = as_2d(&t).expect("contiguous");
            bgemm(&t2, &x2, &wt, bias, 1.0, 1.0);
            crate::view::write(out, &tmp);
        }
    }
}

/// Gradients of [`linear`]: each output optional.
pub fn linear_backward(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    g: &TView,
    x: &TView,
    w: &TView,
) {
    let (g2, _gbuf) = matrix_of(g);
    if let Some(gi) = gi {
        let mut tmp = vec![0f64; gi.numel()];
        let t = TView::contiguous(
            tmp.as_mut_ptr() as *mut u8,
            crate::types::dtype::F64,
            gi.shape(),
        );
        match as_2d(gi) {
            Some(gi2) if !gi.overlaps(g) && !gi.overlaps(w) => bgemm(&gi2, &g2, w, None, 1.0, 0.0),
            _ => {
                bgemm(&as_2d(&t).expect("contiguous"), &g2, w, None, 1.0, 0.0);
                crate::view::write(gi, &tmp);
            }
        }
    }
    if let Some(gw) = gw {
        let (x2, _xb) = matrix_of(x);
        bgemm(gw, &g2.transposed(0, 1), &x2, None, 1.0, 0.0);
    }
    if let Some(gb) = gb {
        let rows = g2.shape[0];
        let red = [true, false];
        let _ = rows;
        crate::reduce::sum(gb, &g2, &red, false);
    }
}

/// `torch.matmul` semantics for 1-D and N-D operands (batch broadcast).
pub fn matmul(out: &TView, a: &TView, b: &TView) {
    let (a2, b2, o2) = matmul_views(out, a, b);
    bgemm(&o2, &a2, &b2, None, 1.0, 0.0);
}

/// The matrix views `matmul` multiplies: 1-D operands get a size-1 dim.
pub fn matmul_views(out: &TView, a: &TView, b: &TView) -> (TView, TView, TView) {
    match (a.ndim, b.ndim) {
        (1, 1) => (
            unsqueeze(a, 0),
            unsqueeze(b, 1),
            unsqueeze(&unsqueeze(out, 0), 1),
        ),
        (_, 1) => (*a, unsqueeze(b, 1), unsqueeze(out, out.ndim)),
        (1, _) => (unsqueeze(a, 0), *b, unsqueeze(out, out.ndim - 1)),
        _ => (*a, *b, *out),
    }
}

/// Expected output shape of `matmul(a, b)`, or None if incompatible.
pub fn matmul_shape(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (am, ak) = if a.len() == 1 {
        (None, a[0])
    } else {
        (Some(a[a.len() - 2]), a[a.len() - 1])
    };
    let (bk, bn) = if b.len() == 1 {
        (b[0], None)
    } else {
        (b[b.len() - 2], Some(b[b.len() - 1]))
    };
    if ak != bk {
        return None;
    }
    let ab = if a.len() > 2 {
        &a[..a.len() - 2]
    } else {
        &[][..]
    };
    let bb = if b.len() > 2 {
        &b[..b.len() - 2]
    } else {
        &[][..]
    };
    let mut s = crate::view::broadcast_shapes(ab, bb)?;
    s.extend(am);
    s.extend(bn);
    Some(s)
}

/// Gradients of `matmul` for operands of 2+ dims: `gi = g @ b^T`,
/// `go = a^T @ g`, each summed over batch dims its operand broadcast.
pub fn matmul_backward(
    gi: Option<&TView>,
    gother: Option<&TView>,
    g: &TView,
    a: &TView,
    b: &TView,
) {
    let full = |target: &TView, x: &TView, y: &TView| {
        // product with the broadcast batch shape of g, then summed to target
        let mut shape = g.shape()[..g.ndim - 2].to_vec();
        shape.push(x.shape[x.ndim - 2]);
        shape.push(y.shape[y.ndim - 1]);
        let mut tmp = vec![0f64; shape.iter().product::<i64>() as usize];
        let t = TView::contiguous(
            tmp.as_mut_ptr() as *mut u8,
            crate::types::dtype::F64,
            &shape,
        );
        bgemm(&t, x, y, None, 1.0, 0.0);
        let lead = shape.len() - target.ndim;
        let red: Vec<bool> = (0..shape.len())
            .map(|d| d < lead || (target.shape[d - lead] == 1 && shape[d] != 1))
            .collect();
        if red.iter().any(|&r| r) {
            let keep: Vec<i64> = (0..shape.len())
                .filter(|&d| d >= lead)
                .map(|d| if red[d] { 1 } else { shape[d] })
                .collect();
            let tgt = TView::new(
                target.ptr,
                target.dtype,
                &keep,
                &crate::view::contiguous_strides(&keep),
            );
            let _ = tgt;
            let mut sums = vec![0f64; target.numel()];
            let sv = TView::contiguous(
                sums.as_mut_ptr() as *mut u8,
                crate::types::dtype::F64,
                target.shape(),
            );
            // sum over `red` dims into a contiguous buffer shaped like target
            let sv_full = TView::new(
                sv.ptr,
                sv.dtype,
                &keep,
                &crate::view::contiguous_strides(&keep),
            );
            crate::reduce::sum(&sv_full, &t, &red, false);
            crate::view::write(target, &sums);
        } else {
            crate::view::write(target, &tmp);
        }
    };
    if let Some(gi) = gi {
        full(gi, g, &b.transposed(b.ndim - 2, b.ndim - 1));
    }
    if let Some(go) = gother {
        full(go, &a.transposed(a.ndim - 2, a.ndim - 1), g);
    }
}

/// Reads a view as a contiguous f32 vector (used by tests and conv).
pub fn to_f32(v: &TView) -> Vec<f32> {
    read_owned::<f32>(v)
}

/// Zero-initialised output helper: runs `f` on a contiguous C buffer for `out`.
pub fn with_out_c<C: Num>(out: &TView, inputs: &[&TView], f: impl FnOnce(&mut [C])) {
    with_out::<C>(out, inputs, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::dtype;
    use crate::view::testutil::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn mm_strided_and_addmm_alias() {
        let (m, k, n) = (3, 4, 2);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32).sin()).collect();
        let want = naive(&a, &b, m, k, n);
        // b given transposed in memory: bt is n x k, viewed as k x n
        let mut bt = vec![0f32; k * n];
        for p in 0..k {
            for j in 0..n {
                bt[j * k + p] = b[p * n + j];
            }
        }
        let mut am = a.clone();
        let av = f32v(&mut am, &[m as i64, k as i64]);
        let bv = view_of(&mut bt, dtype::F32, &[k as i64, n as i64], &[1, k as i64]);
        let mut o = vec![0f32; m * n];
        let ov = f32v(&mut o, &[m as i64, n as i64]);
        bgemm(&ov, &av, &bv, None, 1.0, 0.0);
        close(&o, &want, k);
        // addmm with out aliasing the addend: o = 2*o + 1*a@b
        let prev = o.clone();
        bgemm(&ov, &av, &bv, Some(&ov), 1.0, 2.0);
        let exp: Vec<f32> = prev.iter().zip(&want).map(|(p, w)| 2.0 * p + w).collect();
        close(&o, &exp, k + 1);
        // bf16 operands, f32 output
        let mut ah: Vec<half::bf16> = a.iter().map(|&v| half::bf16::from_f32(v)).collect();
        let ahv = view_of(&mut ah, dtype::BF16, &[m as i64, k as i64], &[k as i64, 1]);
        bgemm(&ov, &ahv, &bv, None, 1.0, 0.0);
        dipu_diopi::tolerance::assert_close(&o, &want, "bfloat16", k, "bf16 operands");
    }

    #[test]
    fn batched_broadcast_matmul_and_vectors() {
        // a: [2, 2, 3], b: [3, 2] broadcast over the batch
        let a: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..6).map(|i| 1.0 - i as f32).collect();
        let mut am = a.clone();
        let mut bm = b.clone();
        let av = f32v(&mut am, &[2, 2, 3]);
        let bv = f32v(&mut bm, &[3, 2]);
        assert_eq!(matmul_shape(av.shape(), bv.shape()), Some(vec![2, 2, 2]));
        let mut o = vec![0f32; 8];
        let ov = f32v(&mut o, &[2, 2, 2]);
        matmul(&ov, &av, &bv);
        let mut want = naive(&a[..6], &b, 2, 3, 2);
        want.extend(naive(&a[6..], &b, 2, 3, 2));
        close(&o, &want, 3);
        // vector . vector -> 0-dim
        let mut v = vec![1.0f32, 2.0, 3.0];
        let vv = f32v(&mut v, &[3]);
        let mut d = vec![0f32];
        let dv = f32v(&mut d, &[]);
        matmul(&dv, &vv, &vv);
        assert_eq!(d, vec![14.0]);
        // matmul backward with the broadcast b: g_other sums over batch
        let mut g = vec![1.0f32; 8];
        let gv = f32v(&mut g, &[2, 2, 2]);
        let mut gb = vec![0f32; 6];
        let gbv = f32v(&mut gb, &[3, 2]);
        matmul_backward(None, Some(&gbv), &gv, &av, &bv);
        // d/db[p][j] = sum over batch and rows of a[.., i, p]
        let colsum: Vec<f32> = (0..3).map(|p| (0..4).map(|r| a[r * 3 + p]).sum()).collect();
        close(
            &gb,
            &[
                colsum[0], colsum[0], colsum[1], colsum[1], colsum[2], colsum[2],
            ],
            4,
        );
    }

    #[test]
    fn linear_and_backward() {
        // x: [2, 1, 3] (leading dims collapse), w: [2, 3], bias [2]
        let mut x = vec![1.0f32, 2.0, 3.0, -1.0, 0.0, 1.0];
        let mut w = vec![0.5f32, 0.0, 1.0, 1.0, 1.0, 1.0];
        let mut bias = vec![10.0f32, 20.0];
        let (xv, wv, bv) = (
            f32v(&mut x, &[2, 1, 3]),
            f32v(&mut w, &[2, 3]),
            f32v(&mut bias, &[2]),
        );
        let mut o = vec![0f32; 4];
        let ov = f32v(&mut o, &[2, 1, 2]);
        linear(&ov, &xv, &wv, Some(&bv));
        assert_eq!(o, vec![13.5, 26.0, 10.5, 20.0]);
        let mut g = vec![1.0f32, 0.0, 0.0, 2.0];
        let gv = f32v(&mut g, &[2, 1, 2]);
        let (mut gi, mut gw, mut gb) = (vec![0f32; 6], vec![0f32; 6], vec![0f32; 2]);
        let (giv, gwv, gbv) = (
            f32v(&mut gi, &[2, 1, 3]),
            f32v(&mut gw, &[2, 3]),
            f32v(&mut gb, &[2]),
        );
        linear_backward(Some(&giv), Some(&gwv), Some(&gbv), &gv, &xv, &wv);
        assert_eq!(gi, vec![0.5, 0.0, 1.0, 2.0, 2.0, 2.0]);
        assert_eq!(gw, vec![1.0, 2.0, 3.0, -2.0, 0.0, 2.0]);
        assert_eq!(gb, vec![1.0, 2.0]);
    }

    /// Values in [-1, 1) from a fixed linear congruential sequence.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The policy's tolerance (docs/tolerance.md) passes the same sums
    /// taken in another order, and fails a wrong result: a scale of 1.001,
    /// one missing term, a column off by one.
    #[test]
    fn tolerance_passes_a_reordering_and_fails_wrong_results() {
        use dipu_diopi::tolerance::Tolerance;
        // Large enough that rows split across rayon workers.
        let (m, k, n) = (64, 256, 24);
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let (mut am, mut bm) = (a.clone(), b.clone());
        let mut o = vec![0f32; m * n];
        bgemm(
            &f32v(&mut o, &[m as i64, n as i64]),
            &f32v(&mut am, &[m as i64, k as i64]),
            &f32v(&mut bm, &[k as i64, n as i64]),
            None,
            1.0,
            0.0,
        );
        // `terms(i, j)` are the k products of output element (i, j).
        let (a, b) = (&a, &b);
        let terms = |i: usize, j: usize| (0..k).map(move |p| a[i * k + p] * b[p * n + j]);
        let each = |f: &dyn Fn(usize, usize) -> f32| -> Vec<f32> {
            (0..m * n).map(|e| f(e / n, e % n)).collect()
        };
        let tol = Tolerance::of("float32", k).unwrap();
        // Legitimate: backwards in f32, and in f64 rounded once.
        let backwards = each(&|i, j| terms(i, j).rev().sum::<f32>());
        let wide = each(&|i, j| terms(i, j).map(f64::from).sum::<f64>() as f32);
        assert_ne!(
            o, backwards,
            "the orders round differently (else this shows nothing)"
        );
        tol.check(&o, &backwards).unwrap();
        tol.check(&o, &wide).unwrap();
        // Wrong: scaled, a term missing, the next column's sums.
        let scaled: Vec<f32> = o.iter().map(|v| v * 1.001).collect();
        let missing = each(&|i, j| terms(i, j).take(k - 1).sum::<f32>());
        let shifted = each(&|i, j| terms(i, (j + 1) % n).sum::<f32>());
        for (what, wrong) in [
            ("scaled", scaled),
            ("missing", missing),
            ("shifted", shifted),
        ] {
            let err = tol.check(&wrong, &backwards).expect_err(what);
            assert!(err.count > 0, "{what}: {err}");
        }
    }

    #[test]
    fn large_gemm_splits_rows() {
        let (m, k, n) = (128, 64, 48);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
        let (mut am, mut bm) = (a.clone(), b.clone());
        let mut o = vec![0f32; m * n];
        bgemm(
            &f32v(&mut o, &[m as i64, n as i64]),
            &f32v(&mut am, &[m as i64, k as i64]),
            &f32v(&mut bm, &[k as i64, n as i64]),
            None,
            1.0,
            0.0,
        );
        // Integer-valued: every partial sum is exact, in any order and on
        // any number of threads.
        assert_eq!(o, naive(&a, &b, m, k, n));
    }
}
