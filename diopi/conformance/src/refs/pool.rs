//! 2-D pooling (max with indices, average, adaptive average), forward and
//! backward.

use crate::dtype::Dtype;
use crate::tensor::{numel, HostTensor};

/// Window parameters of a 2-D pooling.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolParams {
    /// Kernel (h, w).
    pub(crate) kernel: [usize; 2],
    /// Stride (h, w).
    pub(crate) stride: [usize; 2],
    /// Padding (h, w).
    pub(crate) padding: [usize; 2],
    /// Dilation (h, w) (max pooling only).
    pub(crate) dilation: [usize; 2],
    /// Ceil instead of floor for the output size.
    pub(crate) ceil_mode: bool,
}

/// PyTorch's pooling output size, ceil mode included.
pub(crate) fn pool_out(input: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> usize {
    let span = (input + 2 * p) as i64 - (d * (k - 1)) as i64 - 1;
    let mut o = if ceil {
        (span + s as i64 - 1).div_euclid(s as i64)
    } else {
        span.div_euclid(s as i64)
    } + 1;
    if ceil && (o - 1) * s as i64 >= (input + p) as i64 {
        o -= 1;
    }
    o as usize
}

/// MaxPool2dWithIndices on [N,C,H,W]: values and int64 indices `y*W+x`
/// within each plane.
pub(crate) fn max_pool2d(x: &HostTensor, p: &PoolParams) -> (HostTensor, HostTensor) {
    let (nc, h, w) = (x.size(0) * x.size(1), x.size(2), x.size(3));
    let oh = pool_out(
        h,
        p.kernel[0],
        p.stride[0],
        p.padding[0],
        p.dilation[0],
        p.ceil_mode,
    );
    let ow = pool_out(
        w,
        p.kernel[1],
        p.stride[1],
        p.padding[1],
        p.dilation[1],
        p.ceil_mode,
    );
    let (mut vals, mut idx) = (Vec::new(), Vec::new());
    for plane in 0..nc {
        for y in 0..oh {
            for xx in 0..ow {
                let mut best = (f64::NEG_INFINITY, -1i64);
                for i in 0..p.kernel[0] {
                    let iy = (y * p.stride[0] + i * p.dilation[0]) as isize - p.padding[0] as isize;
                    for j in 0..p.kernel[1] {
                        let ix =
                            (xx * p.stride[1] + j * p.dilation[1]) as isize - p.padding[1] as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            continue;
                        }
                        let k = iy as usize * w + ix as usize;
                        let v = x.data[plane * h * w + k];
                        if v > best.0 || v.is_nan() || best.1 < 0 {
                            best = (v, k as i64);
                        }
                    }
                }
                vals.push(best.0);
                idx.push(best.1 as f64);
            }
        }
    }
    let shape = [x.shape[0], x.shape[1], oh as i64, ow as i64];
    (
        HostTensor::new(x.dtype, &shape, vals),
        HostTensor::new(Dtype::I64, &shape, idx),
    )
}

/// MaxPool2dBackward: each output's gradient goes to its argmax.
pub(crate) fn max_pool2d_backward(go: &HostTensor, x: &HostTensor, idx: &HostTensor) -> HostTensor {
    let plane_in = x.size(2) * x.size(3);
    let plane_out = go.size(2) * go.size(3);
    let mut gi = vec![0.0; x.numel()];
    for (k, g) in go.data.iter().enumerate() {
        gi[(k / plane_out) * plane_in + idx.data[k] as usize] += g;
    }
    HostTensor::new(x.dtype, &x.shape, gi)
}

/// Average-pooling options beyond the window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AvgOpts {
    /// Count padded zeros in the divisor.
    pub(crate) count_include_pad: bool,
    /// A fixed divisor.
    pub(crate) divisor_override: Option<i64>,
}

/// Visits (output index, input index, divisor) for every tap of a 2-D
/// average pooling of [N,C,H,W]; returns the output shape.
fn avg_taps(
    shape: &[i64],
    p: &PoolParams,
    o: &AvgOpts,
    mut f: impl FnMut(usize, usize, f64),
) -> Vec<i64> {
    let (nc, h, w) = (
        (shape[0] * shape[1]) as usize,
        shape[2] as usize,
        shape[3] as usize,
    );
    let oh = pool_out(h, p.kernel[0], p.stride[0], p.padding[0], 1, p.ceil_mode);
    let ow = pool_out(w, p.kernel[1], p.stride[1], p.padding[1], 1, p.ceil_mode);
    for plane in 0..nc {
        for y in 0..oh {
            for xx in 0..ow {
                let hs = (y * p.stride[0]) as i64 - p.padding[0] as i64;
                let ws = (xx * p.stride[1]) as i64 - p.padding[1] as i64;
                let he = (hs + p.kernel[0] as i64).min((h + p.padding[0]) as i64);
                let we = (ws + p.kernel[1] as i64).min((w + p.padding[1]) as i64);
                let pool = (he - hs) * (we - ws);
                let (hs, ws) = (hs.max(0), ws.max(0));
                let (he, we) = (he.min(h as i64), we.min(w as i64));
                let div = match o.divisor_override {
                    Some(d) => d as f64,
                    None if o.count_include_pad => pool as f64,
                    None => ((he - hs) * (we - ws)) as f64,
                };
                let oi = (plane * oh + y) * ow + xx;
                for iy in hs..he {
                    for ix in ws..we {
                        f(oi, plane * h * w + iy as usize * w + ix as usize, div);
                    }
                }
            }
        }
    }
    vec![shape[0], shape[1], oh as i64, ow as i64]
}

