//! 2-D pooling over the last two dims ([N, C, H, W] or [C, H, W]): max
//! with indices, average, adaptive average, and their backwards. Planes
//! are processed in parallel.

use crate::view::{read, write, TView};

/// Pooling window geometry (kernel, stride, padding, dilation per axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// kernel (h, w)
    pub k: (i64, i64),
    /// stride (h, w)
    pub s: (i64, i64),
    /// padding (h, w)
    pub p: (i64, i64),
    /// dilation (h, w)
    pub d: (i64, i64),
}

/// Output length along one axis (PyTorch's rule, with ceil_mode).
pub fn pool_out_len(len: i64, k: i64, s: i64, p: i64, d: i64, ceil: bool) -> i64 {
    let num = len + 2 * p - d * (k - 1) - 1;
    let mut o = if ceil {
        (num + s - 1).div_euclid(s) + 1
    } else {
        num.div_euclid(s) + 1
    };
    if ceil && (o - 1) * s >= len + p {
        o -= 1;
    }
    o
}

fn hw(v: &TView) -> (usize, usize, usize) {
    let nd = v.ndim;
    let (h, w) = (v.shape[nd - 2] as usize, v.shape[nd - 1] as usize);
    let planes = v.numel().checked_div(h * w).unwrap_or(0);
    (planes, h, w)
}

/// Max pooling: values into `out` and flat `h*W + w` indices into `idx`.
pub fn max_pool(out: &TView, idx: Option<&TView>, x: &TView, win: Window) {
    let xs = read::<f64>(x);
    let (planes, h, w) = hw(x);
    let (_, oh, ow) = hw(out);
    let mut vals = vec![0f64; planes * oh * ow];
    let mut ids = vec![0i64; planes * oh * ow];
    if oh * ow > 0 {
        crate::par::chunks2_each(
            &mut vals,
            oh * ow,
            &mut ids,
            oh * ow,
            xs.len() * 4,
            |pl, vo, io| {
                let src = &xs[pl * h * w..][..h * w];
                for y in 0..oh {
                    for xo in 0..ow {
                        let (mut best, mut bi) = (f64::NEG_INFINITY, -1i64);
                        'win: for i in 0..win.k.0 {
                            let iy = y as i64 * win.s.0 - win.p.0 + i * win.d.0;
                            if iy < 0 || iy >= h as i64 {
                                continue;
                            }
                            for j in 0..win.k.1 {
                                let ix = xo as i64 * win.s.1 - win.p.1 + j * win.d.1;
                                if ix < 0 || ix >= w as i64 {
                                    continue;
                                }
                                let v = src[iy as usize * w + ix as usize];
                                if v > best || v.is_nan() || bi < 0 {
                                    best = v;
                                    bi = iy * w as i64 + ix;
                                    if v.is_nan() {
                                        break 'win;
                                    }
                                }
                            }
                        }
                        vo[y * ow + xo] = best;
                        io[y * ow + xo] = bi;
                    }
                }
            },
        );
    }
    write(out, &vals);
    if let Some(t) = idx {
        write(t, &ids);
    }
}

/// Max pooling backward: each output's gradient goes to its index.
pub fn max_pool_backward(gi: &TView, go: &TView, idx: &TView) {
    let gs = read::<f64>(go);
    let is = read::<i64>(idx);
    let (planes, h, w) = hw(gi);
    let (_, oh, ow) = hw(go);
    let mut out = vec![0f64; planes * h * w];
    if h * w > 0 {
        crate::par::chunks_each(&mut out, h * w, gs.len() * 4, |pl, dst| {
            for k in 0..oh * ow {
                let i = is[pl * oh * ow + k];
                if i >= 0 && (i as usize) < h * w {
                    dst[i as usize] += gs[pl * oh * ow + k];
                }
            }
        });
    }
    write(gi, &out);
}

/// Average pooling options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgOpts {
    /// count padded positions in the divisor
    pub count_include_pad: bool,
    /// fixed divisor
    pub divisor: Option<i64>,
}

