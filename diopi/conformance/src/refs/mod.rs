//! Naive CPU references, by group, in `f64`, written from the operators'
//! definitions and independent of any kernel library.

pub(crate) mod elementwise;
pub(crate) mod index;
pub(crate) mod llm;
pub(crate) mod loss;
pub(crate) mod matmul;
pub(crate) mod nn;
pub(crate) mod norm;
pub(crate) mod optim;
pub(crate) mod pool;
pub(crate) mod reduce;

use super::tensor::{contiguous_strides, numel};

/// The broadcast of shapes `a` and `b` (numpy rules), `None` if they do not
/// broadcast.
pub(crate) fn broadcast_shape(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// For each element of `out_shape` (row-major), the flat index of the
/// element of a tensor of shape `src` broadcast to it.
pub(crate) fn broadcast_index(src: &[i64], out_shape: &[i64]) -> Vec<usize> {
    let strides = contiguous_strides(src);
    let lead = out_shape.len() - src.len();
    let n = numel(out_shape);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0i64; out_shape.len()];
    for _ in 0..n {
        let mut off = 0i64;
        for (d, &s) in src.iter().enumerate() {
            if s != 1 {
                off += idx[lead + d] * strides[d];
            }
        }
        out.push(off as usize);
        for d in (0..out_shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Splits `shape` around `dim`: (product before, size, product after).
pub(crate) fn split_at_dim(shape: &[i64], dim: usize) -> (usize, usize, usize) {
    let outer = numel(&shape[..dim]);
    let size = shape[dim] as usize;
    let inner = numel(&shape[dim + 1..]);
    (outer, size, inner)
}

/// Vector-Jacobian product by central differences: `Σ_k go[k] ∂f(x)_k/∂x_j`
/// for every j. `f` must be smooth near `x` (no ties, no kinks).
pub(crate) fn numeric_vjp(x: &[f64], go: &[f64], f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    let mut xs = x.to_vec();
    (0..x.len())
        .map(|j| {
            let h = 1e-6 * x[j].abs().max(1.0);
            xs[j] = x[j] + h;
            let up = f(&xs);
            xs[j] = x[j] - h;
            let down = f(&xs);
            xs[j] = x[j];
            up.iter()
                .zip(&down)
                .zip(go)
                .map(|((u, d), g)| g * (u - d) / (2.0 * h))
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shape(&[3, 1], &[4]), Some(vec![3, 4]));
        assert_eq!(broadcast_shape(&[2], &[3]), None);
        assert_eq!(broadcast_shape(&[], &[2]), Some(vec![2]));
        assert_eq!(broadcast_index(&[3, 1], &[3, 2]), vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(broadcast_index(&[2], &[2, 2]), vec![0, 1, 0, 1]);
    }

    #[test]
    fn numeric_vjp_of_a_product() {
        // f(x) = [x0*x1, x0^2]; go = [1, 2] -> [x1 + 4 x0, x0]
        let g = numeric_vjp(&[3.0, 5.0], &[1.0, 2.0], |x| vec![x[0] * x[1], x[0] * x[0]]);
        assert!(
            (g[0] - 17.0).abs() < 1e-6 && (g[1] - 3.0).abs() < 1e-6,
            "{g:?}"
        );
    }
}
