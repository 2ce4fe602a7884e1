//! Entry points: indexing and shape copies, random numbers, optimizers.

use super::linalg::entry;
use super::{check_f32_f64, check_float, check_index, check_shape, go, norm_dim};
use crate::index;
use crate::optim::{self, AdamOpts, SgdOpts};
use crate::random::{self, Stream};
use crate::rt::{self, err, R};
use crate::types::*;
use crate::view::{self, TView};

entry!(diopiEmbedding(ctx: ContextHandle, out: TensorHandle, weight: ConstTensorHandle, indices: ConstTensorHandle, _padding_idx: i64, _scale_grad_byfreq: bool, _sparse: bool) {
    let (o, w, i) = (rt::tensor_mut(out, "out")?, rt::tensor(weight, "weight")?, rt::tensor(indices, "indices")?);
    check_index(&i, "indices")?;
    if w.ndim != 2 {
        return Err(err("weight must be 2-D"));
    }
    let mut want = i.shape().to_vec();
    want.push(w.shape[1]);
    check_shape(&o, &want, "out")?;
    go(ctx, out, move || index::embedding(&o, &w, &i))
});

entry!(diopiEmbeddingBackward(ctx: ContextHandle, out: TensorHandle, grad: ConstTensorHandle, indices: ConstTensorHandle, num_weights: i64, padding_idx: i64, scale_grad_byfreq: bool, _sparse: bool) {
    let (o, g, i) = (rt::tensor_mut(out, "out")?, rt::tensor(grad, "grad")?, rt::tensor(indices, "indices")?);
    check_index(&i, "indices")?;
    check_float(&o, "out")?;
    let d = if g.ndim == 0 { 1 } else { g.shape[g.ndim - 1] };
    check_shape(&o, &[num_weights, d], "out")?;
    if g.numel() as i64 != i.numel() as i64 * d {
        return Err(err("grad does not match indices"));
    }
    go(ctx, out, move || index::embedding_backward(&o, &g, &i, padding_idx, scale_grad_byfreq))
});

entry!(diopiIndexSelect(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim: i64, index: ConstTensorHandle) {
    let (o, x, i) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?, rt::tensor(index, "index")?);
    check_index(&i, "index")?;
    let d = norm_dim(dim, x.ndim, "dim")?;
    let mut want = x.shape().to_vec();
    if x.ndim > 0 {
        want[d] = i.numel() as i64;
    }
    check_shape(&o, &want, "out")?;
    go(ctx, out, move || index::index_select(&o, &x, d, &i))
});

entry!(diopiIndexSelectBackward(ctx: ContextHandle, grad_input: TensorHandle, grad: ConstTensorHandle, input_sizes: DiopiSize, dim: i64, index: ConstTensorHandle) {
    let (gi, g, i) = (rt::tensor_mut(grad_input, "grad_input")?, rt::tensor(grad, "grad")?, rt::tensor(index, "index")?);
    check_index(&i, "index")?;
    let sizes = rt::size(input_sizes);
    check_shape(&gi, &sizes, "grad_input")?;
    let d = norm_dim(dim, gi.ndim, "dim")?;
    let mut want = sizes.clone();
    if gi.ndim > 0 {
        want[d] = i.numel() as i64;
    }
    check_shape(&g, &want, "grad")?;
    go(ctx, grad_input, move || index::index_select_backward(&gi, &g, d, &i))
});

unsafe fn tensor_list(ts: *const ConstTensorHandle, n: i64) -> R<Vec<TView>> {
    if n < 0 || (n > 0 && ts.is_null()) {
        return Err(err("bad tensor list"));
    }
    // SAFETY: n handles at ts, from the caller.
    (0..n as usize)
        .map(|k| unsafe { rt::tensor(*ts.add(k), "tensors[k]") })
        .collect()
}

