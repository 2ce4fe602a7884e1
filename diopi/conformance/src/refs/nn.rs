//! Softmax and 2-D convolution, forward and backward.

use super::split_at_dim;
use crate::tensor::HostTensor;

/// Softmax (or log-softmax) along `dim`.
pub(crate) fn softmax(x: &HostTensor, dim: usize, log: bool) -> HostTensor {
    let (outer, n, inner) = split_at_dim(&x.shape, dim);
    let mut out = vec![0.0; x.numel()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| o * n * inner + k * inner + i;
            let m = (0..n)
                .map(|k| x.data[at(k)])
                .fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..n).map(|k| (x.data[at(k)] - m).exp()).sum();
            for k in 0..n {
                let z = x.data[at(k)] - m;
                out[at(k)] = if log { z - s.ln() } else { z.exp() / s };
            }
        }
    }
    HostTensor::new(x.dtype, &x.shape, out)
}

/// SoftmaxBackward / LogSoftmaxBackward from the forward output `y`:
/// `y*(go - Σgo*y)`, or `go - exp(y)*Σgo` for the log form.
pub(crate) fn softmax_backward(
    go: &HostTensor,
    y: &HostTensor,
    dim: usize,
    log: bool,
) -> HostTensor {
    let (outer, n, inner) = split_at_dim(&y.shape, dim);
    let mut out = vec![0.0; y.numel()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| o * n * inner + k * inner + i;
            if log {
                let s: f64 = (0..n).map(|k| go.data[at(k)]).sum();
                for k in 0..n {
                    out[at(k)] = go.data[at(k)] - y.data[at(k)].exp() * s;
                }
            } else {
                let s: f64 = (0..n).map(|k| go.data[at(k)] * y.data[at(k)]).sum();
                for k in 0..n {
                    out[at(k)] = y.data[at(k)] * (go.data[at(k)] - s);
                }
            }
        }
    }
    HostTensor::new(y.dtype, &y.shape, out)
}

/// Stride, padding, dilation and groups of a convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvParams {
    /// (h, w) strides.
    pub(crate) stride: [usize; 2],
    /// (h, w) zero padding.
    pub(crate) padding: [usize; 2],
    /// (h, w) dilation.
    pub(crate) dilation: [usize; 2],
    /// Groups.
    pub(crate) groups: usize,
}

/// Output size of a window sweep (floor mode).
pub(crate) fn out_size(input: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (input + 2 * p - d * (k - 1) - 1) / s + 1
}

/// Visits every (out index, input index, weight index) multiply of a
/// convolution of `x` [N,C,H,W] with `w` [O,C/g,KH,KW]; input taps in the
/// padding are skipped.
fn conv_taps(
    x: &[i64],
    w: &[i64],
    p: &ConvParams,
    mut f: impl FnMut(usize, usize, usize),
) -> [usize; 4] {
    let (n, c, h, wd) = (x[0] as usize, x[1] as usize, x[2] as usize, x[3] as usize);
    let (o, cg, kh, kw) = (w[0] as usize, w[1] as usize, w[2] as usize, w[3] as usize);
    let oh = out_size(h, kh, p.stride[0], p.padding[0], p.dilation[0]);
    let ow = out_size(wd, kw, p.stride[1], p.padding[1], p.dilation[1]);
    let og = o / p.groups;
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for y in 0..oh {
                for xx in 0..ow {
                    let oi = ((b * o + oc) * oh + y) * ow + xx;
                    for ic in 0..cg {
                        let cin = g * cg + ic;
                        for i in 0..kh {
                            let iy = (y * p.stride[0] + i * p.dilation[0]) as isize
                                - p.padding[0] as isize;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            for j in 0..kw {
                                let ix = (xx * p.stride[1] + j * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if ix < 0 || ix >= wd as isize {
                                    continue;
                                }
                                let ii = ((b * c + cin) * h + iy as usize) * wd + ix as usize;
                                let wi = ((oc * cg + ic) * kh + i) * kw + j;
                                f(oi, ii, wi);
                            }
                        }
                    }
                }
            }
        }
    }
    [n, o, oh, ow]
}

