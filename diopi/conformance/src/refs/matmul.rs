//! Matrix products.

use crate::dtype::Dtype;
use crate::tensor::HostTensor;

/// `[m,k] x [k,n]` on raw row-major slices, f64 accumulation.
pub(crate) fn mm_raw(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    out
}

/// Transpose of a row-major `[r, c]` matrix.
pub(crate) fn transpose(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = a[i * c + j];
        }
    }
    out
}

/// `a @ b` for 2-D tensors.
pub(crate) fn mm(a: &HostTensor, b: &HostTensor, dtype: Dtype) -> HostTensor {
    let (m, k, n) = (a.size(0), a.size(1), b.size(1));
    HostTensor::new(
        dtype,
        &[m as i64, n as i64],
        mm_raw(&a.data, &b.data, m, k, n),
    )
}

/// `a @ b` for 3-D tensors, batch by batch.
pub(crate) fn bmm(a: &HostTensor, b: &HostTensor, dtype: Dtype) -> HostTensor {
    let (bs, m, k, n) = (a.size(0), a.size(1), a.size(2), b.size(2));
    let mut data = Vec::with_capacity(bs * m * n);
    for i in 0..bs {
        data.extend(mm_raw(
            &a.data[i * m * k..][..m * k],
            &b.data[i * k * n..][..k * n],
            m,
            k,
            n,
        ));
    }
    HostTensor::new(dtype, &[bs as i64, m as i64, n as i64], data)
}

/// torch.matmul for 1-D..3-D operands (batch dims broadcast when one side
/// is 2-D).
pub(crate) fn matmul(a: &HostTensor, b: &HostTensor, dtype: Dtype) -> HostTensor {
    match (a.ndim(), b.ndim()) {
        (1, 1) => {
            let v = a.data.iter().zip(&b.data).map(|(x, y)| x * y).sum();
            HostTensor::new(dtype, &[], vec![v])
        }
        (2, 2) => mm(a, b, dtype),
        (1, 2) => {
            let (k, n) = (b.size(0), b.size(1));
            HostTensor::new(dtype, &[n as i64], mm_raw(&a.data, &b.data, 1, k, n))
        }
        (2, 1) => {
            let (m, k) = (a.size(0), a.size(1));
            HostTensor::new(dtype, &[m as i64], mm_raw(&a.data, &b.data, m, k, 1))
        }
        (3, 2) => {
            let (bs, m, k, n) = (a.size(0), a.size(1), a.size(2), b.size(1));
            HostTensor::new(
                dtype,
                &[bs as i64, m as i64, n as i64],
                mm_raw(&a.data, &b.data, bs * m, k, n),
            )
        }
        (3, 3) => bmm(a, b, dtype),
        (3, 1) => {
            let (bs, m, k) = (a.size(0), a.size(1), a.size(2));
            HostTensor::new(
                dtype,
                &[bs as i64, m as i64],
                mm_raw(&a.data, &b.data, bs * m, k, 1),
            )
        }
        (x, y) => panic!("matmul reference: ranks {x} and {y} not covered"),
    }
}

/// `beta * c + alpha * (a @ b)` with `c` broadcast to the product's shape
/// (torch: beta == 0 ignores `c`, NaN included).
pub(crate) fn addmm_like(
    c: &HostTensor,
    prod: &HostTensor,
    beta: f64,
    alpha: f64,
    dtype: Dtype,
) -> HostTensor {
    let ci = super::broadcast_index(&c.shape, &prod.shape);
    let data = prod
        .data
        .iter()
        .zip(ci)
        .map(|(p, i)| {
            if beta == 0.0 {
                alpha * p
            } else {
                beta * c.data[i] + alpha * p
            }
        })
        .collect();
    HostTensor::new(dtype, &prod.shape, data)
}

