//! Entry points: reductions, softmax and matrix products.

use super::{check_bcast, check_float, check_shape, go, norm_dim};
use crate::matmul;
use crate::reduce;
use crate::rt::{self, err, R};
use crate::types::*;
use crate::view::TView;

macro_rules! entry {
    ($name:ident($($a:ident: $t:ty),*) $body:block) => {
        #[no_mangle]
        unsafe extern "C" fn $name($($a: $t),*) -> i32 {
            rt::guard(&stringify!($name)[5..], || {
                // SAFETY: the arguments are the framework's handles and pointers, valid for this call.
                unsafe { $body }
            })
        }
    };
}
pub(crate) use entry;

unsafe fn sum_like(
    ctx: ContextHandle,
    oh: TensorHandle,
    ih: ConstTensorHandle,
    dim: DiopiSize,
    mean: bool,
) -> R<()> {
    // SAFETY: framework handles and a borrowed list.
    let (o, x, dims) = unsafe {
        (
            rt::tensor_mut(oh, "out")?,
            rt::tensor(ih, "input")?,
            rt::size(dim),
        )
    };
    let mut red = vec![dims.is_empty(); x.ndim];
    for d in dims {
        let d = norm_dim(d, x.ndim, "dim")?;
        if x.ndim > 0 {
            red[d] = true;
        }
    }
    let kept: i64 = x
        .shape()
        .iter()
        .zip(&red)
        .map(|(&s, &r)| if r { 1 } else { s })
        .product();
    if o.numel() as i64 != kept {
        return Err(err(format!(
            "out has {} elements; reducing {:?} over the given dims leaves {kept}",
            o.numel(),
            x.shape()
        )));
    }
    if mean {
        check_float(&o, "out")?;
    }
    // SAFETY: framework handles.
    unsafe { go(ctx, oh, move || reduce::sum(&o, &x, &red, mean)) }
}

entry!(diopiSum(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim: DiopiSize) { sum_like(ctx, out, input, dim, false) });
entry!(diopiMean(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim: DiopiSize) { sum_like(ctx, out, input, dim, true) });

unsafe fn max_like(
    ctx: ContextHandle,
    vh: TensorHandle,
    ih: TensorHandle,
    xh: ConstTensorHandle,
    dim: i64,
    is_max: bool,
) -> R<()> {
    // SAFETY: framework handles.
    let (v, i, x) = unsafe {
        (
            rt::opt_tensor(vh, "values")?,
            rt::opt_tensor(ih, "indices")?,
            rt::tensor(xh, "input")?,
        )
    };
    let d = norm_dim(dim, x.ndim, "dim")?;
    if x.numel() == 0 {
        return Err(err("cannot reduce an empty tensor"));
    }
    let len = if x.ndim == 0 { 1 } else { x.shape[d] as usize };
    for t in [&v, &i].into_iter().flatten() {
        if t.numel() != x.numel() / len {
            return Err(err(format!(
                "an output has {} elements, expected {}",
                t.numel(),
                x.numel() / len
            )));
        }
    }
    let dd = if x.ndim == 0 { 0 } else { d };
    let x = if x.ndim == 0 {
        TView::new(x.ptr, x.dtype, &[1], &[1])
    } else {
        x
    };
    // SAFETY: framework handles.
    unsafe {
        go(ctx, vh, move || {
            reduce::max_dim(v.as_ref(), i.as_ref(), &x, dd, is_max)
        })
    }
}

entry!(diopiMax(ctx: ContextHandle, max: TensorHandle, max_indices: TensorHandle, input: ConstTensorHandle, dim: i64) { max_like(ctx, max, max_indices, input, dim, true) });
entry!(diopiMin(ctx: ContextHandle, min: TensorHandle, min_indices: TensorHandle, input: ConstTensorHandle, dim: i64) { max_like(ctx, min, min_indices, input, dim, false) });

unsafe fn all_like(
    ctx: ContextHandle,
    oh: TensorHandle,
    xh: ConstTensorHandle,
    is_max: bool,
) -> R<()> {
    // SAFETY: framework handles.
    let (o, x) = unsafe { (rt::tensor_mut(oh, "out")?, rt::tensor(xh, "input")?) };
    if x.numel() == 0 {
        return Err(err("cannot reduce an empty tensor"));
    }
    if o.numel() != 1 {
        return Err(err("out must have one element"));
    }
    // SAFETY: framework handles.
    unsafe { go(ctx, oh, move || reduce::max_all(&o, &x, is_max)) }
}

entry!(diopiMaxAll(ctx: ContextHandle, max: TensorHandle, input: ConstTensorHandle) { all_like(ctx, max, input, true) });
entry!(diopiMinAll(ctx: ContextHandle, min: TensorHandle, input: ConstTensorHandle) { all_like(ctx, min, input, false) });

