//! Losses and optimisers: NLL loss and its backward, SGD, Adam, AdamW.

use super::entry::entry;
use super::{check_float, check_index, check_shape, Q};
use crate::kernels::{launch, Arg, Td};
use crate::rt::{self, err, R, T};
use crate::types::*;

/// Checks the NLL arguments; returns S, the product of the spatial sizes.
fn nll_check(q: Q, x: &T, t: &T, w: Option<&T>, reduction: i32) -> R<i64> {
    check_float(q, &[(x, "input")])?;
    check_index(t, "target")?;
    if x.ndim() < 2 {
        return Err(err(format!(
            "input must be [N, C, d...], has shape {:?}",
            x.shape
        )));
    }
    let mut tshape = vec![x.shape[0]];
    tshape.extend_from_slice(&x.shape[2..]);
    check_shape(t, &tshape, "target")?;
    if let Some(w) = w {
        check_float(q, &[(w, "weight")])?;
        check_shape(w, &[x.shape[1]], "weight")?;
    }
    if !matches!(
        reduction,
        reduction::NONE | reduction::MEAN | reduction::SUM
    ) {
        return Err(err(format!(
            "reduction {reduction} is not a diopiReduction_t"
        )));
    }
    Ok(x.shape[2..].iter().product())
}

/// The per-sample shape (reduction none) or `[]`.
fn loss_shape(x: &T, reduction: i32) -> Vec<i64> {
    if reduction == reduction::NONE {
        let mut s = vec![x.shape[0]];
        s.extend_from_slice(&x.shape[2..]);
        s
    } else {
        Vec::new()
    }
}

fn opt_td(w: Option<&T>) -> Td {
    w.map_or(Td::none(), Td::of)
}