/// Linear: `x @ w^T + b` for `x` of any rank >= 1 (last dim = in features).
pub(crate) fn linear(
    x: &HostTensor,
    w: &HostTensor,
    b: Option<&HostTensor>,
    dtype: Dtype,
) -> HostTensor {
    let (o, i) = (w.size(0), w.size(1));
    let rows = x.numel() / i;
    let wt = transpose(&w.data, o, i);
    let mut data = mm_raw(&x.data, &wt, rows, i, o);
    if let Some(b) = b {
        for r in 0..rows {
            for j in 0..o {
                data[r * o + j] += b.data[j];
            }
        }
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("rank >= 1") = o as i64;
    HostTensor::new(dtype, &shape, data)
}

/// LinearBackward: (grad_input, grad_weight, grad_bias).
pub(crate) fn linear_backward(
    go: &HostTensor,
    x: &HostTensor,
    w: &HostTensor,
) -> (HostTensor, HostTensor, HostTensor) {
    let (o, i) = (w.size(0), w.size(1));
    let rows = x.numel() / i;
    let dt = x.dtype;
    let gi = HostTensor::new(dt, &x.shape, mm_raw(&go.data, &w.data, rows, o, i));
    let got = transpose(&go.data, rows, o);
    let gw = HostTensor::new(dt, &w.shape, mm_raw(&got, &x.data, o, rows, i));
    let gb = (0..o)
        .map(|j| (0..rows).map(|r| go.data[r * o + j]).sum())
        .collect();
    (gi, gw, HostTensor::new(dt, &[o as i64], gb))
}

/// MatmulBackward for (2-D, 2-D), (3-D, 3-D) and (3-D, 2-D) operands:
/// (grad_input, grad_other); a 2-D `other` sums over the batch.
pub(crate) fn matmul_backward(
    go: &HostTensor,
    a: &HostTensor,
    b: &HostTensor,
) -> (HostTensor, HostTensor) {
    let (k, n) = (b.size(b.ndim() - 2), b.size(b.ndim() - 1));
    let rows = a.numel() / k;
    if b.ndim() == 2 {
        // a as [rows, k], go as [rows, n]
        let ga = mm_raw(&go.data, &transpose(&b.data, k, n), rows, n, k);
        let gb = mm_raw(&transpose(&a.data, rows, k), &go.data, k, rows, n);
        return (
            HostTensor::new(a.dtype, &a.shape, ga),
            HostTensor::new(b.dtype, &b.shape, gb),
        );
    }
    let (bs, m) = (a.size(0), a.size(1));
    let (mut ga, mut gb) = (Vec::new(), Vec::new());
    for i in 0..bs {
        let (ai, bi, gi) = (
            &a.data[i * m * k..][..m * k],
            &b.data[i * k * n..][..k * n],
            &go.data[i * m * n..][..m * n],
        );
        ga.extend(mm_raw(gi, &transpose(bi, k, n), m, n, k));
        gb.extend(mm_raw(&transpose(ai, m, k), gi, k, m, n));
    }
    (
        HostTensor::new(a.dtype, &a.shape, ga),
        HostTensor::new(b.dtype, &b.shape, gb),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products() {
        let a = HostTensor::new(Dtype::F32, &[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = HostTensor::new(Dtype::F32, &[2, 2], vec![5.0, 6.0, 7.0, 8.0]);
        assert_eq!(mm(&a, &b, Dtype::F32).data, vec![19.0, 22.0, 43.0, 50.0]);
        let v = HostTensor::new(Dtype::F32, &[2], vec![1.0, 1.0]);
        assert_eq!(matmul(&a, &v, Dtype::F32).data, vec![3.0, 7.0]);
        assert_eq!(matmul(&v, &v, Dtype::F32).shape, Vec::<i64>::new());
        let bias = HostTensor::new(Dtype::F32, &[2], vec![10.0, 20.0]);
        // x @ a^T + b: [1,2]·[1,2]=5, [1,2]·[3,4]=11
        let x = HostTensor::new(Dtype::F32, &[1, 2], vec![1.0, 2.0]);
        assert_eq!(
            linear(&x, &a, Some(&bias), Dtype::F32).data,
            vec![15.0, 31.0]
        );
        let go = HostTensor::new(Dtype::F32, &[1, 2], vec![1.0, -1.0]);
        let (gi, gw, gb) = linear_backward(&go, &x, &a);
        assert_eq!(gi.data, vec![-2.0, -2.0]);
        assert_eq!(gw.data, vec![1.0, 2.0, -1.0, -2.0]);
        assert_eq!(gb.data, vec![1.0, -1.0]);
        // d(sum(a@b))/da = ones @ b^T; /db = a^T @ ones
        let ones = HostTensor::new(Dtype::F32, &[2, 2], vec![1.0; 4]);
        let (ga, gb) = matmul_backward(&ones, &a, &b);
        assert_eq!(ga.data, vec![11.0, 15.0, 11.0, 15.0]);
        assert_eq!(gb.data, vec![4.0, 4.0, 6.0, 6.0]);
        let c = HostTensor::new(Dtype::F32, &[2], vec![1.0, 1.0]);
        let r = addmm_like(&c, &mm(&a, &b, Dtype::F32), 2.0, 0.5, Dtype::F32);
        assert_eq!(r.data, vec![11.5, 13.0, 23.5, 27.0]);
    }
}
