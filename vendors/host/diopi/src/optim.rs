//! Optimizer steps: SGD (PyTorch 1.10 rule), Adam and AdamW (bias
//! correction with the given step). Computed in f32 (f64 for f64 params).

use crate::elementwise::Float;
use crate::types::dtype;
use crate::view::{read_owned, write, TView};

/// SGD hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub struct SgdOpts {
    /// learning rate
    pub lr: f64,
    /// momentum
    pub momentum: f64,
    /// dampening
    pub dampening: f64,
    /// weight decay
    pub wd: f64,
    /// Nesterov momentum
    pub nesterov: bool,
}

/// One SGD step: `d = grad + wd*param`; with momentum `buf = m*buf + (1-damp)*d`
/// and `d = buf` (or `d + m*buf` for Nesterov); `param -= lr*d`.
pub fn sgd(param: &TView, grad: &TView, buf: Option<&TView>, o: SgdOpts) {
    fn go<C: Float>(param: &TView, grad: &TView, buf: Option<&TView>, o: SgdOpts) {
        let mut p = read_owned::<C>(param);
        let g = read_owned::<C>(grad);
        let mut b = buf.map(read_owned::<C>);
        let (lr, m, damp, wd) = (
            C::from_f64(o.lr),
            C::from_f64(o.momentum),
            C::from_f64(1.0 - o.dampening),
            C::from_f64(o.wd),
        );
        for i in 0..p.len() {
            let mut d = g[i];
            if o.wd != 0.0 {
                d = d.add(wd.mul(p[i]));
            }
            if o.momentum != 0.0 {
                if let Some(b) = b.as_mut() {
                    b[i] = m.mul(b[i]).add(damp.mul(d));
                    d = if o.nesterov { d.add(m.mul(b[i])) } else { b[i] };
                }
            }
            p[i] = p[i].sub(lr.mul(d));
        }
        write(param, &p);
        if let (Some(t), Some(b)) = (buf, b) {
            write(t, &b);
        }
    }
    if param.dtype == dtype::F64 {
        go::<f64>(param, grad, buf, o)
    } else {
        go::<f32>(param, grad, buf, o)
    }
}

/// Adam/AdamW hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub struct AdamOpts {
    /// learning rate
    pub lr: f32,
    /// beta1
    pub beta1: f32,
    /// beta2
    pub beta2: f32,
    /// epsilon
    pub eps: f32,
    /// weight decay
    pub wd: f32,
    /// step (1 on the first update)
    pub step: i64,
    /// AMSGrad
    pub amsgrad: bool,
    /// decoupled weight decay (AdamW)
    pub decoupled: bool,
}