/// Error unless every tensor has `p`'s shape.
fn same_shape(p: &T, ts: &[(&T, &str)]) -> R<()> {
    for (t, name) in ts {
        check_shape(t, &p.shape, name)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn adam(
    q: Q,
    p: &T,
    g: &T,
    m: &T,
    v: &T,
    vmax: Option<&T>,
    f: [f32; 5],
    step: i64,
    decoupled: bool,
) -> R<()> {
    let mut ts = vec![(p, "param"), (g, "grad"), (m, "exp_avg"), (v, "exp_avg_sq")];
    if let Some(vm) = vmax {
        ts.push((vm, "max_exp_avg_sq"));
    }
    check_float(q, &ts)?;
    same_shape(p, &ts)?;
    if step < 1 {
        return Err(err(format!("step is {step}; it counts from 1")));
    }
    let [lr, b1, b2, eps, wd] = f.map(f64::from);
    let step = i32::try_from(step).map_err(|_| err(format!("step {step} is too large")))?;
    let n = p.numel();
    launch(
        q,
        "adam",
        &[
            Arg::Ptr(p.ptr),
            Arg::Td(Td::of(p)),
            Arg::Ptr(g.ptr),
            Arg::Td(Td::of(g)),
            Arg::Ptr(m.ptr),
            Arg::Td(Td::of(m)),
            Arg::Ptr(v.ptr),
            Arg::Td(Td::of(v)),
            Arg::Ptr(vmax.map_or(p.ptr, |t| t.ptr)),
            Arg::Td(opt_td(vmax)),
            Arg::Acc(lr),
            Arg::Acc(b1),
            Arg::Acc(b2),
            Arg::Acc(eps),
            Arg::Acc(wd),
            Arg::Acc(1.0 - b1.powi(step)),
            Arg::Acc(1.0 - b2.powi(step)),
            Arg::I32(decoupled as i32),
            Arg::I64(n),
        ],
        n,
    )
}

entry! {
    fn diopiNLLLoss[ctx, q](out: TensorHandle, input: ConstTensorHandle, target: ConstTensorHandle, weight: ConstTensorHandle, reduction: i32, ignore_index: i64) {
        let o = rt::tensor_mut(out, "out")?;
        let x = rt::tensor(input, "input")?;
        let t = rt::tensor(target, "target")?;
        let w = rt::opt_tensor(weight, "weight")?;
        let s = nll_check(q, &x, &t, w.as_ref(), reduction)?;
        check_float(q, &[(&o, "out")])?;
        check_shape(&o, &loss_shape(&x, reduction), "out")?;
        let n = if reduction == reduction::NONE { x.shape[0] * s } else { 1 };
        launch(q, "nll", &[
            Arg::Ptr(o.ptr), Arg::Td(Td::of(&o)),
            Arg::Ptr(x.ptr), Arg::Td(Td::of(&x)),
            Arg::Ptr(t.ptr), Arg::Td(Td::of(&t)),
            Arg::Ptr(w.as_ref().map_or(x.ptr, |w| w.ptr)), Arg::Td(opt_td(w.as_ref())),
            Arg::I32(reduction), Arg::I64(ignore_index), Arg::I64(s), Arg::I64(n),
        ], n)
    }
    fn diopiNLLLossBackward[ctx, q](grad_input: TensorHandle, grad_output: ConstTensorHandle, input: ConstTensorHandle, target: ConstTensorHandle, weight: ConstTensorHandle, reduction: i32, ignore_index: i64) {
        let gi = rt::tensor_mut(grad_input, "grad_input")?;
        let go = rt::tensor(grad_output, "grad_output")?;
        let x = rt::tensor(input, "input")?;
        let t = rt::tensor(target, "target")?;
        let w = rt::opt_tensor(weight, "weight")?;
        let s = nll_check(q, &x, &t, w.as_ref(), reduction)?;
        check_float(q, &[(&gi, "grad_input"), (&go, "grad_output")])?;
        check_shape(&gi, &x.shape, "grad_input")?;
        check_shape(&go, &loss_shape(&x, reduction), "grad_output")?;
        let n = gi.numel();
        launch(q, "nll_bwd", &[
            Arg::Ptr(gi.ptr), Arg::Td(Td::of(&gi)),
            Arg::Ptr(go.ptr), Arg::Td(Td::of(&go)),
            Arg::Ptr(t.ptr), Arg::Td(Td::of(&t)),
            Arg::Ptr(w.as_ref().map_or(x.ptr, |w| w.ptr)), Arg::Td(opt_td(w.as_ref())),
            Arg::I32(reduction), Arg::I64(ignore_index), Arg::I64(s), Arg::I64(n),
        ], n)
    }
    fn diopiSgd[ctx, q](param: TensorHandle, grad: TensorHandle, buf: TensorHandle, lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: bool) {
        let p = rt::tensor_mut(param, "param")?;
        let g = rt::tensor(grad, "grad")?;
        let b = if momentum != 0.0 {
            let b = rt::tensor_mut(buf, "buf")?;
            check_float(q, &[(&b, "buf")])?;
            check_shape(&b, &p.shape, "buf")?;
            Some(b)
        } else {
            None
        };
        check_float(q, &[(&p, "param"), (&g, "grad")])?;
        check_shape(&g, &p.shape, "grad")?;
        let n = p.numel();
        launch(q, "sgd", &[
            Arg::Ptr(p.ptr), Arg::Td(Td::of(&p)),
            Arg::Ptr(g.ptr), Arg::Td(Td::of(&g)),
            Arg::Ptr(b.as_ref().map_or(p.ptr, |b| b.ptr)), Arg::Td(opt_td(b.as_ref())),
            Arg::Acc(lr), Arg::Acc(momentum), Arg::Acc(dampening), Arg::Acc(weight_decay),
            Arg::I32(nesterov as i32), Arg::I64(n),
        ], n)
    }
    fn diopiAdam[ctx, q](param: TensorHandle, grad: ConstTensorHandle, exp_avg: TensorHandle, exp_avg_sq: TensorHandle, max_exp_avg_sq: TensorHandle, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, step: i64, amsgrad: bool) {
        let vm = if amsgrad { Some(rt::tensor_mut(max_exp_avg_sq, "max_exp_avg_sq")?) } else { None };
        adam(q, &rt::tensor_mut(param, "param")?, &rt::tensor(grad, "grad")?, &rt::tensor_mut(exp_avg, "exp_avg")?,
            &rt::tensor_mut(exp_avg_sq, "exp_avg_sq")?, vm.as_ref(), [lr, beta1, beta2, eps, weight_decay], step, false)
    }
    fn diopiAdamW[ctx, q](param: TensorHandle, grad: ConstTensorHandle, exp_avg: TensorHandle, exp_avg_sq: TensorHandle, max_exp_avg_sq: TensorHandle, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, step: i64, amsgrad: bool) {
        let vm = if amsgrad { Some(rt::tensor_mut(max_exp_avg_sq, "max_exp_avg_sq")?) } else { None };
        adam(q, &rt::tensor_mut(param, "param")?, &rt::tensor(grad, "grad")?, &rt::tensor_mut(exp_avg, "exp_avg")?,
            &rt::tensor_mut(exp_avg_sq, "exp_avg_sq")?, vm.as_ref(), [lr, beta1, beta2, eps, weight_decay], step, true)
    }
    fn diopiEmbedding[ctx, q](out: TensorHandle, weight: ConstTensorHandle, indices: ConstTensorHandle, padding_idx: i64, scale_grad_byfreq: bool, sparse: bool) {
        let _ = (padding_idx, scale_grad_byfreq, sparse);
        let o = rt::tensor_mut(out, "out")?;
        let w = rt::tensor(weight, "weight")?;
        let x = rt::tensor(indices, "indices")?;
        check_index(&x, "indices")?;
        check_float(q, &[(&o, "out"), (&w, "weight")])?;
        if w.ndim() != 2 {
            return Err(err(format!("weight must be 2-D, has shape {:?}", w.shape)));
        }
        let mut want = x.shape.clone();
        want.push(w.shape[1]);
        check_shape(&o, &want, "out")?;
        let n = o.numel();
        launch(q, "embed", &[
            Arg::Ptr(o.ptr), Arg::Td(Td::of(&o)),
            Arg::Ptr(w.ptr), Arg::Td(Td::of(&w)),
            Arg::Ptr(x.ptr), Arg::Td(Td::of(&x)),
            Arg::I64(n),
        ], n)
    }
}