entry!(diopiCat(ctx: ContextHandle, out: TensorHandle, tensors: *mut ConstTensorHandle, num_inputs: i64, dim: i64) {
    let o = rt::tensor_mut(out, "out")?;
    let ins = tensor_list(tensors, num_inputs)?;
    let d = norm_dim(dim, o.ndim, "dim")?;
    let mut total = 0;
    for t in &ins {
        if t.ndim == 1 && t.shape[0] == 0 && o.ndim != 1 {
            continue;
        }
        if t.ndim != o.ndim || (0..o.ndim).any(|k| k != d && t.shape[k] != o.shape[k]) {
            return Err(err(format!("cannot concatenate {:?} into {:?} along {d}", t.shape(), o.shape())));
        }
        total += t.shape[d];
    }
    if o.ndim == 0 || total != o.shape[d] {
        return Err(err(format!("the inputs add up to {total} along dim {d}, out has {:?}", o.shape())));
    }
    go(ctx, out, move || index::cat(&o, &ins, d))
});

entry!(diopiStack(ctx: ContextHandle, out: TensorHandle, tensors: *mut ConstTensorHandle, num_tensors: i64, dim: i64) {
    let o = rt::tensor_mut(out, "out")?;
    let ins = tensor_list(tensors, num_tensors)?;
    let d = norm_dim(dim, o.ndim, "dim")?;
    if o.ndim == 0 || o.shape[d] != ins.len() as i64 {
        return Err(err("out's stacked dim must equal the number of tensors"));
    }
    let mut want = o.shape().to_vec();
    want.remove(d);
    for t in &ins {
        check_shape(t, &want, "tensors[k]")?;
    }
    go(ctx, out, move || index::stack(&o, &ins, d))
});

entry!(diopiTranspose(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dim0: i64, dim1: i64) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    let (a, b) = (norm_dim(dim0, x.ndim, "dim0")?, norm_dim(dim1, x.ndim, "dim1")?);
    let t = if x.ndim == 0 { x } else { x.transposed(a, b) };
    check_shape(&o, t.shape(), "out")?;
    go(ctx, out, move || view::copy(&o, &t))
});

entry!(diopiPermute(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, dims: DiopiSize) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    let ds = rt::size(dims);
    if ds.len() != x.ndim {
        return Err(err("dims must list every dimension once"));
    }
    let mut perm = Vec::with_capacity(ds.len());
    for d in ds {
        let n = norm_dim(d, x.ndim, "dims")?;
        if perm.contains(&n) {
            return Err(err("dims must list every dimension once"));
        }
        perm.push(n);
    }
    let p = view::permuted(&x, &perm);
    check_shape(&o, p.shape(), "out")?;
    go(ctx, out, move || view::copy(&o, &p))
});

unsafe fn tri_entry(
    ctx: ContextHandle,
    oh: TensorHandle,
    xh: ConstTensorHandle,
    diagonal: i64,
    upper: bool,
) -> R<()> {
    // SAFETY: framework handles.
    let (o, x) = unsafe { (rt::tensor_mut(oh, "out")?, rt::tensor(xh, "input")?) };
    if x.ndim < 2 {
        return Err(err("tril/triu need 2 or more dims"));
    }
    check_shape(&o, x.shape(), "out")?;
    // SAFETY: framework handles.
    unsafe { go(ctx, oh, move || index::tri(&o, &x, diagonal, upper)) }
}

entry!(diopiTril(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, diagonal: i64) { tri_entry(ctx, out, input, diagonal, false) });
entry!(diopiTriu(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, diagonal: i64) { tri_entry(ctx, out, input, diagonal, true) });

entry!(diopiArange(ctx: ContextHandle, out: TensorHandle, start: *const DiopiScalar, end: *const DiopiScalar, step: *const DiopiScalar) {
    let o = rt::tensor_mut(out, "out")?;
    let (s, e, st) = (rt::scalar(start, "start")?, rt::scalar(end, "end")?, rt::scalar(step, "step")?);
    if st.f64() == 0.0 {
        return Err(err("step must not be 0"));
    }
    let n = ((e.f64() - s.f64()) / st.f64()).ceil().max(0.0) as usize;
    if o.numel() != n {
        return Err(err(format!("out has {} elements, arange gives {n}", o.numel())));
    }
    go(ctx, out, move || index::arange(&o, s, st))
});

