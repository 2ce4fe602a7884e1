//! Entry points: convolution, normalisation, pooling and losses.

use super::linalg::entry;
use super::{check_float, check_index, check_shape, go};
use crate::conv::{self, Geom};
use crate::loss::{self, LossOpts};
use crate::matmul::unsqueeze;
use crate::norm;
use crate::pool::{self, AvgOpts, Window};
use crate::rt::{self, err, R};
use crate::types::*;
use crate::view::TView;

/// A pair from a 1- or 2-element size list (`default` when empty).
fn pair(v: &[i64], name: &str, default: (i64, i64)) -> R<(i64, i64)> {
    match v {
        [] => Ok(default),
        [a] => Ok((*a, *a)),
        [a, b] => Ok((*a, *b)),
        _ => Err(err(format!(
            "{name} must have 1 or 2 entries, not {}",
            v.len()
        ))),
    }
}

/// A 3-D [C, H, W] view as [1, C, H, W].
fn batched(v: TView) -> TView {
    if v.ndim == 3 {
        unsqueeze(&v, 0)
    } else {
        v
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_geom(
    x: &TView,
    w: &TView,
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    groups: i64,
) -> R<Geom> {
    if x.ndim != 4 || w.ndim != 4 {
        return Err(err(format!(
            "conv2d needs 4-D input and weight, got {:?} and {:?}",
            x.shape(),
            w.shape()
        )));
    }
    let (s, p, d) = (
        pair(stride, "stride", (1, 1))?,
        pair(padding, "padding", (0, 0))?,
        pair(dilation, "dilation", (1, 1))?,
    );
    if groups < 1 || s.0 < 1 || s.1 < 1 || d.0 < 1 || d.1 < 1 || p.0 < 0 || p.1 < 0 {
        return Err(err(
            "stride, dilation and groups must be positive and padding non-negative",
        ));
    }
    let (c, o) = (x.shape[1], w.shape[0]);
    if c != w.shape[1] * groups || o % groups != 0 {
        return Err(err(format!(
            "input {:?} and weight {:?} do not fit groups {groups}",
            x.shape(),
            w.shape()
        )));
    }
    let oh = Geom::out_len(x.shape[2], w.shape[2], s.0, p.0, d.0);
    let ow = Geom::out_len(x.shape[3], w.shape[3], s.1, p.1, d.1);
    if oh < 1 || ow < 1 {
        return Err(err("the kernel is larger than the padded input"));
    }
    let u = |v: i64| v as usize;
    Ok(Geom {
        n: u(x.shape[0]),
        c: u(c),
        h: u(x.shape[2]),
        w: u(x.shape[3]),
        o: u(o),
        kh: u(w.shape[2]),
        kw: u(w.shape[3]),
        oh: u(oh),
        ow: u(ow),
        stride: (u(s.0), u(s.1)),
        pad: (u(p.0), u(p.1)),
        dil: (u(d.0), u(d.1)),
        groups: u(groups),
    })
}

entry!(diopiConvolution2d(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, bias: ConstTensorHandle, stride: DiopiSize, padding: DiopiSize, dilation: DiopiSize, groups: i64) {
    let (o, x, w, b) = (batched(rt::tensor_mut(out, "out")?), batched(rt::tensor(input, "input")?), rt::tensor(weight, "weight")?, rt::opt_tensor(bias, "bias")?);
    check_float(&o, "out")?;
    let g = conv_geom(&x, &w, &rt::size(stride), &rt::size(padding), &rt::size(dilation), groups)?;
    check_shape(&o, &[g.n as i64, g.o as i64, g.oh as i64, g.ow as i64], "out")?;
    if let Some(b) = &b {
        check_shape(b, &[g.o as i64], "bias")?;
    }
    go(ctx, out, move || conv::forward(&o, &x, &w, b.as_ref(), g))
});

entry!(diopiConvolution2dBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_weight: TensorHandle, grad_bias: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, bias_sizes: *mut DiopiSize, stride: DiopiSize, padding: DiopiSize, dilation: DiopiSize, groups: i64) {
    let gi = rt::opt_tensor(grad_input, "grad_input")?.map(batched);
    let gw = rt::opt_tensor(grad_weight, "grad_weight")?;
    let gb = if bias_sizes.is_null() { None } else { rt::opt_tensor(grad_bias, "grad_bias")? };
    let (g, x, w) = (batched(rt::tensor(grad_output, "grad_output")?), batched(rt::tensor(input, "input")?), rt::tensor(weight, "weight")?);
    let geo = conv_geom(&x, &w, &rt::size(stride), &rt::size(padding), &rt::size(dilation), groups)?;
    check_shape(&g, &[geo.n as i64, geo.o as i64, geo.oh as i64, geo.ow as i64], "grad_output")?;
    if let Some(t) = &gi {
        check_shape(t, x.shape(), "grad_input")?;
    }
    if let Some(t) = &gw {
        check_shape(t, w.shape(), "grad_weight")?;
    }
    if let Some(t) = &gb {
        if t.numel() != geo.o {
            return Err(err(format!("grad_bias has {} elements, expected {}", t.numel(), geo.o)));
        }
    }
    go(ctx, grad_output, move || conv::backward(gi.as_ref(), gw.as_ref(), gb.as_ref(), &g, &x, &w, geo))
});

fn check_channels(t: &Option<TView>, c: i64, name: &str) -> R<()> {
    match t {
        Some(t) if t.numel() as i64 != c => Err(err(format!(
            "{name} has {} elements, expected {c}",
            t.numel()
        ))),
        _ => Ok(()),
    }
}

entry!(diopiBatchNorm(ctx: ContextHandle, out: TensorHandle, save_mean: TensorHandle, save_invstd: TensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, bias: ConstTensorHandle, running_mean: TensorHandle, running_var: TensorHandle, training: bool, momentum: f64, eps: f64) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    let (sm, si) = (rt::opt_tensor(save_mean, "save_mean")?, rt::opt_tensor(save_invstd, "save_invstd")?);
    let (w, b) = (rt::opt_tensor(weight, "weight")?, rt::opt_tensor(bias, "bias")?);
    let (rm, rv) = (rt::opt_tensor(running_mean, "running_mean")?, rt::opt_tensor(running_var, "running_var")?);
    check_float(&o, "out")?;
    if x.ndim < 2 {
        return Err(err("batch norm needs an input of 2 or more dims"));
    }
    check_shape(&o, x.shape(), "out")?;
    let c = x.shape[1];
    for (t, n) in [(&w, "weight"), (&b, "bias"), (&rm, "running_mean"), (&rv, "running_var")] {
        check_channels(t, c, n)?;
    }
    if training && x.numel() as i64 == c {
        return Err(err("batch norm in training needs more than one value per channel"));
    }
    go(ctx, out, move || norm::batch_norm(&o, sm.as_ref(), si.as_ref(), &x, w.as_ref(), b.as_ref(), rm.as_ref(), rv.as_ref(), training, momentum, eps))
});