/// AvgPool2d with PyTorch's divisor rules.
pub(crate) fn avg_pool2d(x: &HostTensor, p: &PoolParams, o: &AvgOpts) -> HostTensor {
    let shape = avg_taps(&x.shape, p, o, |_, _, _| {});
    let mut out = vec![0.0; numel(&shape)];
    avg_taps(&x.shape, p, o, |oi, ii, d| out[oi] += x.data[ii] / d);
    HostTensor::new(x.dtype, &shape, out)
}

/// AvgPool2dBackward.
pub(crate) fn avg_pool2d_backward(
    go: &HostTensor,
    x: &HostTensor,
    p: &PoolParams,
    o: &AvgOpts,
) -> HostTensor {
    let mut gi = vec![0.0; x.numel()];
    avg_taps(&x.shape, p, o, |oi, ii, d| gi[ii] += go.data[oi] / d);
    HostTensor::new(x.dtype, &x.shape, gi)
}

/// Visits (output index, input index, count) of AdaptiveAvgPool2d.
fn adaptive_taps(shape: &[i64], out_hw: [usize; 2], mut f: impl FnMut(usize, usize, f64)) {
    let (nc, h, w) = (
        (shape[0] * shape[1]) as usize,
        shape[2] as usize,
        shape[3] as usize,
    );
    let [oh, ow] = out_hw;
    for plane in 0..nc {
        for y in 0..oh {
            let (hs, he) = (y * h / oh, ((y + 1) * h).div_ceil(oh));
            for xx in 0..ow {
                let (ws, we) = (xx * w / ow, ((xx + 1) * w).div_ceil(ow));
                let cnt = ((he - hs) * (we - ws)) as f64;
                for iy in hs..he {
                    for ix in ws..we {
                        f((plane * oh + y) * ow + xx, plane * h * w + iy * w + ix, cnt);
                    }
                }
            }
        }
    }
}

/// AdaptiveAvgPool2d to `out_hw`.
pub(crate) fn adaptive_avg_pool2d(x: &HostTensor, out_hw: [usize; 2]) -> HostTensor {
    let mut out = vec![0.0; x.size(0) * x.size(1) * out_hw[0] * out_hw[1]];
    adaptive_taps(&x.shape, out_hw, |oi, ii, c| out[oi] += x.data[ii] / c);
    let shape = [x.shape[0], x.shape[1], out_hw[0] as i64, out_hw[1] as i64];
    HostTensor::new(x.dtype, &shape, out)
}

/// AdaptiveAvgPool2dBackward.
pub(crate) fn adaptive_avg_pool2d_backward(go: &HostTensor, x: &HostTensor) -> HostTensor {
    let out_hw = [go.size(2), go.size(3)];
    let mut gi = vec![0.0; x.numel()];
    adaptive_taps(&x.shape, out_hw, |oi, ii, c| gi[ii] += go.data[oi] / c);
    HostTensor::new(x.dtype, &x.shape, gi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_by_hand() {
        let x = HostTensor::new(Dtype::F64, &[1, 1, 3, 3], (1..=9).map(f64::from).collect());
        let pp = PoolParams {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: true,
        };
        let (v, i) = max_pool2d(&x, &pp);
        assert_eq!(
            (v.data, i.data),
            (vec![5.0, 6.0, 8.0, 9.0], vec![4.0, 5.0, 7.0, 8.0])
        );
        let a = avg_pool2d(
            &x,
            &pp,
            &AvgOpts {
                count_include_pad: true,
                divisor_override: None,
            },
        );
        assert_eq!(a.data, vec![3.0, 4.5, 7.5, 9.0]);
        let ad = adaptive_avg_pool2d(&x, [2, 2]);
        assert_eq!(ad.data, vec![3.0, 4.0, 6.0, 7.0]);
        assert_eq!(pool_out(5, 2, 2, 0, 1, true), 3);
        assert_eq!(pool_out(5, 2, 2, 0, 1, false), 2);
    }
}