entry!(diopiContiguous(ctx: ContextHandle, out: *mut TensorHandle, input: ConstTensorHandle, memory_format: i32) {
    if out.is_null() {
        return Err(err("out is NULL"));
    }
    let x = rt::tensor(input, "input")?;
    let shape = x.shape().to_vec();
    let strides = match memory_format {
        1 if x.ndim == 4 => {
            let (c, h, w) = (shape[1], shape[2], shape[3]);
            vec![h * w * c, 1, w * c, c]
        }
        0 | 3 | 1 => view::contiguous_strides(&shape),
        _ => return Err(err(format!("memory format {memory_format} is not supported"))),
    };
    let h = rt::require_tensor(ctx, input, &shape, &strides, x.dtype)?;
    let o = rt::tensor_mut(h, "out")?;
    *out = h;
    go(ctx, h, move || view::copy(&o, &x))
});

unsafe fn stream_of(g: GeneratorHandle) -> R<Stream> {
    // SAFETY: framework generator.
    let (seed, offset) = unsafe { rt::philox_seed(g, 4)? };
    Ok(Stream { seed, offset })
}

entry!(diopiDropout(ctx: ContextHandle, out: TensorHandle, mask: TensorHandle, input: ConstTensorHandle, p: f64, train: bool, generator: GeneratorHandle) {
    let (o, m, x) = (rt::tensor_mut(out, "out")?, rt::opt_tensor(mask, "mask")?, rt::tensor(input, "input")?);
    check_float(&o, "out")?;
    check_shape(&o, x.shape(), "out")?;
    if let Some(m) = &m {
        check_shape(m, x.shape(), "mask")?;
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(err("p must be in [0, 1]"));
    }
    let s = if train && p > 0.0 { stream_of(generator)? } else { Stream { seed: 0, offset: 0 } };
    go(ctx, out, move || random::dropout(&o, m.as_ref(), &x, p, train, s))
});

entry!(diopiDropoutInp(ctx: ContextHandle, input: TensorHandle, mask: TensorHandle, p: f64, train: bool, generator: GeneratorHandle) {
    let (o, m) = (rt::tensor_mut(input, "input")?, rt::opt_tensor(mask, "mask")?);
    check_float(&o, "input")?;
    if let Some(m) = &m {
        check_shape(m, o.shape(), "mask")?;
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(err("p must be in [0, 1]"));
    }
    let s = if train && p > 0.0 { stream_of(generator)? } else { Stream { seed: 0, offset: 0 } };
    go(ctx, input, move || random::dropout(&o, m.as_ref(), &o, p, train, s))
});

entry!(diopiUniformInp(ctx: ContextHandle, inout: TensorHandle, from: f64, to: f64, generator: GeneratorHandle) {
    let o = rt::tensor_mut(inout, "inout")?;
    check_float(&o, "inout")?;
    if to < from {
        return Err(err("from must not exceed to"));
    }
    let s = stream_of(generator)?;
    go(ctx, inout, move || random::uniform(&o, from, to, s))
});

entry!(diopiNormal(ctx: ContextHandle, out: TensorHandle, mean: f64, std: f64, generator: GeneratorHandle) {
    let o = rt::tensor_mut(out, "out")?;
    check_float(&o, "out")?;
    if std < 0.0 {
        return Err(err("std must be non-negative"));
    }
    let s = stream_of(generator)?;
    go(ctx, out, move || random::normal(&o, mean, std, s))
});

entry!(diopiNormalInp(ctx: ContextHandle, inout: TensorHandle, mean: f64, std: f64, generator: GeneratorHandle) {
    let o = rt::tensor_mut(inout, "inout")?;
    check_float(&o, "inout")?;
    if std < 0.0 {
        return Err(err("std must be non-negative"));
    }
    let s = stream_of(generator)?;
    go(ctx, inout, move || random::normal(&o, mean, std, s))
});