entry!(diopiBatchNormBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_weight: TensorHandle, grad_bias: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, running_mean: ConstTensorHandle, running_var: ConstTensorHandle, save_mean: ConstTensorHandle, save_invstd: ConstTensorHandle, training: bool, eps: f64) {
    let (gi, gw, gb) = (rt::opt_tensor(grad_input, "grad_input")?, rt::opt_tensor(grad_weight, "grad_weight")?, rt::opt_tensor(grad_bias, "grad_bias")?);
    let (g, x, w) = (rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?, rt::opt_tensor(weight, "weight")?);
    let (rm, rv) = (rt::opt_tensor(running_mean, "running_mean")?, rt::opt_tensor(running_var, "running_var")?);
    let (sm, si) = (rt::opt_tensor(save_mean, "save_mean")?, rt::opt_tensor(save_invstd, "save_invstd")?);
    if x.ndim < 2 {
        return Err(err("batch norm needs an input of 2 or more dims"));
    }
    check_shape(&g, x.shape(), "grad_output")?;
    if let Some(t) = &gi {
        check_shape(t, x.shape(), "grad_input")?;
    }
    let c = x.shape[1];
    for (t, n) in [(&w, "weight"), (&rm, "running_mean"), (&rv, "running_var"), (&gw, "grad_weight"), (&gb, "grad_bias")] {
        check_channels(t, c, n)?;
    }
    if training && (sm.is_none() || si.is_none()) {
        return Err(err("training backward needs save_mean and save_invstd"));
    }
    go(ctx, grad_output, move || norm::batch_norm_backward(gi.as_ref(), gw.as_ref(), gb.as_ref(), &g, &x, w.as_ref(), rm.as_ref(), rv.as_ref(), sm.as_ref(), si.as_ref(), training, eps))
});

