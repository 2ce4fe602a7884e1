//! Reductions: sum and mean over dims, max/min with indices, argmax.

use crate::dtype::Dtype;
use crate::tensor::{contiguous_strides, numel, HostTensor};

/// Normalises a possibly negative `dim` for rank `nd` (0-dim: rank 1).
pub(crate) fn wrap_dim(dim: i64, nd: usize) -> usize {
    let n = nd.max(1) as i64;
    (if dim < 0 { dim + n } else { dim }) as usize
}

/// Reduces `t` over `dims` (empty: all) with `f` on each group of values;
/// `keepdim` keeps reduced dims as size 1.
pub(crate) fn reduce(
    t: &HostTensor,
    dims: &[i64],
    keepdim: bool,
    dtype: Dtype,
    f: impl Fn(&[f64]) -> f64,
) -> HostTensor {
    let nd = t.ndim();
    let reduced: Vec<bool> = (0..nd)
        .map(|d| dims.is_empty() || dims.iter().any(|&x| wrap_dim(x, nd) == d))
        .collect();
    let out_full: Vec<i64> = (0..nd)
        .map(|d| if reduced[d] { 1 } else { t.shape[d] })
        .collect();
    let out_strides = contiguous_strides(&out_full);
    let mut groups = vec![Vec::new(); numel(&out_full)];
    let in_strides = contiguous_strides(&t.shape);
    for (flat, &v) in t.data.iter().enumerate() {
        let mut o = 0i64;
        for d in 0..nd {
            let i = (flat as i64 / in_strides[d]) % t.shape[d];
            if !reduced[d] {
                o += i * out_strides[d];
            }
        }
        groups[o as usize].push(v);
    }
    let data = groups.iter().map(|g| f(g)).collect();
    let shape: Vec<i64> = if keepdim {
        out_full
    } else {
        (0..nd)
            .filter(|&d| !reduced[d])
            .map(|d| t.shape[d])
            .collect()
    };
    HostTensor::new(dtype, &shape, data)
}

/// Sum of the values.
pub(crate) fn sum(v: &[f64]) -> f64 {
    v.iter().sum()
}

/// Mean of the values (NaN for none).
pub(crate) fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// (value, first index) of the largest (`max`) or smallest value; NaN wins.
pub(crate) fn extreme(v: &[f64], max: bool) -> (f64, usize) {
    let mut best = (v[0], 0);
    for (i, &x) in v.iter().enumerate().skip(1) {
        if best.0.is_nan() {
            break;
        }
        let better = if max { x > best.0 } else { x < best.0 };
        if x.is_nan() || better {
            best = (x, i);
        }
    }
    best
}

/// `Max`/`Min` along `dim`: values and int64 indices, keepdim as given.
pub(crate) fn max_min_dim(
    t: &HostTensor,
    dim: i64,
    keepdim: bool,
    max: bool,
) -> (HostTensor, HostTensor) {
    let d = [dim];
    let vals = reduce(t, &d, keepdim, t.dtype, |g| extreme(g, max).0);
    let idx = reduce(t, &d, keepdim, Dtype::I64, |g| extreme(g, max).1 as f64);
    (vals, idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions() {
        let t = HostTensor::new(Dtype::F32, &[2, 3], vec![1.0, 5.0, 3.0, 4.0, 2.0, 6.0]);
        assert_eq!(
            reduce(&t, &[1], false, Dtype::F32, sum).data,
            vec![9.0, 12.0]
        );
        assert_eq!(reduce(&t, &[0], true, Dtype::F32, sum).shape, vec![1, 3]);
        assert_eq!(
            reduce(&t, &[0], true, Dtype::F32, sum).data,
            vec![5.0, 7.0, 9.0]
        );
        let all = reduce(&t, &[], false, Dtype::F32, mean);
        assert_eq!((all.shape.len(), all.data[0]), (0, 3.5));
        let (v, i) = max_min_dim(&t, -1, false, true);
        assert_eq!((v.data, i.data), (vec![5.0, 6.0], vec![1.0, 2.0]));
        let (v, i) = max_min_dim(&t, 0, true, false);
        assert_eq!((v.data, i.data), (vec![1.0, 2.0, 3.0], vec![0.0, 1.0, 0.0]));
    }
}
