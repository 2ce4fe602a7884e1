//! Embedding, index_select, cat, where, masked_fill, tril/triu.

use super::elementwise::map;
use super::split_at_dim;
use crate::tensor::HostTensor;

/// Embedding: rows of `w` [V, D] picked by `idx`, shape `idx.shape + [D]`.
pub(crate) fn embedding(w: &HostTensor, idx: &HostTensor) -> HostTensor {
    let d = w.size(1);
    let data = idx
        .data
        .iter()
        .flat_map(|&i| w.data[i as usize * d..][..d].to_vec())
        .collect();
    let mut shape = idx.shape.clone();
    shape.push(d as i64);
    HostTensor::new(w.dtype, &shape, data)
}

/// EmbeddingBackward: grad rows summed into [num_weights, D]; rows of
/// `padding_idx` get nothing; `scale_by_freq` divides by each index's count.
pub(crate) fn embedding_backward(
    grad: &HostTensor,
    idx: &HostTensor,
    num_weights: usize,
    padding_idx: i64,
    scale_by_freq: bool,
) -> HostTensor {
    let d = *grad.shape.last().expect("rank >= 1") as usize;
    let mut out = vec![0.0; num_weights * d];
    let mut count = vec![0.0; num_weights];
    for &i in &idx.data {
        count[i as usize] += 1.0;
    }
    for (k, &i) in idx.data.iter().enumerate() {
        if i as i64 == padding_idx {
            continue;
        }
        let scale = if scale_by_freq {
            1.0 / count[i as usize]
        } else {
            1.0
        };
        for j in 0..d {
            out[i as usize * d + j] += grad.data[k * d + j] * scale;
        }
    }
    HostTensor::new(grad.dtype, &[num_weights as i64, d as i64], out)
}

/// IndexSelect along `dim`.
pub(crate) fn index_select(x: &HostTensor, dim: usize, idx: &HostTensor) -> HostTensor {
    let (outer, n, inner) = split_at_dim(&x.shape, dim);
    let mut data = Vec::with_capacity(outer * idx.numel() * inner);
    for o in 0..outer {
        for &i in &idx.data {
            data.extend_from_slice(&x.data[(o * n + i as usize) * inner..][..inner]);
        }
    }
    let mut shape = x.shape.clone();
    shape[dim] = idx.numel() as i64;
    HostTensor::new(x.dtype, &shape, data)
}

/// IndexSelectBackward: `grad` accumulated into zeros of `sizes`.
pub(crate) fn index_select_backward(
    grad: &HostTensor,
    sizes: &[i64],
    dim: usize,
    idx: &HostTensor,
) -> HostTensor {
    let (outer, n, inner) = split_at_dim(sizes, dim);
    let m = idx.numel();
    let mut out = vec![0.0; outer * n * inner];
    for o in 0..outer {
        for (k, &i) in idx.data.iter().enumerate() {
            for j in 0..inner {
                out[(o * n + i as usize) * inner + j] += grad.data[(o * m + k) * inner + j];
            }
        }
    }
    HostTensor::new(grad.dtype, sizes, out)
}

/// Cat along `dim`.
pub(crate) fn cat(ts: &[&HostTensor], dim: usize) -> HostTensor {
    let first = ts[0];
    let outer = first.shape[..dim].iter().product::<i64>() as usize;
    let mut data = Vec::new();
    for o in 0..outer {
        for t in ts {
            let chunk = t.shape[dim..].iter().product::<i64>() as usize;
            data.extend_from_slice(&t.data[o * chunk..][..chunk]);
        }
    }
    let mut shape = first.shape.clone();
    shape[dim] = ts.iter().map(|t| t.shape[dim]).sum();
    HostTensor::new(first.dtype, &shape, data)
}