fn norm_len(x: &TView, ns: &[i64]) -> R<usize> {
    if ns.len() > x.ndim || x.shape()[x.ndim - ns.len()..] != *ns {
        return Err(err(format!(
            "normalized_shape {ns:?} does not end input's shape {:?}",
            x.shape()
        )));
    }
    Ok(ns.iter().product::<i64>() as usize)
}

entry!(diopiLayerNorm(ctx: ContextHandle, out: TensorHandle, save_mean: TensorHandle, save_invstd: TensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, bias: ConstTensorHandle, normalized_shape: DiopiSize, eps: f64) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    let (sm, si) = (rt::opt_tensor(save_mean, "save_mean")?, rt::opt_tensor(save_invstd, "save_invstd")?);
    let (w, b) = (rt::opt_tensor(weight, "weight")?, rt::opt_tensor(bias, "bias")?);
    check_float(&o, "out")?;
    check_shape(&o, x.shape(), "out")?;
    let d = norm_len(&x, &rt::size(normalized_shape))?;
    for (t, n) in [(&w, "weight"), (&b, "bias")] {
        check_channels(t, d as i64, n)?;
    }
    go(ctx, out, move || norm::layer_norm(&o, sm.as_ref(), si.as_ref(), &x, w.as_ref(), b.as_ref(), d, eps))
});

entry!(diopiLayerNormBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_weight: TensorHandle, grad_bias: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, _bias: ConstTensorHandle, mean: ConstTensorHandle, rstd: ConstTensorHandle, normalized_shape: DiopiSize) {
    let (gi, gw, gb) = (rt::opt_tensor(grad_input, "grad_input")?, rt::opt_tensor(grad_weight, "grad_weight")?, rt::opt_tensor(grad_bias, "grad_bias")?);
    let (g, x, w) = (rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?, rt::opt_tensor(weight, "weight")?);
    let (m, r) = (rt::tensor(mean, "mean")?, rt::tensor(rstd, "rstd")?);
    check_shape(&g, x.shape(), "grad_output")?;
    let d = norm_len(&x, &rt::size(normalized_shape))?;
    let rows = x.numel().checked_div(d).unwrap_or(0);
    if m.numel() != rows || r.numel() != rows {
        return Err(err(format!("mean and rstd need {rows} elements")));
    }
    if let Some(t) = &gi {
        check_shape(t, x.shape(), "grad_input")?;
    }
    for (t, n) in [(&w, "weight"), (&gw, "grad_weight"), (&gb, "grad_bias")] {
        check_channels(t, d as i64, n)?;
    }
    go(ctx, grad_output, move || norm::layer_norm_backward(gi.as_ref(), gw.as_ref(), gb.as_ref(), &g, &x, w.as_ref(), &m, &r, d))
});