/// One Adam (or AdamW) step.
pub fn adam(
    param: &TView,
    grad: &TView,
    m1: &TView,
    m2: &TView,
    vmax: Option<&TView>,
    o: AdamOpts,
) {
    fn go<C: Float>(
        param: &TView,
        grad: &TView,
        m1t: &TView,
        m2t: &TView,
        vmax: Option<&TView>,
        o: AdamOpts,
    ) {
        let mut p = read_owned::<C>(param);
        let g = read_owned::<C>(grad);
        let mut m1 = read_owned::<C>(m1t);
        let mut m2 = read_owned::<C>(m2t);
        let mut mx = vmax.filter(|_| o.amsgrad).map(read_owned::<C>);
        let f = |v: f64| C::from_f64(v);
        let (b1, b2) = (o.beta1 as f64, o.beta2 as f64);
        let bc1 = 1.0 - b1.powi(o.step as i32);
        let bc2 = 1.0 - b2.powi(o.step as i32);
        let step_size = f(o.lr as f64 / bc1);
        let bc2s = f(bc2.sqrt());
        let (cb1, cb2, c1b1, c1b2, eps, wd) = (
            f(b1),
            f(b2),
            f(1.0 - b1),
            f(1.0 - b2),
            f(o.eps as f64),
            f(o.wd as f64),
        );
        let decay = f(1.0 - o.lr as f64 * o.wd as f64);
        for i in 0..p.len() {
            let mut gi = g[i];
            if o.decoupled {
                p[i] = p[i].mul(decay);
            } else if o.wd != 0.0 {
                gi = gi.add(wd.mul(p[i]));
            }
            m1[i] = m1[i].mul(cb1).add(c1b1.mul(gi));
            m2[i] = m2[i].mul(cb2).add(c1b2.mul(gi).mul(gi));
            let v = match mx.as_mut() {
                Some(mx) => {
                    mx[i] = mx[i].max_nan(m2[i]);
                    mx[i]
                }
                None => m2[i],
            };
            let denom = v.sqrt().div(bc2s).add(eps);
            p[i] = p[i].sub(step_size.mul(m1[i]).div(denom));
        }
        write(param, &p);
        write(m1t, &m1);
        write(m2t, &m2);
        if let (Some(t), Some(v)) = (vmax, mx) {
            write(t, &v);
        }
    }
    if param.dtype == dtype::F64 {
        go::<f64>(param, grad, m1, m2, vmax, o)
    } else {
        go::<f32>(param, grad, m1, m2, vmax, o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::testutil::*;

    #[test]
    fn sgd_momentum_and_nesterov() {
        let (mut p, mut g, mut b) = (vec![1.0f32, -2.0], vec![0.5f32, 1.0], vec![0.1f32, 0.0]);
        let (pv, gv, bv) = (f32v(&mut p, &[2]), f32v(&mut g, &[2]), f32v(&mut b, &[2]));
        sgd(
            &pv,
            &gv,
            Some(&bv),
            SgdOpts {
                lr: 0.1,
                momentum: 0.9,
                dampening: 0.0,
                wd: 0.1,
                nesterov: false,
            },
        );
        // d = g + 0.1 p = [0.6, 0.8]; buf = 0.9 b + d = [0.69, 0.8]; p -= 0.1 buf
        close(&b, &[0.69, 0.8], 1);
        close(&p, &[1.0 - 0.069, -2.0 - 0.08], 1);
        sgd(
            &pv,
            &gv,
            None,
            SgdOpts {
                lr: 1.0,
                momentum: 0.0,
                dampening: 0.0,
                wd: 0.0,
                nesterov: true,
            },
        );
        close(&p, &[0.931 - 0.5, -2.08 - 1.0], 1);
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        for decoupled in [false, true] {
            let (mut p, mut g, mut m, mut v, mut mx) = (
                vec![1.0f32, -1.0],
                vec![0.3f32, -2.0],
                vec![0f32; 2],
                vec![0f32; 2],
                vec![0f32; 2],
            );
            let (pv, gv, mv, vv, mxv) = (
                f32v(&mut p, &[2]),
                f32v(&mut g, &[2]),
                f32v(&mut m, &[2]),
                f32v(&mut v, &[2]),
                f32v(&mut mx, &[2]),
            );
            let o = AdamOpts {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                wd: 0.0,
                step: 1,
                amsgrad: true,
                decoupled,
            };
            adam(&pv, &gv, &mv, &vv, Some(&mxv), o);
            // first step: m_hat = g, v_hat = g^2, update = lr * sign(g)
            close(&p, &[0.99, -0.99], 1);
            close(&m, &[0.03, -0.2], 1);
            assert_eq!(mx, v, "amsgrad's max of one step is v");
        }
        // AdamW's decay multiplies the parameter
        let (mut p, mut g, mut m, mut v) = (vec![2.0f32], vec![0.0f32], vec![0f32], vec![0f32]);
        let (pv, gv, mv, vv) = (
            f32v(&mut p, &[1]),
            f32v(&mut g, &[1]),
            f32v(&mut m, &[1]),
            f32v(&mut v, &[1]),
        );
        adam(
            &pv,
            &gv,
            &mv,
            &vv,
            None,
            AdamOpts {
                lr: 0.1,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                wd: 0.5,
                step: 3,
                amsgrad: false,
                decoupled: true,
            },
        );
        close(&p, &[2.0 * 0.95], 1);
    }
}