entry!(diopiArgmax(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim: *const i64, _keepdim: bool) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    if x.numel() == 0 {
        return Err(err("cannot reduce an empty tensor"));
    }
    let d = if dim.is_null() || x.ndim == 0 { None } else { Some(norm_dim(*dim, x.ndim, "dim")?) };
    let expect = match d {
        Some(d) => x.numel() / x.shape[d] as usize,
        None => 1,
    };
    if o.numel() != expect {
        return Err(err(format!("out has {} elements, expected {expect}", o.numel())));
    }
    go(ctx, out, move || reduce::argmax(&o, &x, d))
});

unsafe fn softmax_like(
    ctx: ContextHandle,
    oh: TensorHandle,
    xh: ConstTensorHandle,
    dim: i64,
    log: bool,
) -> R<()> {
    // SAFETY: framework handles.
    let (o, x) = unsafe { (rt::tensor_mut(oh, "out")?, rt::tensor(xh, "input")?) };
    check_float(&o, "out")?;
    check_shape(&o, x.shape(), "out")?;
    let d = norm_dim(dim, x.ndim, "dim")?;
    let (o, x, d) = if x.ndim == 0 {
        (
            TView::new(o.ptr, o.dtype, &[1], &[1]),
            TView::new(x.ptr, x.dtype, &[1], &[1]),
            0,
        )
    } else {
        (o, x, d)
    };
    // SAFETY: framework handles.
    unsafe { go(ctx, oh, move || reduce::softmax(&o, &x, d, log)) }
}

entry!(diopiSoftmax(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim: i64) { softmax_like(ctx, out, input, dim, false) });
entry!(diopiLogSoftmax(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim: i64) { softmax_like(ctx, out, input, dim, true) });

unsafe fn softmax_back(
    ctx: ContextHandle,
    gh: TensorHandle,
    goh: ConstTensorHandle,
    yh: ConstTensorHandle,
    dim: i64,
    log: bool,
) -> R<()> {
    // SAFETY: framework handles.
    let (gi, g, y) = unsafe {
        (
            rt::tensor_mut(gh, "grad_input")?,
            rt::tensor(goh, "grad_output")?,
            rt::tensor(yh, "output")?,
        )
    };
    check_float(&gi, "grad_input")?;
    check_shape(&gi, y.shape(), "grad_input")?;
    check_shape(&g, y.shape(), "grad_output")?;
    let d = norm_dim(dim, y.ndim, "dim")?;
    let one = |v: TView| {
        if v.ndim == 0 {
            TView::new(v.ptr, v.dtype, &[1], &[1])
        } else {
            v
        }
    };
    let (gi, g, y) = (one(gi), one(g), one(y));
    // SAFETY: framework handles.
    unsafe {
        go(ctx, gh, move || {
            reduce::softmax_backward(&gi, &g, &y, d, log)
        })
    }
}

entry!(diopiSoftmaxBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, output: ConstTensorHandle, dim: i64) { softmax_back(ctx, grad_input, grad_output, output, dim, false) });
entry!(diopiLogSoftmaxBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, output: ConstTensorHandle, dim: i64) { softmax_back(ctx, grad_input, grad_output, output, dim, true) });