/// For output (y, x): the clipped window [h0, h1) x [w0, w1) and its divisor.
fn avg_window(
    y: i64,
    x: i64,
    h: i64,
    w: i64,
    win: Window,
    o: AvgOpts,
) -> (i64, i64, i64, i64, f64) {
    let (mut h0, mut w0) = (y * win.s.0 - win.p.0, x * win.s.1 - win.p.1);
    let (mut h1, mut w1) = (
        (h0 + win.k.0).min(h + win.p.0),
        (w0 + win.k.1).min(w + win.p.1),
    );
    let pool = (h1 - h0) * (w1 - w0);
    h0 = h0.max(0);
    w0 = w0.max(0);
    h1 = h1.min(h);
    w1 = w1.min(w);
    let div = match o.divisor {
        Some(d) => d,
        None if o.count_include_pad => pool,
        None => (h1 - h0) * (w1 - w0),
    };
    (h0, h1, w0, w1, div as f64)
}

/// Average pooling.
pub fn avg_pool(out: &TView, x: &TView, win: Window, o: AvgOpts) {
    let xs = read::<f64>(x);
    let (planes, h, w) = hw(x);
    let (_, oh, ow) = hw(out);
    let mut vals = vec![0f64; planes * oh * ow];
    if oh * ow > 0 {
        crate::par::chunks_each(&mut vals, oh * ow, xs.len() * 4, |pl, dst| {
            let src = &xs[pl * h * w..][..h * w];
            for y in 0..oh {
                for xo in 0..ow {
                    let (h0, h1, w0, w1, div) =
                        avg_window(y as i64, xo as i64, h as i64, w as i64, win, o);
                    let mut s = 0f64;
                    for iy in h0..h1 {
                        for ix in w0..w1 {
                            s += src[iy as usize * w + ix as usize];
                        }
                    }
                    dst[y * ow + xo] = s / div;
                }
            }
        });
    }
    write(out, &vals);
}

/// Average pooling backward.
pub fn avg_pool_backward(gi: &TView, go: &TView, win: Window, o: AvgOpts) {
    let gs = read::<f64>(go);
    let (planes, h, w) = hw(gi);
    let (_, oh, ow) = hw(go);
    let mut out = vec![0f64; planes * h * w];
    if h * w > 0 {
        crate::par::chunks_each(&mut out, h * w, planes * h * w * 4, |pl, dst| {
            for y in 0..oh {
                for xo in 0..ow {
                    let (h0, h1, w0, w1, div) =
                        avg_window(y as i64, xo as i64, h as i64, w as i64, win, o);
                    let g = gs[pl * oh * ow + y * ow + xo] / div;
                    for iy in h0..h1 {
                        for ix in w0..w1 {
                            dst[iy as usize * w + ix as usize] += g;
                        }
                    }
                }
            }
        });
    }
    write(gi, &out);
}

fn adaptive_range(i: usize, out: usize, len: usize) -> (usize, usize) {
    let start = (i * len) / out;
    let end = ((i + 1) * len).div_ceil(out);
    (start, end)
}

/// Adaptive average pooling to `out`'s last two sizes.
pub fn adaptive_avg_pool(out: &TView, x: &TView) {
    let xs = read::<f64>(x);
    let (planes, h, w) = hw(x);
    let (_, oh, ow) = hw(out);
    let mut vals = vec![0f64; planes * oh * ow];
    if oh * ow > 0 {
        crate::par::chunks_each(&mut vals, oh * ow, xs.len() * 4, |pl, dst| {
            let src = &xs[pl * h * w..][..h * w];
            for y in 0..oh {
                let (h0, h1) = adaptive_range(y, oh, h);
                for xo in 0..ow {
                    let (w0, w1) = adaptive_range(xo, ow, w);
                    let mut s = 0f64;
                    for iy in h0..h1 {
                        s += src[iy * w + w0..iy * w + w1].iter().sum::<f64>();
                    }
                    dst[y * ow + xo] = s / ((h1 - h0) * (w1 - w0)).max(1) as f64;
                }
            }
        });
    }
    write(out, &vals);
}