/// Convolution2d: `out[b,o,y,x] = bias[o] + Σ x[b,c,..] * w[o,c,..]`.
pub(crate) fn conv2d(
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
    p: &ConvParams,
) -> HostTensor {
    let mut shape = [0usize; 4];
    let mut out = Vec::new();
    // Two passes: the first learns the output size.
    shape.copy_from_slice(&conv_taps(&x.shape, &w.shape, p, |_, _, _| {}));
    out.resize(shape.iter().product(), 0.0);
    conv_taps(&x.shape, &w.shape, p, |oi, ii, wi| {
        out[oi] += x.data[ii] * w.data[wi]
    });
    if let Some(bias) = bias {
        let plane = shape[2] * shape[3];
        for (k, v) in out.iter_mut().enumerate() {
            *v += bias.data[(k / plane) % shape[1]];
        }
    }
    let s: Vec<i64> = shape.iter().map(|&v| v as i64).collect();
    HostTensor::new(x.dtype, &s, out)
}

/// Convolution2dBackward: (grad_input, grad_weight, grad_bias), each
/// forward multiply-add contributing to both gradients.
pub(crate) fn conv2d_backward(
    go: &HostTensor,
    x: &HostTensor,
    w: &HostTensor,
    p: &ConvParams,
) -> (HostTensor, HostTensor, HostTensor) {
    let mut gi = vec![0.0; x.numel()];
    let mut gw = vec![0.0; w.numel()];
    let shape = conv_taps(&x.shape, &w.shape, p, |oi, ii, wi| {
        gi[ii] += go.data[oi] * w.data[wi];
        gw[wi] += go.data[oi] * x.data[ii];
    });
    let plane = shape[2] * shape[3];
    let mut gb = vec![0.0; shape[1]];
    for (k, g) in go.data.iter().enumerate() {
        gb[(k / plane) % shape[1]] += g;
    }
    (
        HostTensor::new(x.dtype, &x.shape, gi),
        HostTensor::new(w.dtype, &w.shape, gw),
        HostTensor::new(x.dtype, &[shape[1] as i64], gb),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;

    #[test]
    fn softmax_values() {
        let x = HostTensor::new(Dtype::F64, &[1, 2], vec![0.0, 2f64.ln()]);
        let y = softmax(&x, 1, false);
        assert!((y.data[0] - 1.0 / 3.0).abs() < 1e-15 && (y.data[1] - 2.0 / 3.0).abs() < 1e-15);
        let l = softmax(&x, 1, true);
        assert!((l.data[0] - (1.0f64 / 3.0).ln()).abs() < 1e-15);
        let go = HostTensor::new(Dtype::F64, &[1, 2], vec![1.0, 0.0]);
        // d y0 / d x = y0 (1 - y0), -y0 y1
        let g = softmax_backward(&go, &y, 1, false);
        assert!((g.data[0] - 2.0 / 9.0).abs() < 1e-15 && (g.data[1] + 2.0 / 9.0).abs() < 1e-15);
    }

    #[test]
    fn conv_by_hand() {
        let x = HostTensor::new(Dtype::F64, &[1, 1, 3, 3], (1..=9).map(f64::from).collect());
        let w = HostTensor::new(Dtype::F64, &[1, 1, 2, 2], vec![1.0, 0.0, 0.0, -1.0]);
        let b = HostTensor::new(Dtype::F64, &[1], vec![0.5]);
        let p = ConvParams {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        };
        let y = conv2d(&x, &w, Some(&b), &p);
        assert_eq!(y.shape, vec![1, 1, 2, 2]);
        assert_eq!(y.data, vec![-3.5; 4]);
        let go = HostTensor::new(Dtype::F64, &[1, 1, 2, 2], vec![1.0; 4]);
        let (gi, gw, gb) = conv2d_backward(&go, &x, &w, &p);
        assert_eq!(
            gi.data,
            vec![1.0, 1.0, 0.0, 1.0, 0.0, -1.0, 0.0, -1.0, -1.0]
        );
        assert_eq!(gw.data, vec![12.0, 16.0, 24.0, 28.0]);
        assert_eq!(gb.data, vec![4.0]);
    }
}
