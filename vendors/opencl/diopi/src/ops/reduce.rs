//! Reductions over dimensions (`red` kernel) and the softmax family
//! along one dimension (`smax` kernel).

use super::entry::entry;
use super::{check_float, check_shape, norm_dim, Q};
use crate::kernels::{launch, Arg, Td};
use crate::rt::{self, err, R, T};
use crate::types::*;

/// `out = reduce(input)` over `dims` (empty: all) with `red` op `code`;
/// `out` has the kept dimensions, with or without the reduced ones as 1.
pub(crate) fn reduce(q: Q, out: &T, input: &T, dims: &[i64], code: i32) -> R<()> {
    let nd = input.ndim();
    let mut red = vec![false; nd];
    if dims.is_empty() {
        red.iter_mut().for_each(|r| *r = true);
    }
    for &d in dims {
        let d = norm_dim(d, nd, "dim")?;
        if nd > 0 {
            red[d] = true;
        }
    }
    let kept: Vec<usize> = (0..nd).filter(|&d| !red[d]).collect();
    let gone: Vec<usize> = (0..nd).filter(|&d| red[d]).collect();
    let kept_shape: Vec<i64> = kept.iter().map(|&d| input.shape[d]).collect();
    let keep_shape: Vec<i64> = (0..nd)
        .map(|d| if red[d] { 1 } else { input.shape[d] })
        .collect();
    let out_strides: Vec<i64> = if out.shape == keep_shape && out.ndim() == nd {
        kept.iter().map(|&d| out.strides[d]).collect()
    } else if out.shape == kept_shape {
        out.strides.clone()
    } else {
        return Err(err(format!(
            "out has shape {:?}; reducing {:?} over {dims:?} gives {kept_shape:?} (or {keep_shape:?} with keepdim)",
            out.shape, input.shape
        )));
    };
    let order: Vec<usize> = kept.iter().chain(&gone).copied().collect();
    let ishape: Vec<i64> = order.iter().map(|&d| input.shape[d]).collect();
    let istrides: Vec<i64> = order.iter().map(|&d| input.strides[d]).collect();
    let inner: i64 = gone.iter().map(|&d| input.shape[d]).product();
    let n: i64 = kept_shape.iter().product();
    launch(
        q,
        "red",
        &[
            Arg::Ptr(out.ptr),
            Arg::Td(Td::new(out.dtype, &kept_shape, &out_strides)),
            Arg::Ptr(input.ptr),
            Arg::Td(Td::new(input.dtype, &ishape, &istrides)),
            Arg::I32(kept.len() as i32),
            Arg::I64(inner),
            Arg::I32(code),
            Arg::I64(n),
        ],
        n,
    )
}

/// `t`'s shape and strides with dimension `d` moved last.
fn dim_last(t: &T, d: usize) -> Td {
    let order: Vec<usize> = (0..t.ndim()).filter(|&k| k != d).chain([d]).collect();
    let shape: Vec<i64> = order.iter().map(|&k| t.shape[k]).collect();
    let strides: Vec<i64> = order.iter().map(|&k| t.strides[k]).collect();
    Td::new(t.dtype, &shape, &strides)
}

/// `smax` op `code` along `dim`: out from `a` (and `b`), all of one shape.
fn softmax(q: Q, code: i32, out: &T, a: &T, b: Option<&T>, dim: i64) -> R<()> {
    let mut ts = vec![(out, "out"), (a, "input")];
    if let Some(b) = b {
        ts.push((b, "output"));
    }
    check_float(q, &ts)?;
    check_shape(a, &out.shape, "input")?;
    if let Some(b) = b {
        check_shape(b, &out.shape, "output")?;
    }
    if out.ndim() == 0 {
        // A 0-dim tensor is its one row.
        let one = |t: &T| T {
            shape: vec![1],
            strides: vec![1],
            ..t.clone()
        };
        return softmax(q, code, &one(out), &one(a), b.map(one).as_ref(), 0);
    }
    let d = norm_dim(dim, out.ndim(), "dim")?;
    let len = out.shape[d];
    if len == 0 {
        return Ok(());
    }
    let n = out.numel() / len;
    let bt = b.unwrap_or(a);
    launch(
        q,
        "smax",
        &[
            Arg::Ptr(out.ptr),
            Arg::Td(dim_last(out, d)),
            Arg::Ptr(a.ptr),
            Arg::Td(dim_last(a, d)),
            Arg::Ptr(bt.ptr),
            Arg::Td(dim_last(bt, d)),
            Arg::I32(code),
            Arg::I64(n),
        ],
        n,
    )
}

entry! {
    fn diopiSum[ctx, q](out: TensorHandle, input: ConstTensorHandle, dim: DiopiSize) {
        let o = rt::tensor_mut(out, "out")?;
        let i = rt::tensor(input, "input")?;
        check_float(q, &[(&o, "out"), (&i, "input")])?;
        reduce(q, &o, &i, &dim.to_vec(), 0)
    }
    fn diopiMean[ctx, q](out: TensorHandle, input: ConstTensorHandle, dim: DiopiSize) {
        let o = rt::tensor_mut(out, "out")?;
        let i = rt::tensor(input, "input")?;
        check_float(q, &[(&o, "out"), (&i, "input")])?;
        reduce(q, &o, &i, &dim.to_vec(), 1)
    }
    fn diopiMaxAll[ctx, q](max: TensorHandle, input: ConstTensorHandle) {
        let o = rt::tensor_mut(max, "max")?;
        let i = rt::tensor(input, "input")?;
        check_float(q, &[(&o, "max"), (&i, "input")])?;
        if i.numel() == 0 {
            return Err(err("max of an empty tensor"));
        }
        reduce(q, &o, &i, &[], 2)
    }
    fn diopiMinAll[ctx, q](min: TensorHandle, input: ConstTensorHandle) {
        let o = rt::tensor_mut(min, "min")?;
        let i = rt::tensor(input, "input")?;
        check_float(q, &[(&o, "min"), (&i, "input")])?;
        if i.numel() == 0 {
            return Err(err("min of an empty tensor"));
        }
        reduce(q, &o, &i, &[], 3)
    }
    fn diopiSoftmax[ctx, q](out: TensorHandle, input: ConstTensorHandle, dim: i64) {
        softmax(q, 0, &rt::tensor_mut(out, "out")?, &rt::tensor(input, "input")?, None, dim)
    }
    fn diopiLogSoftmax[ctx, q](out: TensorHandle, input: ConstTensorHandle, dim: i64) {
        softmax(q, 1, &rt::tensor_mut(out, "out")?, &rt::tensor(input, "input")?, None, dim)
    }
    fn diopiSoftmaxBackward[ctx, q](grad_input: TensorHandle, grad_output: ConstTensorHandle, output: ConstTensorHandle, dim: i64) {
        let o = rt::tensor_mut(grad_input, "grad_input")?;
        let g = rt::tensor(grad_output, "grad_output")?;
        softmax(q, 2, &o, &g, Some(&rt::tensor(output, "output")?), dim)
    }
    fn diopiLogSoftmaxBackward[ctx, q](grad_input: TensorHandle, grad_output: ConstTensorHandle, output: ConstTensorHandle, dim: i64) {
        let o = rt::tensor_mut(grad_input, "grad_input")?;
        let g = rt::tensor(grad_output, "grad_output")?;
        softmax(q, 3, &o, &g, Some(&rt::tensor(output, "output")?), dim)
    }
}