/// Adaptive average pooling backward.
pub fn adaptive_avg_pool_backward(gi: &TView, go: &TView) {
    let gs = read::<f64>(go);
    let (planes, h, w) = hw(gi);
    let (_, oh, ow) = hw(go);
    let mut out = vec![0f64; planes * h * w];
    if h * w > 0 {
        crate::par::chunks_each(&mut out, h * w, planes * h * w * 4, |pl, dst| {
            for y in 0..oh {
                let (h0, h1) = adaptive_range(y, oh, h);
                for xo in 0..ow {
                    let (w0, w1) = adaptive_range(xo, ow, w);
                    let g = gs[pl * oh * ow + y * ow + xo] / ((h1 - h0) * (w1 - w0)).max(1) as f64;
                    for iy in h0..h1 {
                        for v in &mut dst[iy * w + w0..iy * w + w1] {
                            *v += g;
                        }
                    }
                }
            }
        });
    }
    write(gi, &out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::dtype;
    use crate::view::testutil::*;

    const W2: Window = Window {
        k: (2, 2),
        s: (2, 2),
        p: (0, 0),
        d: (1, 1),
    };

    #[test]
    fn max_pool_indices_and_backward() {
        let mut x: Vec<f32> = vec![
            1.0, 5.0, 2.0, 0.0, 3.0, 4.0, 9.0, 1.0, 0.0, 0.0, 7.0, 8.0, 6.0, 0.0, 0.0, 8.5,
        ];
        let xv = f32v(&mut x, &[1, 1, 4, 4]);
        let (mut o, mut i) = (vec![0f32; 4], vec![0i64; 4]);
        let (ov, iv) = (
            f32v(&mut o, &[1, 1, 2, 2]),
            view_of(&mut i, dtype::I64, &[1, 1, 2, 2], &[4, 4, 2, 1]),
        );
        max_pool(&ov, Some(&iv), &xv, W2);
        assert_eq!(o, vec![5.0, 9.0, 6.0, 8.5]);
        assert_eq!(i, vec![1, 6, 12, 15]);
        let mut g = vec![1.0f32, 2.0, 3.0, 4.0];
        let gv = f32v(&mut g, &[1, 1, 2, 2]);
        let mut gi = vec![9f32; 16];
        let giv = f32v(&mut gi, &[1, 1, 4, 4]);
        max_pool_backward(&giv, &gv, &iv);
        assert_eq!(gi.iter().sum::<f32>(), 10.0);
        assert_eq!((gi[1], gi[6], gi[12], gi[15]), (1.0, 2.0, 3.0, 4.0));
        assert_eq!(pool_out_len(5, 2, 2, 0, 1, true), 3);
        assert_eq!(pool_out_len(5, 2, 2, 0, 1, false), 2);
    }

    #[test]
    fn avg_and_adaptive() {
        let mut x: Vec<f32> = (0..9).map(|v| v as f32).collect();
        let xv = f32v(&mut x, &[1, 3, 3]);
        // kernel 2 stride 1 pad 1, without counting padding
        let win = Window {
            k: (2, 2),
            s: (2, 2),
            p: (1, 1),
            d: (1, 1),
        };
        let mut o = vec![0f32; 4];
        let ov = f32v(&mut o, &[1, 2, 2]);
        avg_pool(
            &ov,
            &xv,
            win,
            AvgOpts {
                count_include_pad: false,
                divisor: None,
            },
        );
        assert_eq!(o, vec![0.0, 1.5, 4.5, 6.0]);
        avg_pool(
            &ov,
            &xv,
            win,
            AvgOpts {
                count_include_pad: true,
                divisor: None,
            },
        );
        assert_eq!(o, vec![0.0, 0.75, 2.25, 6.0]);
        let mut g = vec![4.0f32; 4];
        let gv = f32v(&mut g, &[1, 2, 2]);
        let mut gi = vec![0f32; 9];
        let giv = f32v(&mut gi, &[1, 3, 3]);
        avg_pool_backward(
            &giv,
            &gv,
            win,
            AvgOpts {
                count_include_pad: true,
                divisor: None,
            },
        );
        // every input lies in exactly one window, each of divisor 4
        assert_eq!(gi, vec![1.0; 9]);
        let mut a = vec![0f32; 1];
        let av = f32v(&mut a, &[1, 1, 1]);
        adaptive_avg_pool(&av, &xv);
        assert_eq!(a, vec![4.0]);
        let mut a2 = vec![0f32; 4];
        let a2v = f32v(&mut a2, &[1, 2, 2]);
        adaptive_avg_pool(&a2v, &xv);
        assert_eq!(a2, vec![2.0, 3.0, 5.0, 6.0]);
        adaptive_avg_pool_backward(&giv, &a2v);
        assert_eq!(gi[4], (2.0 + 3.0 + 5.0 + 6.0) / 4.0);
    }
}
