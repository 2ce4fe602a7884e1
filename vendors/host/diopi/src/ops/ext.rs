//! Entry points of `functions_ext.h`: RMS norm, rotary embedding, scaled
//! masked softmax.

use super::linalg::entry;
use super::{check_bcast, check_float, check_shape, go};
use crate::llm;
use crate::rt::{self, err, Error, R};
use crate::types::*;
use crate::view::TView;

/// The number of trailing elements `normalized_shape` covers in `x`.
fn norm_len(x: &TView, ns: &[i64]) -> R<usize> {
    if ns.is_empty() || ns.len() > x.ndim || x.shape()[x.ndim - ns.len()..] != *ns {
        return Err(err(format!(
            "normalized_shape {ns:?} must be non-empty and end input's shape {:?}",
            x.shape()
        )));
    }
    Ok(ns.iter().product::<i64>() as usize)
}

/// Error unless the optional `t` has exactly `d` elements.
fn check_len(t: &Option<TView>, d: usize, name: &str) -> R<()> {
    match t {
        Some(t) if t.numel() != d => Err(err(format!(
            "{name} has {} elements, expected {d}",
            t.numel()
        ))),
        Some(t) => check_float(t, name),
        None => Ok(()),
    }
}

/// Error unless `t` is a float tensor with `rows` elements.
fn check_rows(t: &TView, rows: usize, name: &str) -> R<()> {
    check_float(t, name)?;
    if t.numel() != rows {
        return Err(err(format!(
            "{name} has {} elements, expected one per normalized row ({rows})",
            t.numel()
        )));
    }
    Ok(())
}

entry!(diopiRMSNorm(ctx: ContextHandle, out: TensorHandle, inv_rms: TensorHandle, input: ConstTensorHandle, normalized_shape: DiopiSize, weight: ConstTensorHandle, bias: ConstTensorHandle, eps: f64) {
    let (o, x) = (rt::tensor_mut(out, "out")?, rt::tensor(input, "input")?);
    let r = rt::opt_tensor(inv_rms, "inv_rms")?;
    let (w, b) = (rt::opt_tensor(weight, "weight")?, rt::opt_tensor(bias, "bias")?);
    check_float(&x, "input")?;
    check_float(&o, "out")?;
    check_shape(&o, x.shape(), "out")?;
    let d = norm_len(&x, &rt::size(normalized_shape))?;
    check_len(&w, d, "weight")?;
    check_len(&b, d, "bias")?;
    if let Some(r) = &r {
        check_rows(r, x.numel() / d.max(1), "inv_rms")?;
    }
    go(ctx, out, move || llm::rms_norm(&o, r.as_ref(), &x, w.as_ref(), b.as_ref(), d, eps))
});

entry!(diopiRMSNormBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_weight: TensorHandle, grad_bias: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, weight: ConstTensorHandle, _bias: ConstTensorHandle, inv_rms: ConstTensorHandle, normalized_shape: DiopiSize, _eps: f64) {
    let (gi, gw, gb) = (rt::opt_tensor(grad_input, "grad_input")?, rt::opt_tensor(grad_weight, "grad_weight")?, rt::opt_tensor(grad_bias, "grad_bias")?);
    let (g, x, w) = (rt::tensor(grad_output, "grad_output")?, rt::tensor(input, "input")?, rt::opt_tensor(weight, "weight")?);
    let r = rt::tensor(inv_rms, "inv_rms")?;
    check_float(&x, "input")?;
    check_float(&g, "grad_output")?;
    check_shape(&g, x.shape(), "grad_output")?;
    let d = norm_len(&x, &rt::size(normalized_shape))?;
    check_rows(&r, x.numel() / d.max(1), "inv_rms")?;
    if let Some(t) = &gi {
        check_float(t, "grad_input")?;
        check_shape(t, x.shape(), "grad_input")?;
    }
    for (t, n) in [(&w, "weight"), (&gw, "grad_weight"), (&gb, "grad_bias")] {
        check_len(t, d, n)?;
    }
    go(ctx, grad_output, move || llm::rms_norm_backward(gi.as_ref(), gw.as_ref(), gb.as_ref(), &g, &x, w.as_ref(), &r, d))
});

