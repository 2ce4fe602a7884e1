//! SGD, Adam and AdamW steps (DIOPI's semantics: the given `step` is the
//! bias-correction exponent; SGD updates the momentum buffer as given).

/// SGD hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SgdOpts {
    /// Learning rate.
    pub(crate) lr: f64,
    /// Momentum.
    pub(crate) momentum: f64,
    /// Dampening.
    pub(crate) dampening: f64,
    /// Weight decay.
    pub(crate) wd: f64,
    /// Nesterov momentum.
    pub(crate) nesterov: bool,
}

/// One SGD step: returns (param, buf).
pub(crate) fn sgd(p: &[f64], g: &[f64], buf: &[f64], o: &SgdOpts) -> (Vec<f64>, Vec<f64>) {
    let mut np = Vec::with_capacity(p.len());
    let mut nb = Vec::with_capacity(p.len());
    for k in 0..p.len() {
        let mut d = g[k] + o.wd * p[k];
        let mut b = buf[k];
        if o.momentum != 0.0 {
            b = o.momentum * b + (1.0 - o.dampening) * d;
            d = if o.nesterov { d + o.momentum * b } else { b };
        }
        np.push(p[k] - o.lr * d);
        nb.push(b);
    }
    (np, nb)
}

/// Adam / AdamW hyper-parameters (as the `float`s the C call gets).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamOpts {
    /// Learning rate.
    pub(crate) lr: f32,
    /// beta1.
    pub(crate) beta1: f32,
    /// beta2.
    pub(crate) beta2: f32,
    /// eps.
    pub(crate) eps: f32,
    /// Weight decay.
    pub(crate) wd: f32,
    /// Step (bias-correction exponent).
    pub(crate) step: i64,
    /// AMSGrad.
    pub(crate) amsgrad: bool,
    /// AdamW's decoupled decay instead of Adam's L2 term.
    pub(crate) decoupled: bool,
}

/// Adam / AdamW state after one step.
pub(crate) struct AdamState {
    /// Parameters.
    pub(crate) param: Vec<f64>,
    /// First moment.
    pub(crate) exp_avg: Vec<f64>,
    /// Second moment.
    pub(crate) exp_avg_sq: Vec<f64>,
    /// Running max of the second moment.
    pub(crate) max_exp_avg_sq: Vec<f64>,
}

/// One Adam (or AdamW) step.
pub(crate) fn adam(
    p: &[f64],
    g: &[f64],
    m: &[f64],
    v: &[f64],
    vmax: &[f64],
    o: &AdamOpts,
) -> AdamState {
    let (lr, b1, b2, eps, wd) = (
        f64::from(o.lr),
        f64::from(o.beta1),
        f64::from(o.beta2),
        f64::from(o.eps),
        f64::from(o.wd),
    );
    let bc1 = 1.0 - b1.powi(o.step as i32);
    let bc2 = 1.0 - b2.powi(o.step as i32);
    let mut s = AdamState {
        param: vec![],
        exp_avg: vec![],
        exp_avg_sq: vec![],
        max_exp_avg_sq: vec![],
    };
    for k in 0..p.len() {
        let mut param = p[k];
        let mut grad = g[k];
        if o.decoupled {
            param *= 1.0 - lr * wd;
        } else {
            grad += wd * param;
        }
        let mk = b1 * m[k] + (1.0 - b1) * grad;
        let vk = b2 * v[k] + (1.0 - b2) * grad * grad;
        let vm = if o.amsgrad { vmax[k].max(vk) } else { vmax[k] };
        let denom = (if o.amsgrad { vm } else { vk }).sqrt() / bc2.sqrt() + eps;
        param -= lr / bc1 * mk / denom;
        s.param.push(param);
        s.exp_avg.push(mk);
        s.exp_avg_sq.push(vk);
        s.max_exp_avg_sq.push(vm);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_by_hand() {
        let o = SgdOpts {
            lr: 0.5,
            momentum: 0.9,
            dampening: 0.0,
            wd: 0.1,
            nesterov: false,
        };
        // d = 1 + 0.1*2 = 1.2; buf = 0.9*1 + 1.2 = 2.1; p = 2 - 0.5*2.1
        let (p, b) = sgd(&[2.0], &[1.0], &[1.0], &o);
        assert!((b[0] - 2.1).abs() < 1e-15 && (p[0] - 0.95).abs() < 1e-15);
        // First Adam step: m = (1-b1) g, v = (1-b2) g^2, so the update is
        // lr * g/|g| (up to eps).
        let a = AdamOpts {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 0.0,
            wd: 0.0,
            step: 1,
            amsgrad: false,
            decoupled: false,
        };
        let s = adam(&[1.0], &[-3.0], &[0.0], &[0.0], &[0.0], &a);
        assert!(
            (s.param[0] - (1.0 + f64::from(0.1f32))).abs() < 1e-12,
            "{}",
            s.param[0]
        );
        let w = AdamOpts {
            wd: 0.5,
            decoupled: true,
            ..a
        };
        let s = adam(&[1.0], &[-3.0], &[0.0], &[0.0], &[0.0], &w);
        let lr = f64::from(0.1f32);
        assert!((s.param[0] - ((1.0 - lr * 0.5) + lr)).abs() < 1e-12);
    }
}
