//! Scalar functions for the elementwise ops, and the broadcasting map.

use super::{broadcast_index, broadcast_shape};
use crate::dtype::Dtype;
use crate::tensor::HostTensor;

/// `f` over the broadcast of `inputs`, result in `dtype`.
pub(crate) fn map(dtype: Dtype, inputs: &[&HostTensor], f: impl Fn(&[f64]) -> f64) -> HostTensor {
    let mut shape: Vec<i64> = Vec::new();
    for t in inputs {
        shape = broadcast_shape(&shape, &t.shape).expect("broadcastable shapes");
    }
    let idx: Vec<Vec<usize>> = inputs
        .iter()
        .map(|t| broadcast_index(&t.shape, &shape))
        .collect();
    let n = idx.first().map_or(0, Vec::len);
    let mut vals = vec![0.0; inputs.len()];
    let data = (0..n)
        .map(|k| {
            for (v, (t, ix)) in vals.iter_mut().zip(inputs.iter().zip(&idx)) {
                *v = t.data[ix[k]];
            }
            f(&vals)
        })
        .collect();
    HostTensor::new(dtype, &shape, data)
}

/// The error function, to f64 precision: its Maclaurin series for
/// |x| < 3, the continued fraction of erfc beyond.
pub(crate) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 3.0 {
        // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a < 27.0 {
        // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        let mut frac = a;
        for k in (1..80).rev() {
            frac = a + (k as f64 / 2.0) / frac;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / frac
    } else {
        1.0
    };
    r.copysign(x)
}

/// `1 / (1 + e^-x)`.
pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// GELU, exact (`"none"`) or with the tanh approximation (`"tanh"`).
pub(crate) fn gelu(x: f64, tanh: bool) -> f64 {
    if tanh {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
    } else {
        0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
    }
}

/// d gelu / dx.
pub(crate) fn gelu_grad(x: f64, tanh: bool) -> f64 {
    if tanh {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let inner = k * (x + 0.044715 * x * x * x);
        let t = inner.tanh();
        let dinner = k * (1.0 + 3.0 * 0.044715 * x * x);
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner
    } else {
        let cdf = 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
        let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        cdf + x * pdf
    }
}

/// `x * sigmoid(x)`.
pub(crate) fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

/// d silu / dx.
pub(crate) fn silu_grad(x: f64) -> f64 {
    let s = sigmoid(x);
    s * (1.0 + x * (1.0 - s))
}

/// Sign: -1, 0 or 1 (NaN stays NaN).
pub(crate) fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

/// Division with DIOPI's round mode: 0 none, 1 trunc, 2 floor.
pub(crate) fn div(a: f64, b: f64, mode: i32) -> f64 {
    let q = a / b;
    match mode {
        1 => q.trunc(),
        2 => q.floor(),
        _ => q,
    }
}

/// torch.maximum / minimum: NaN if either is NaN.
pub(crate) fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// See [`maximum`].
pub(crate) fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// torch.clamp: `min(max(x, lo), hi)` with either bound optional.
pub(crate) fn clamp(x: f64, lo: Option<f64>, hi: Option<f64>) -> f64 {
    let mut v = x;
    if let Some(l) = lo {
        v = if v < l { l } else { v };
    }
    if let Some(h) = hi {
        v = if v > h { h } else { v };
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn erf_known_values() {
        // Abramowitz & Stegun table 7.1.
        assert!(close(erf(0.5), 0.520_499_877_813_046_5, 1e-15));
        assert!(close(erf(1.0), 0.842_700_792_949_714_9, 1e-15));
        assert!(close(erf(2.0), 0.995_322_265_018_952_7, 1e-15));
        assert!(close(erf(-3.5), -0.999_999_256_901_627_7, 1e-15));
        assert!(close(erf(1e-4), 1.128_379_163_334_248_9e-4, 1e-12));
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(40.0), 1.0);
    }

    #[test]
    fn activations() {
        assert!(close(gelu(1.0, false), 0.841_344_746_068_542_9, 1e-14));
        assert!(close(gelu(1.0, true), 0.841_191_990_608_276_8, 1e-12));
        assert!(close(silu(1.0), 0.731_058_578_630_004_9, 1e-14));
        for x in [-2.0, -0.3, 0.7, 1.9] {
            for t in [false, true] {
                let h = 1e-6;
                let num = (gelu(x + h, t) - gelu(x - h, t)) / (2.0 * h);
                assert!(close(gelu_grad(x, t), num, 1e-8), "{x} {t}");
            }
            let num = (silu(x + 1e-6) - silu(x - 1e-6)) / 2e-6;
            assert!(close(silu_grad(x), num, 1e-8));
        }
    }

    #[test]
    fn division_modes_and_bounds() {
        assert_eq!(div(-7.0, 2.0, 0), -3.5);
        assert_eq!(div(-7.0, 2.0, 1), -3.0);
        assert_eq!(div(-7.0, 2.0, 2), -4.0);
        assert_eq!(clamp(5.0, Some(0.0), Some(1.0)), 1.0);
        assert_eq!(clamp(-5.0, Some(0.0), None), 0.0);
        assert!(maximum(f64::NAN, 1.0).is_nan());
        assert_eq!(sign(-0.5), -1.0);
    }

    #[test]
    fn map_broadcasts() {
        let a = HostTensor::new(Dtype::F32, &[2, 1], vec![1.0, 2.0]);
        let b = HostTensor::new(Dtype::F32, &[3], vec![10.0, 20.0, 30.0]);
        let r = map(Dtype::F32, &[&a, &b], |v| v[0] + v[1]);
        assert_eq!(r.shape, vec![2, 3]);
        assert_eq!(r.data, vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
    }
}