entry!(diopiRotaryEmbedding(ctx: ContextHandle, out: TensorHandle, x: ConstTensorHandle, cos: ConstTensorHandle, sin: ConstTensorHandle, conj: bool, interleaved: bool) {
    let (o, xv) = (rt::tensor_mut(out, "out")?, rt::tensor(x, "x")?);
    let (c, s) = (rt::tensor(cos, "cos")?, rt::tensor(sin, "sin")?);
    for (t, n) in [(&o, "out"), (&xv, "x"), (&c, "cos"), (&s, "sin")] {
        check_float(t, n)?;
    }
    check_shape(&o, xv.shape(), "out")?;
    let dim = xv.shape().last().copied().unwrap_or(0);
    if xv.ndim == 0 || dim % 2 != 0 {
        return Err(err(format!(
            "x's last dimension must have an even length, x has shape {:?}",
            xv.shape()
        )));
    }
    let mut half = xv.shape().to_vec();
    *half.last_mut().expect("x has a last dimension") = dim / 2;
    let half_view = TView::new(xv.ptr, xv.dtype, &half, &xv.strides()[..xv.ndim]);
    check_bcast(&half_view, &c, "cos")?;
    check_bcast(&half_view, &s, "sin")?;
    go(ctx, out, move || llm::rotary(&o, &xv, &c, &s, conj, interleaved))
});

/// Reads and checks the mask of a scaled masked softmax: boolean, broadcast
/// to `like`; ignored (may be NULL) with the fixed causal mask.
unsafe fn softmax_mask(mask: ConstTensorHandle, like: &TView, triu: bool) -> R<Option<TView>> {
    // SAFETY: forwarded from the caller.
    let m = unsafe { rt::opt_tensor(mask, "mask") }?;
    if triu {
        return Ok(None);
    }
    let Some(m) = m else {
        return Err(err("mask is required unless fixed_triu_mask is set"));
    };
    if m.dtype != dtype::BOOL && m.dtype != dtype::U8 {
        return Err(Error {
            code: error::DTYPE_NOT_SUPPORTED,
            msg: format!("mask has dtype {}; bool is required", dtype::name(m.dtype)),
        });
    }
    check_bcast(like, &m, "mask")?;
    Ok(Some(m))
}

entry!(diopiScaledMaskedSoftmax(ctx: ContextHandle, output: TensorHandle, input: ConstTensorHandle, mask: ConstTensorHandle, scale: f64, fixed_triu_mask: bool) {
    let (o, x) = (rt::tensor_mut(output, "output")?, rt::tensor(input, "input")?);
    check_float(&o, "output")?;
    check_float(&x, "input")?;
    check_shape(&o, x.shape(), "output")?;
    if x.ndim < 2 && fixed_triu_mask {
        return Err(err("fixed_triu_mask needs an input of at least 2 dimensions"));
    }
    let m = softmax_mask(mask, &x, fixed_triu_mask)?;
    go(ctx, output, move || llm::scaled_masked_softmax(&o, &x, m.as_ref(), scale, fixed_triu_mask))
});

entry!(diopiScaledMaskedSoftmaxBackward(ctx: ContextHandle, grad_input: TensorHandle, grad_output: ConstTensorHandle, output: ConstTensorHandle, mask: ConstTensorHandle, scale: f64, fixed_triu_mask: bool) {
    let gi = rt::tensor_mut(grad_input, "grad_input")?;
    let (g, y) = (rt::tensor(grad_output, "grad_output")?, rt::tensor(output, "output")?);
    for (t, n) in [(&gi, "grad_input"), (&g, "grad_output"), (&y, "output")] {
        check_float(t, n)?;
        check_shape(t, y.shape(), n)?;
    }
    if y.ndim < 2 && fixed_triu_mask {
        return Err(err("fixed_triu_mask needs an output of at least 2 dimensions"));
    }
    let m = softmax_mask(mask, &y, fixed_triu_mask)?;
    go(ctx, grad_input, move || llm::scaled_masked_softmax_backward(&gi, &g, &y, m.as_ref(), scale, fixed_triu_mask))
});