/// Permute: output dim `d` is input dim `dims[d]`.
pub(crate) fn permute(x: &HostTensor, dims: &[usize]) -> HostTensor {
    let shape: Vec<i64> = dims.iter().map(|&d| x.shape[d]).collect();
    let in_strides = crate::tensor::contiguous_strides(&x.shape);
    let n = x.numel();
    let mut data = Vec::with_capacity(n);
    let mut idx = vec![0i64; shape.len()];
    for _ in 0..n {
        let off: i64 = dims
            .iter()
            .enumerate()
            .map(|(d, &src)| idx[d] * in_strides[src])
            .sum();
        data.push(x.data[off as usize]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    HostTensor::new(x.dtype, &shape, data)
}

/// Stack: a new dimension `dim` over equally shaped tensors.
pub(crate) fn stack(ts: &[&HostTensor], dim: usize) -> HostTensor {
    let unsqueezed: Vec<HostTensor> = ts
        .iter()
        .map(|t| {
            let mut shape = t.shape.clone();
            shape.insert(dim, 1);
            HostTensor::new(t.dtype, &shape, t.data.clone())
        })
        .collect();
    let refs: Vec<&HostTensor> = unsqueezed.iter().collect();
    cat(&refs, dim)
}

/// Where: `cond ? a : b`, broadcast.
pub(crate) fn where_(cond: &HostTensor, a: &HostTensor, b: &HostTensor) -> HostTensor {
    map(a.dtype, &[cond, a, b], |v| {
        if v[0] != 0.0 {
            v[1]
        } else {
            v[2]
        }
    })
}

/// MaskedFill: `mask ? value : x`, mask broadcast to x.
pub(crate) fn masked_fill(x: &HostTensor, mask: &HostTensor, value: f64) -> HostTensor {
    map(
        x.dtype,
        &[x, mask],
        |v| if v[1] != 0.0 { value } else { v[0] },
    )
}

/// Tril (`upper` false: keep `j - i <= diagonal`) or Triu (keep
/// `j - i >= diagonal`) on the last two dims.
pub(crate) fn tri(x: &HostTensor, diagonal: i64, upper: bool) -> HostTensor {
    let nd = x.ndim();
    let (r, c) = (x.size(nd - 2), x.size(nd - 1));
    let data = x
        .data
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let (i, j) = (((k / c) % r) as i64, (k % c) as i64);
            let keep = if upper {
                j - i >= diagonal
            } else {
                j - i <= diagonal
            };
            if keep {
                v
            } else {
                0.0
            }
        })
        .collect();
    HostTensor::new(x.dtype, &x.shape, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;

    #[test]
    fn index_ops_by_hand() {
        let w = HostTensor::new(Dtype::F32, &[3, 2], vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        let i = HostTensor::new(Dtype::I64, &[2], vec![2.0, 0.0]);
        assert_eq!(embedding(&w, &i).data, vec![20.0, 21.0, 0.0, 1.0]);
        assert_eq!(
            index_select(&w, 1, &HostTensor::new(Dtype::I64, &[1], vec![1.0])).data,
            vec![1.0, 11.0, 21.0]
        );
        let g = HostTensor::new(Dtype::F32, &[3, 2], vec![1.0; 6]);
        let ii = HostTensor::new(Dtype::I64, &[3], vec![1.0, 1.0, 0.0]);
        assert_eq!(
            embedding_backward(&g, &ii, 3, 0, false).data,
            vec![0.0, 0.0, 2.0, 2.0, 0.0, 0.0]
        );
        assert_eq!(
            embedding_backward(&g, &ii, 3, -1, true).data,
            vec![1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
        );
        let gb = index_select_backward(&g, &[4, 2], 0, &ii);
        assert_eq!(gb.data, vec![1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
        let a = HostTensor::new(Dtype::F32, &[2, 1], vec![1.0, 2.0]);
        let b = HostTensor::new(Dtype::F32, &[2, 2], vec![3.0, 4.0, 5.0, 6.0]);
        assert_eq!(cat(&[&a, &b], 1).data, vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
        let m = HostTensor::new(Dtype::F32, &[3, 3], (1..=9).map(f64::from).collect());
        assert_eq!(
            tri(&m, 0, false).data,
            vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0]
        );
        assert_eq!(
            tri(&m, 1, true).data,
            vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0, 0.0, 0.0, 0.0]
        );
        let p = permute(&b, &[1, 0]);
        assert_eq!((p.shape, p.data), (vec![2, 2], vec![3.0, 5.0, 4.0, 6.0]));
        let t3 = HostTensor::new(Dtype::F32, &[1, 2, 3], (0..6).map(f64::from).collect());
        let p3 = permute(&t3, &[2, 0, 1]);
        assert_eq!(p3.shape, vec![3, 1, 2]);
        assert_eq!(p3.data, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let s = stack(&[&a, &a], 1);
        assert_eq!((s.shape, s.data), (vec![2, 2, 1], vec![1.0, 1.0, 2.0, 2.0]));
        let cond = HostTensor::new(Dtype::Bool, &[2], vec![1.0, 0.0]);
        assert_eq!(where_(&cond, &b, &a).data, vec![3.0, 1.0, 5.0, 2.0]);
    }
}
