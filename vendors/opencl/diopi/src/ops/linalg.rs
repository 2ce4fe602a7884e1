//! Matrix products on the `gemm` kernel: mm, bmm, addmm, baddbmm,
//! matmul, linear and its backward. Every operand is a 3-D view
//! (batch, rows, columns) of its strides; a batch stride of 0 broadcasts.

use super::entry::entry;
use super::{check_float, ew, reduce::reduce, Op, Q};
use crate::kernels::{launch, Arg, Td};
use crate::rt::{self, err, R, T};
use crate::types::*;

/// A 3-D view: tensor data, shape [batch, rows, cols] and strides.
#[derive(Clone)]
struct V {
    t: T,
    shape: [i64; 3],
    strides: [i64; 3],
}

impl V {
    fn td(&self) -> Td {
        Td::new(self.t.dtype, &self.shape, &self.strides)
    }
    /// A 2-D tensor as one batch.
    fn mat(t: &T, name: &str) -> R<V> {
        if t.ndim() != 2 {
            return Err(err(format!("{name} must be 2-D, has shape {:?}", t.shape)));
        }
        Ok(V {
            t: t.clone(),
            shape: [1, t.shape[0], t.shape[1]],
            strides: [0, t.strides[0], t.strides[1]],
        })
    }
    /// A 3-D tensor.
    fn batch(t: &T, name: &str) -> R<V> {
        if t.ndim() != 3 {
            return Err(err(format!("{name} must be 3-D, has shape {:?}", t.shape)));
        }
        Ok(V {
            t: t.clone(),
            shape: [t.shape[0], t.shape[1], t.shape[2]],
            strides: [t.strides[0], t.strides[1], t.strides[2]],
        })
    }
    /// Rows and columns swapped.
    fn t(&self) -> V {
        V {
            t: self.t.clone(),
            shape: [self.shape[0], self.shape[2], self.shape[1]],
            strides: [self.strides[0], self.strides[2], self.strides[1]],
        }
    }
}

/// `out = alpha * a @ w + beta * c`, checking the shapes agree.
fn gemm(q: Q, out: &V, a: &V, w: &V, c: Option<&V>, alpha: f64, beta: f64) -> R<()> {
    let mut ts = vec![(&out.t, "out"), (&a.t, "input"), (&w.t, "mat2")];
    if let Some(c) = c {
        ts.push((&c.t, "bias"));
    }
    check_float(q, &ts)?;
    let [b, m, n] = out.shape;
    let bad = |what: &str| {
        err(format!(
            "{what}: shapes {:?} @ {:?} -> {:?}",
            a.t.shape, w.t.shape, out.t.shape
        ))
    };
    if a.shape[1] != m || w.shape[2] != n || a.shape[2] != w.shape[1] {
        return Err(bad("the matrix sizes do not agree"));
    }
    for v in [a, w] {
        if v.shape[0] != b && !(v.shape[0] == 1 && v.strides[0] == 0) {
            return Err(bad("the batch sizes do not agree"));
        }
    }
    let none = Td::none();
    let total = b * m * n;
    launch(
        q,
        "gemm",
        &[
            Arg::Ptr(out.t.ptr),
            Arg::Td(out.td()),
            Arg::Ptr(a.t.ptr),
            Arg::Td(a.td()),
            Arg::Ptr(w.t.ptr),
            Arg::Td(w.td()),
            Arg::Ptr(c.map_or(out.t.ptr, |c| c.t.ptr)),
            Arg::Td(c.map_or(none, V::td)),
            Arg::Acc(alpha),
            Arg::Acc(if c.is_some() { beta } else { 0.0 }),
            Arg::I64(total),
        ],
        total,
    )
}

/// `t` broadcast to [1, m, n] (a bias or an addmm input).
fn bias_view(t: &T, m: i64, n: i64, name: &str) -> R<V> {
    Td::bcast(t, &[m, n], name)?;
    let strides = bcast_strides(t, &[m, n]);
    Ok(V {
        t: t.clone(),
        shape: [1, m, n],
        strides: [0, strides[0], strides[1]],
    })
}

/// The strides of `t` read at the positions of `shape`, which it
/// broadcasts to (checked by [`Td::bcast`]): 0 where it has size 1 or
/// lacks the dimension.
fn bcast_strides(t: &T, shape: &[i64]) -> Vec<i64> {
    let lead = shape.len() - t.ndim();
    let mut s = vec![0; shape.len()];
    for d in 0..t.ndim() {
        s[lead + d] = if t.shape[d] == 1 && shape[lead + d] != 1 {
            0
        } else {
            t.strides[d]
        };
    }
    s
}