entry!(diopiRandomInp(ctx: ContextHandle, inout: TensorHandle, from: i64, to: *const i64, generator: GeneratorHandle) {
    let o = rt::tensor_mut(inout, "inout")?;
    let to = (!to.is_null()).then(|| *to);
    if matches!(to, Some(t) if t <= from) {
        return Err(err("to must exceed from"));
    }
    let s = stream_of(generator)?;
    go(ctx, inout, move || random::random(&o, from, to, s))
});

fn same_shape(ts: &[(&TView, &str)], shape: &[i64]) -> R<()> {
    for (t, n) in ts {
        check_shape(t, shape, n)?;
        check_f32_f64(t, n, true)?;
    }
    Ok(())
}

entry!(diopiSgd(ctx: ContextHandle, param: TensorHandle, grad: TensorHandle, buf: TensorHandle, lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: bool) {
    let (p, g, b) = (rt::tensor_mut(param, "param")?, rt::tensor(grad, "grad")?, rt::opt_tensor(buf, "buf")?);
    same_shape(&[(&p, "param"), (&g, "grad")], p.shape())?;
    if let Some(b) = &b {
        same_shape(&[(b, "buf")], p.shape())?;
    }
    if momentum != 0.0 && b.is_none() {
        return Err(err("momentum needs buf"));
    }
    let o = SgdOpts { lr, momentum, dampening, wd: weight_decay, nesterov };
    go(ctx, param, move || optim::sgd(&p, &g, b.as_ref(), o))
});

#[allow(clippy::too_many_arguments)]
unsafe fn adam_entry(
    ctx: ContextHandle,
    ph: TensorHandle,
    gh: ConstTensorHandle,
    m1h: TensorHandle,
    m2h: TensorHandle,
    mxh: TensorHandle,
    o: AdamOpts,
) -> R<()> {
    // SAFETY: framework handles.
    let (p, g, m1, m2, mx) = unsafe {
        (
            rt::tensor_mut(ph, "param")?,
            rt::tensor(gh, "grad")?,
            rt::tensor_mut(m1h, "exp_avg")?,
            rt::tensor_mut(m2h, "exp_avg_sq")?,
            rt::opt_tensor(mxh, "max_exp_avg_sq")?,
        )
    };
    same_shape(
        &[
            (&p, "param"),
            (&g, "grad"),
            (&m1, "exp_avg"),
            (&m2, "exp_avg_sq"),
        ],
        p.shape(),
    )?;
    if o.amsgrad {
        match &mx {
            Some(t) => same_shape(&[(t, "max_exp_avg_sq")], p.shape())?,
            None => return Err(err("amsgrad needs max_exp_avg_sq")),
        }
    }
    if o.step < 1 {
        return Err(err("step must be 1 or more"));
    }
    // SAFETY: framework handles.
    unsafe {
        go(ctx, ph, move || {
            optim::adam(&p, &g, &m1, &m2, mx.as_ref(), o)
        })
    }
}

entry!(diopiAdam(ctx: ContextHandle, param: TensorHandle, grad: ConstTensorHandle, exp_avg: TensorHandle, exp_avg_sq: TensorHandle, max_exp_avg_sq: TensorHandle, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, step: i64, amsgrad: bool) {
    adam_entry(ctx, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, AdamOpts { lr, beta1, beta2, eps, wd: weight_decay, step, amsgrad, decoupled: false })
});

entry!(diopiAdamW(ctx: ContextHandle, param: TensorHandle, grad: ConstTensorHandle, exp_avg: TensorHandle, exp_avg_sq: TensorHandle, max_exp_avg_sq: TensorHandle, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, step: i64, amsgrad: bool) {
    adam_entry(ctx, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, AdamOpts { lr, beta1, beta2, eps, wd: weight_decay, step, amsgrad, decoupled: true })
});