fn check_mm(o: &TView, a: &TView, b: &TView, nd: usize) -> R<()> {
    for (t, n) in [(o, "out"), (a, "input"), (b, "mat2")] {
        if t.ndim != nd {
            return Err(err(format!(
                "{n} must have {nd} dimensions, not {}",
                t.ndim
            )));
        }
        check_float(t, n)?;
    }
    let (m, k, n) = (a.shape[nd - 2], a.shape[nd - 1], b.shape[nd - 1]);
    if b.shape[nd - 2] != k {
        return Err(err(format!(
            "cannot multiply {:?} by {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let mut want = a.shape()[..nd - 2].to_vec();
    if nd == 3 && b.shape[0] != a.shape[0] {
        return Err(err(format!(
            "batch sizes differ: {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    want.extend([m, n]);
    check_shape(o, &want, "out")
}

entry!(diopiMm(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, mat2: ConstTensorHandle) {
    let (o, a, b) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(mat2, "mat2")?);
    check_mm(&o, &a, &b, 2)?;
    go(ctx, out, move || matmul::bgemm(&o, &a, &b, None, 1.0, 0.0))
});

entry!(diopiBmm(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, mat2: ConstTensorHandle) {
    let (o, a, b) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(mat2, "mat2")?);
    check_mm(&o, &a, &b, 3)?;
    go(ctx, out, move || matmul::bgemm(&o, &a, &b, None, 1.0, 0.0))
});

entry!(diopiAddmm(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, mat1: ConstTensorHandle, mat2: ConstTensorHandle, beta: *const DiopiScalar, alpha: *const DiopiScalar) {
    let (o, i, a, b) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(mat1, "mat1")?, rt::tensor(mat2, "mat2")?);
    check_mm(&o, &a, &b, 2)?;
    check_bcast(&o, &i, "input")?;
    let (be, al) = (rt::opt_scalar(beta).map_or(1.0, |s| s.f64()), rt::opt_scalar(alpha).map_or(1.0, |s| s.f64()));
    go(ctx, out, move || matmul::bgemm(&o, &a, &b, Some(&i), al, be))
});

entry!(diopiBaddbmm(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, batch1: ConstTensorHandle, batch2: ConstTensorHandle, beta: f64, alpha: f64) {
    let (o, i, a, b) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(batch1, "batch1")?, rt::tensor(batch2, "batch2")?);
    check_mm(&o, &a, &b, 3)?;
    check_bcast(&o, &i, "input")?;
    go(ctx, out, move || matmul::bgemm(&o, &a, &b, Some(&i), alpha, beta))
});

entry!(diopiMatmul(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) {
    let (o, a, b) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(other, "other")?);
    for (t, n) in [(&o, "out"), (&a, "input"), (&b, "other")] {
        check_float(t, n)?;
    }
    let want = matmul::matmul_shape(a.shape(), b.shape()).ok_or_else(|| err(format!("cannot matmul {:?} and {:?}", a.shape(), b.shape())))?;
    check_shape(&o, &want, "out")?;
    if want.len() > crate::view::MAX_DIMS - 1 {
        return Err(err("too many dimensions"));
    }
    go(ctx, out, move || matmul::matmul(&o, &a, &b))
});

entry!(diopiMatmulBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_other: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, other: ConstTensorHandle) {
    let (gi, gb) = (rt::opt_tensor(grad_input, "grad_input")?, rt::opt_tensor(grad_other, "grad_other")?);
    let (g, a, b) = (rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?, rt::tensor(other, "other")?);
    if a.ndim < 2 || b.ndim < 2 {
        return Err(Error { code: error::NO_IMPLEMENT, msg: "1-D operands are not supported by MatmulBackward".into() });
    }
    if matmul::matmul_shape(a.shape(), b.shape()).as_deref() != Some(g.shape()) {
        return Err(err("grad_output's shape does not match matmul(input, other)"));
    }
    if let Some(t) = &gi {
        check_shape(t, a.shape(), "grad_input")?;
    }
    if let Some(t) = &gb {
        check_shape(t, b.shape(), "grad_other")?;
    }
    let dev = if grad_input.is_null() { grad_other } else { grad_input };
    go(ctx, dev, move || matmul::matmul_backward(gi.as_ref(), gb.as_ref(), &g, &a, &b))
});

use crate::rt::Error;

entry!(diopiLinear(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, bias: ConstTensorHandle) {
    let (o, x, w, b) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(weight, "weight")?, rt::opt_tensor(bias, "bias")?);
    check_float(&o, "out")?;
    if w.ndim != 2 || x.ndim < 1 || x.shape[x.ndim - 1] != w.shape[1] {
        return Err(err(format!("linear: input {:?} does not fit weight {:?}", x.shape(), w.shape())));
    }
    let mut want = x.shape()[..x.ndim - 1].to_vec();
    want.push(w.shape[0]);
    check_shape(&o, &want, "out")?;
    if let Some(b) = &b {
        check_shape(b, &[w.shape[0]], "bias")?;
    }
    go(ctx, out, move || matmul::linear(&o, &x, &w, b.as_ref()))
});

entry!(diopiLinearBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_weight: TensorHandle, grad_bias: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle) {
    let (gi, gw, gb) = (rt::opt_tensor(grad_input, "grad_input")?, rt::opt_tensor(grad_weight, "grad_weight")?, rt::opt_tensor(grad_bias, "grad_bias")?);
    let (g, x, w) = (rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?, rt::tensor(weight, "weight")?);
    if w.ndim != 2 || x.ndim < 1 || x.shape[x.ndim - 1] != w.shape[1] {
        return Err(err(format!("linear: input {:?} does not fit weight {:?}", x.shape(), w.shape())));
    }
    let mut want = x.shape()[..x.ndim - 1].to_vec();
    want.push(w.shape[0]);
    check_shape(&g, &want, "grad_output")?;
    if let Some(t) = &gi {
        check_shape(t, x.shape(), "grad_input")?;
    }
    if let Some(t) = &gw {
        check_shape(t, w.shape(), "grad_weight")?;
    }
    if let Some(t) = &gb {
        check_shape(t, &[w.shape[0]], "grad_bias")?;
    }
    go(ctx, grad_output, move || matmul::linear_backward(gi.as_ref(), gw.as_ref(), gb.as_ref(), &g, &x, &w))
});