/// `t` ([..., k], at least 1-D) as a [rows, k] matrix: its leading
/// dimensions collapsed when their strides allow, else a contiguous copy.
unsafe fn rows(ctx: ContextHandle, q: Q, t: &T) -> R<(T, bool)> {
    let nd = t.ndim();
    if nd == 0 {
        return Err(err("a 0-dim tensor has no rows"));
    }
    let k = t.shape[nd - 1];
    let r: i64 = t.shape[..nd - 1].iter().product();
    let mut ok = true;
    for d in 0..nd.saturating_sub(2) {
        if t.shape[d] != 1 && t.strides[d] != t.strides[d + 1] * t.shape[d + 1] {
            ok = false;
        }
    }
    let row_stride = if nd >= 2 { t.strides[nd - 2] } else { 0 };
    if ok {
        let mut v = t.clone();
        v.shape = vec![r, k];
        v.strides = vec![row_stride, t.strides[nd - 1]];
        return Ok((v, false));
    }
    // SAFETY: ctx is the framework's.
    let c = unsafe { rt::require(ctx, &t.shape, t.dtype) }?;
    ew(q, 0, &c, [&Op::T(t.clone()), &Op::N, &Op::N], 0.0, 0.0)?;
    let mut v = c;
    v.shape = vec![r, k];
    v.strides = vec![k, 1];
    Ok((v, true))
}

/// Runs `f` on `out` as a [rows, k] matrix; when its strides do not
/// collapse, on a contiguous temporary copied into `out` afterwards.
unsafe fn with_rows(ctx: ContextHandle, q: Q, out: &T, f: impl FnOnce(&T) -> R<()>) -> R<()> {
    // SAFETY: forwarded.
    let (v, copied) = unsafe { rows(ctx, q, out) }?;
    f(&v)?;
    if copied {
        let mut back = v.clone();
        back.shape = out.shape.clone();
        back.strides = crate::ops::contiguous(&out.shape);
        ew(q, 0, out, [&Op::T(back), &Op::N, &Op::N], 0.0, 0.0)?;
    }
    Ok(())
}

unsafe fn linear(ctx: ContextHandle, q: Q, out: &T, x: &T, w: &T, bias: Option<&T>) -> R<()> {
    if x.ndim() == 0 || out.ndim() != x.ndim() {
        return Err(err(format!(
            "input of shape {:?} and out of shape {:?}",
            x.shape, out.shape
        )));
    }
    // SAFETY: forwarded.
    let (x2, _) = unsafe { rows(ctx, q, x) }?;
    let wt = V::mat(w, "weight")?.t();
    // SAFETY: forwarded.
    unsafe {
        with_rows(ctx, q, out, |o2| {
            let o = V::mat(o2, "out")?;
            let c = bias
                .map(|b| bias_view(b, o.shape[1], o.shape[2], "bias"))
                .transpose()?;
            gemm(q, &o, &V::mat(&x2, "input")?, &wt, c.as_ref(), 1.0, 1.0)
        })
    }
}

/// The matmul of 1-, 2- and 3-D operands (batch broadcast).
fn matmul(q: Q, out: &T, a: &T, b: &T) -> R<()> {
    let va = match a.ndim() {
        1 => V {
            t: a.clone(),
            shape: [1, 1, a.shape[0]],
            strides: [0, 0, a.strides[0]],
        },
        2 => V::mat(a, "input")?,
        3 => V::batch(a, "input")?,
        n => {
            return Err(err(format!(
                "input has {n} dimensions; 1 to 3 are supported"
            )))
        }
    };
    let vb = match b.ndim() {
        1 => V {
            t: b.clone(),
            shape: [1, b.shape[0], 1],
            strides: [0, b.strides[0], 0],
        },
        2 => V::mat(b, "other")?,
        3 => V::batch(b, "other")?,
        n => {
            return Err(err(format!(
                "other has {n} dimensions; 1 to 3 are supported"
            )))
        }
    };
    let batch = va.shape[0].max(vb.shape[0]);
    let (m, n) = (va.shape[1], vb.shape[2]);
    let mut want: Vec<i64> = Vec::new();
    if a.ndim() == 3 || b.ndim() == 3 {
        want.push(batch);
    }
    if a.ndim() >= 2 {
        want.push(m);
    }
    if b.ndim() >= 2 {
        want.push(n);
    }
    if out.shape != want {
        return Err(err(format!(
            "out has shape {:?}; {:?} @ {:?} gives {want:?}",
            out.shape, a.shape, b.shape
        )));
    }
    // The out's strides for (batch, m, n), 0 where it lacks the dimension.
    let mut s = out.strides.iter().copied();
    let sb = if want.len() == 3 || (a.ndim() == 3 || b.ndim() == 3) {
        s.next().unwrap_or(0)
    } else {
        0
    };
    let sm = if a.ndim() >= 2 {
        s.next().unwrap_or(0)
    } else {
        0
    };
    let sn = if b.ndim() >= 2 {
        s.next().unwrap_or(0)
    } else {
        0
    };
    let vo = V {
        t: out.clone(),
        shape: [batch, m, n],
        strides: [sb, sm, sn],
    };
    let bc = |v: V| {
        if v.shape[0] == 1 {
            V {
                strides: [0, v.strides[1], v.strides[2]],
                ..v
            }
        } else {
            v
        }
    };
    gemm(q, &vo, &bc(va), &bc(vb), None, 1.0, 0.0)
}