fn window(k: &[i64], s: &[i64], p: &[i64], d: &[i64]) -> R<Window> {
    let k = pair(k, "kernel_size", (0, 0))?;
    let s = pair(s, "stride", k)?;
    let p = pair(p, "padding", (0, 0))?;
    let d = pair(d, "dilation", (1, 1))?;
    if k.0 < 1 || k.1 < 1 || s.0 < 1 || s.1 < 1 || d.0 < 1 || d.1 < 1 || p.0 < 0 || p.1 < 0 {
        return Err(err(
            "kernel_size, stride and dilation must be positive, padding non-negative",
        ));
    }
    if p.0 * 2 > k.0 || p.1 * 2 > k.1 {
        return Err(err("padding must be at most half the kernel size"));
    }
    Ok(Window { k, s, p, d })
}

fn pool_shape(x: &TView, win: Window, ceil: bool) -> R<Vec<i64>> {
    if x.ndim != 3 && x.ndim != 4 {
        return Err(err(format!(
            "pooling needs a 3-D or 4-D input, got {:?}",
            x.shape()
        )));
    }
    let nd = x.ndim;
    let oh = pool::pool_out_len(x.shape[nd - 2], win.k.0, win.s.0, win.p.0, win.d.0, ceil);
    let ow = pool::pool_out_len(x.shape[nd - 1], win.k.1, win.s.1, win.p.1, win.d.1, ceil);
    if oh < 1 || ow < 1 {
        return Err(err("the pooled output would be empty"));
    }
    let mut s = x.shape()[..nd - 2].to_vec();
    s.extend([oh, ow]);
    Ok(s)
}

#[allow(clippy::too_many_arguments)]
unsafe fn max_pool_entry(
    ctx: ContextHandle,
    oh: TensorHandle,
    ih: TensorHandle,
    xh: ConstTensorHandle,
    k: DiopiSize,
    s: DiopiSize,
    p: DiopiSize,
    d: DiopiSize,
    ceil: bool,
) -> R<()> {
    // SAFETY: framework handles and borrowed lists.
    let (o, i, x, win) = unsafe {
        (
            rt::tensor_mut(oh, "out")?,
            rt::opt_tensor(ih, "indices")?,
            rt::tensor(xh, "input")?,
            window(&rt::size(k), &rt::size(s), &rt::size(p), &rt::size(d))?,
        )
    };
    check_float(&o, "out")?;
    check_shape(&o, &pool_shape(&x, win, ceil)?, "out")?;
    if let Some(t) = &i {
        check_shape(t, o.shape(), "indices")?;
        check_index(t, "indices")?;
    }
    // SAFETY: framework handles.
    unsafe { go(ctx, oh, move || pool::max_pool(&o, i.as_ref(), &x, win)) }
}

entry!(diopiMaxPool2d(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, kernel_size: DiopiSize, stride: DiopiSize, padding: DiopiSize, dilation: DiopiSize, ceil_mode: bool) {
    max_pool_entry(ctx, out, std::ptr::null_mut(), input, kernel_size, stride, padding, dilation, ceil_mode)
});

entry!(diopiMaxPool2dWithIndices(ctx: ContextHandle, out: TensorHandle, indices: TensorHandle, input: ConstTensorHandle, kernel_size: DiopiSize, stride: DiopiSize, padding: DiopiSize, dilation: DiopiSize, ceil_mode: bool) {
    max_pool_entry(ctx, out, indices, input, kernel_size, stride, padding, dilation, ceil_mode)
});

entry!(diopiMaxPool2dBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, kernel_size: DiopiSize, stride: DiopiSize, padding: DiopiSize, dilation: DiopiSize, ceil_mode: bool, indices: ConstTensorHandle) {
    let (gi, g, x, i) = (rt::tensor_mut(grad_input, "grad_input")?, rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?, rt::tensor(indices, "indices")?);
    let win = window(&rt::size(kernel_size), &rt::size(stride), &rt::size(padding), &rt::size(dilation))?;
    check_shape(&gi, x.shape(), "grad_input")?;
    check_shape(&g, &pool_shape(&x, win, ceil_mode)?, "grad_output")?;
    check_shape(&i, g.shape(), "indices")?;
    check_index(&i, "indices")?;
    go(ctx, grad_input, move || pool::max_pool_backward(&gi, &g, &i))
});