entry! {
    fn diopiMm[ctx, q](out: TensorHandle, input: ConstTensorHandle, mat2: ConstTensorHandle) {
        let o = V::mat(&rt::tensor_mut(out, "out")?, "out")?;
        gemm(q, &o, &V::mat(&rt::tensor(input, "input")?, "input")?, &V::mat(&rt::tensor(mat2, "mat2")?, "mat2")?, None, 1.0, 0.0)
    }
    fn diopiBmm[ctx, q](out: TensorHandle, input: ConstTensorHandle, mat2: ConstTensorHandle) {
        let o = V::batch(&rt::tensor_mut(out, "out")?, "out")?;
        gemm(q, &o, &V::batch(&rt::tensor(input, "input")?, "input")?, &V::batch(&rt::tensor(mat2, "mat2")?, "mat2")?, None, 1.0, 0.0)
    }
    fn diopiAddmm[ctx, q](out: TensorHandle, input: ConstTensorHandle, mat1: ConstTensorHandle, mat2: ConstTensorHandle, beta: *const DiopiScalar, alpha: *const DiopiScalar) {
        let o = V::mat(&rt::tensor_mut(out, "out")?, "out")?;
        let c = bias_view(&rt::tensor(input, "input")?, o.shape[1], o.shape[2], "input")?;
        let (beta, alpha) = (rt::scalar(beta, "beta")?.f64(), rt::scalar(alpha, "alpha")?.f64());
        gemm(q, &o, &V::mat(&rt::tensor(mat1, "mat1")?, "mat1")?, &V::mat(&rt::tensor(mat2, "mat2")?, "mat2")?, Some(&c), alpha, beta)
    }
    fn diopiBaddbmm[ctx, q](out: TensorHandle, input: ConstTensorHandle, batch1: ConstTensorHandle, batch2: ConstTensorHandle, beta: f64, alpha: f64) {
        let o = V::batch(&rt::tensor_mut(out, "out")?, "out")?;
        let i = rt::tensor(input, "input")?;
        Td::bcast(&i, &o.shape, "input")?;
        let st = bcast_strides(&i, &o.shape);
        let c = V { t: i, shape: o.shape, strides: [st[0], st[1], st[2]] };
        gemm(q, &o, &V::batch(&rt::tensor(batch1, "batch1")?, "batch1")?, &V::batch(&rt::tensor(batch2, "batch2")?, "batch2")?, Some(&c), alpha, beta)
    }
    fn diopiMatmul[ctx, q](out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) {
        matmul(q, &rt::tensor_mut(out, "out")?, &rt::tensor(input, "input")?, &rt::tensor(other, "other")?)
    }
    fn diopiLinear[ctx, q](out: TensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, bias: ConstTensorHandle) {
        let o = rt::tensor_mut(out, "out")?;
        let b = rt::opt_tensor(bias, "bias")?;
        linear(ctx, q, &o, &rt::tensor(input, "input")?, &rt::tensor(weight, "weight")?, b.as_ref())
    }
    fn diopiLinearBackward[ctx, q](grad_input: TensorHandle, grad_weight: TensorHandle, grad_bias: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle) {
        let go = rt::tensor(grad_output, "grad_output")?;
        let x = rt::tensor(input, "input")?;
        let w = rt::tensor(weight, "weight")?;
        let (go2, _) = rows(ctx, q, &go)?;
        let (x2, _) = rows(ctx, q, &x)?;
        let wv = V::mat(&w, "weight")?;
        if !grad_input.is_null() {
            let gi = rt::tensor_mut(grad_input, "grad_input")?;
            with_rows(ctx, q, &gi, |gi2| gemm(q, &V::mat(gi2, "grad_input")?, &V::mat(&go2, "grad_output")?, &wv, None, 1.0, 0.0))?;
        }
        if !grad_weight.is_null() {
            let gw = rt::tensor_mut(grad_weight, "grad_weight")?;
            gemm(q, &V::mat(&gw, "grad_weight")?, &V::mat(&go2, "grad_output")?.t(), &V::mat(&x2, "input")?, None, 1.0, 0.0)?;
        }
        if !grad_bias.is_null() {
            let gb = rt::tensor_mut(grad_bias, "grad_bias")?;
            check_float(q, &[(&gb, "grad_bias"), (&go2, "grad_output")])?;
            reduce(q, &gb, &go2, &[0], 0)?;
        }
        Ok(())
    }
}