fn avg_opts(count_include_pad: bool, divisor: *const i64) -> R<AvgOpts> {
    // SAFETY: NULL or a pointer to one int64 from the caller.
    let divisor = (!divisor.is_null()).then(|| unsafe { *divisor });
    if divisor == Some(0) {
        return Err(err("divisor_override must not be 0"));
    }
    Ok(AvgOpts {
        count_include_pad,
        divisor,
    })
}

entry!(diopiAvgPool2d(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, kernel_size: DiopiSize, stride: DiopiSize, padding: DiopiSize, ceil_mode: bool, count_include_pad: bool, divisor_override: *const i64) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    let win = window(&rt::size(kernel_size), &rt::size(stride), &rt::size(padding), &[])?;
    check_float(&o, "out")?;
    check_shape(&o, &pool_shape(&x, win, ceil_mode)?, "out")?;
    let opts = avg_opts(count_include_pad, divisor_override)?;
    go(ctx, out, move || pool::avg_pool(&o, &x, win, opts))
});

entry!(diopiAvgPool2dBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, kernel_size: DiopiSize, stride: DiopiSize, padding: DiopiSize, ceil_mode: bool, count_include_pad: bool, divisor_override: *const i64) {
    let (gi, g, x) = (rt::tensor_mut(grad_input, "grad_input")?, rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?);
    let win = window(&rt::size(kernel_size), &rt::size(stride), &rt::size(padding), &[])?;
    check_shape(&gi, x.shape(), "grad_input")?;
    check_shape(&g, &pool_shape(&x, win, ceil_mode)?, "grad_output")?;
    let opts = avg_opts(count_include_pad, divisor_override)?;
    go(ctx, grad_input, move || pool::avg_pool_backward(&gi, &g, win, opts))
});

entry!(diopiAdaptiveAvgPool2d(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, output_size: DiopiSize) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    check_float(&o, "out")?;
    if x.ndim != 3 && x.ndim != 4 {
        return Err(err(format!("pooling needs a 3-D or 4-D input, got {:?}", x.shape())));
    }
    let nd = x.ndim;
    let (oh, ow) = pair(&rt::size(output_size), "output_size", (o.shape[nd - 2], o.shape[nd - 1]))?;
    let mut want = x.shape()[..nd - 2].to_vec();
    want.extend([oh, ow]);
    check_shape(&o, &want, "out")?;
    go(ctx, out, move || pool::adaptive_avg_pool(&o, &x))
});

entry!(diopiAdaptiveAvgPool2dBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle) {
    let (gi, g, x) = (rt::tensor_mut(grad_input, "grad_input")?, rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?);
    check_shape(&gi, x.shape(), "grad_input")?;
    if g.ndim != x.ndim || g.shape()[..g.ndim - 2] != x.shape()[..x.ndim - 2] {
        return Err(err("grad_output does not match input"));
    }
    go(ctx, grad_input, move || pool::adaptive_avg_pool_backward(&gi, &g))
});

fn loss_check(
    x: &TView,
    t: &TView,
    w: &Option<TView>,
    red: i32,
    smoothing: f64,
    probs_ok: bool,
) -> R<LossOpts> {
    if x.ndim < 1 {
        return Err(err("input must have 1 or more dims"));
    }
    check_float(x, "input")?;
    let (n, c, _) = loss::ncs(x);
    if probs_ok && dtype::is_float(t.dtype) {
        check_shape(t, x.shape(), "target (class probabilities)")?;
    } else {
        check_index(t, "target")?;
        let mut want = if x.ndim == 1 { vec![] } else { vec![n as i64] };
        if x.ndim > 2 {
            want.extend_from_slice(&x.shape()[2..]);
        }
        check_shape(t, &want, "target")?;
    }
    check_channels(w, c as i64, "weight")?;
    if !(0..=2).contains(&red) {
        return Err(err(format!("reduction {red} is not none, mean or sum")));
    }
    if !(0.0..=1.0).contains(&smoothing) {
        return Err(err("label_smoothing must be in [0, 1]"));
    }
    Ok(LossOpts {
        reduction: red,
        ignore_index: 0,
        smoothing,
    })
}

fn loss_out_shape(x: &TView, red: i32) -> Vec<i64> {
    if red != reduction::NONE || x.ndim == 1 {
        return vec![];
    }
    let mut s = vec![x.shape[0]];
    s.extend_from_slice(&x.shape()[2..]);
    s
}

#[allow(clippy::too_many_arguments)]
unsafe fn loss_entry(
    ctx: ContextHandle,
    oh: TensorHandle,
    goh: ConstTensorHandle,
    xh: ConstTensorHandle,
    th: ConstTensorHandle,
    wh: ConstTensorHandle,
    red: i32,
    ignore: i64,
    smoothing: f64,
    ce: bool,
) -> R<()> {
    // SAFETY: framework handles.
    let (o, x, t, w) = unsafe {
        (
            rt::tensor_mut(oh, "out")?,
            rt::tensor(xh, "input")?,
            rt::tensor(th, "target")?,
            rt::opt_tensor(wh, "weight")?,
        )
    };
    let mut opts = loss_check(&x, &t, &w, red, smoothing, ce)?;
    opts.ignore_index = ignore;
    if goh.is_null() {
        check_float(&o, "out")?;
        if o.numel() as i64 != loss_out_shape(&x, red).iter().product::<i64>() {
            return Err(err(format!(
                "out has {} elements, expected shape {:?}",
                o.numel(),
                loss_out_shape(&x, red)
            )));
        }
        // SAFETY: framework handles.
        unsafe {
            if ce {
                go(ctx, oh, move || {
                    loss::cross_entropy(&o, &x, &t, w.as_ref(), opts)
                })
            } else {
                go(ctx, oh, move || loss::nll(&o, &x, &t, w.as_ref(), opts))
            }
        }
    } else {
        // SAFETY: framework handle.
        let g = unsafe { rt::tensor(goh, "grad_output")? };
        check_shape(&o, x.shape(), "grad_input")?;
        if g.numel() as i64 != loss_out_shape(&x, red).iter().product::<i64>() {
            return Err(err("grad_output does not match the loss's shape"));
        }
        // SAFETY: framework handles.
        unsafe {
            if ce {
                go(ctx, oh, move || {
                    loss::cross_entropy_backward(&o, &g, &x, &t, w.as_ref(), opts)
                })
            } else {
                go(ctx, oh, move || {
                    loss::nll_backward(&o, &g, &x, &t, w.as_ref(), opts)
                })
            }
        }
    }
}

entry!(diopiNLLLoss(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, target: ConstTensorHandle, weight: ConstTensorHandle, reduction: i32, ignore_index: i64) {
    loss_entry(ctx, out, std::ptr::null(), input, target, weight, reduction, ignore_index, 0.0, false)
});
entry!(diopiNLLLossBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, target: ConstTensorHandle, weight: ConstTensorHandle, reduction: i32, ignore_index: i64) {
    loss_entry(ctx, grad_input, grad_output, input, target, weight, reduction, ignore_index, 0.0, false)
});
entry!(diopiCrossEntropyLoss(ctx: ContextHandle, out: TensorHandle, input: ConstTensorHandle, target: ConstTensorHandle, weight: ConstTensorHandle, reduction: i32, ignore_index: i64, label_smoothing: f64) {
    loss_entry(ctx, out, std::ptr::null(), input, target, weight, reduction, ignore_index, label_smoothing, true)
});
entry!(diopiCrossEntropyLossBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, target: ConstTensorHandle, weight: ConstTensorHandle, reduction: i32, ignore_index: i64, label_smoothing: f64) {
    loss_entry(ctx, grad_input, grad_output, input, target, weight, reduction, ignore_index, label_smoothing, true)
});
