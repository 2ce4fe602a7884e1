//! 2-D convolution as im2col + GEMM, forward and backward, over NCHW
//! tensors of any strides (read into contiguous copies). The batch is
//! split across rayon workers.

use crate::matmul::{Gemm, Mat};
use crate::view::{read, with_out, TView};

/// Convolution geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geom {
    /// batch
    pub n: usize,
    /// input channels
    pub c: usize,
    /// input height
    pub h: usize,
    /// input width
    pub w: usize,
    /// output channels
    pub o: usize,
    /// kernel height
    pub kh: usize,
    /// kernel width
    pub kw: usize,
    /// output height
    pub oh: usize,
    /// output width
    pub ow: usize,
    /// stride (h, w)
    pub stride: (usize, usize),
    /// padding (h, w)
    pub pad: (usize, usize),
    /// dilation (h, w)
    pub dil: (usize, usize),
    /// groups
    pub groups: usize,
}

impl Geom {
    /// The output size along one axis.
    pub fn out_len(len: i64, k: i64, stride: i64, pad: i64, dil: i64) -> i64 {
        (len + 2 * pad - dil * (k - 1) - 1).div_euclid(stride) + 1
    }
    fn cg(&self) -> usize {
        self.c / self.groups
    }
    fn og(&self) -> usize {
        self.o / self.groups
    }
    fn krows(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    fn ohw(&self) -> usize {
        self.oh * self.ow
    }
}

/// cols[(c*kh + i)*kw + j][y*ow + x] = img[c][y*s - p + i*d][x*s - p + j*d] (0 outside).
fn im2col<C: Gemm>(g: &Geom, img: &[C], cols: &mut [C]) {
    let (ohw, h, w) = (g.ohw(), g.h as isize, g.w as isize);
    for c in 0..g.cg() {
        let plane = &img[c * g.h * g.w..(c + 1) * g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &mut cols[((c * g.kh + i) * g.kw + j) * ohw..][..ohw];
                for y in 0..g.oh {
                    let iy = (y * g.stride.0) as isize - g.pad.0 as isize + (i * g.dil.0) as isize;
                    let dst = &mut row[y * g.ow..(y + 1) * g.ow];
                    if iy < 0 || iy >= h {
                        dst.fill(C::default());
                        continue;
                    }
                    let src = &plane[iy as usize * g.w..][..g.w];
                    for (x, d) in dst.iter_mut().enumerate() {
                        let ix =
                            (x * g.stride.1) as isize - g.pad.1 as isize + (j * g.dil.1) as isize;
                        *d = if ix >= 0 && ix < w {
                            src[ix as usize]
                        } else {
                            C::default()
                        };
                    }
                }
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds cols back into img.
fn col2im<C: Gemm>(g: &Geom, cols: &[C], img: &mut [C]) {
    let (ohw, h, w) = (g.ohw(), g.h as isize, g.w as isize);
    for c in 0..g.cg() {
        let plane = &mut img[c * g.h * g.w..(c + 1) * g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &cols[((c * g.kh + i) * g.kw + j) * ohw..][..ohw];
                for y in 0..g.oh {
                    let iy = (y * g.stride.0) as isize - g.pad.0 as isize + (i * g.dil.0) as isize;
                    if iy < 0 || iy >= h {
                        continue;
                    }
                    let dst = &mut plane[iy as usize * g.w..][..g.w];
                    for x in 0..g.ow {
                        let ix =
                            (x * g.stride.1) as isize - g.pad.1 as isize + (j * g.dil.1) as isize;
                        if ix >= 0 && ix < w {
                            dst[ix as usize] = dst[ix as usize].add(row[y * g.ow + x]);
                        }
                    }
                }
            }
        }
    }
}

fn m<C>(p: *const C, rs: usize, cs: usize) -> Mat<C> {
    Mat {
        ptr: p,
        rs: rs as isize,
        cs: cs as isize,
    }
}

#[derive(Clone, Copy)]
struct SendPtr<C>(*mut C);
// SAFETY: each rayon task writes a disjoint sample of the buffer.
unsafe impl<C> Send for SendPtr<C> {}
// SAFETY: as above.
unsafe impl<C> Sync for SendPtr<C> {}

impl<C> SendPtr<C> {
    /// The pointer (a method, so closures capture the whole Send wrapper).
    fn get(self) -> *mut C {
        self.0
    }
}

fn forward_c<C: Gemm>(out: &TView, x: &TView, wt: &TView, bias: Option<&TView>, g: Geom) {
    let xs = read::<C>(x);
    let ws = read::<C>(wt);
    let bs = bias.map(|b| read::<C>(b).into_owned());
    let (cg, og, kr, ohw) = (g.cg(), g.og(), g.krows(), g.ohw());
    with_out::<C>(out, &[x, wt], |o| {
        let op = SendPtr(o.as_mut_ptr());
        let sample = |n: usize, cols: &mut Vec<C>| {
            for grp in 0..g.groups {
                let img = &xs[(n * g.c + grp * cg) * g.h * g.w..][..cg * g.h * g.w];
                let direct = g.kh == 1 && g.kw == 1 && g.stride == (1, 1) && g.pad == (0, 0);
                let colp = if direct {
                    img.as_ptr()
                } else {
                    cols.resize(kr * ohw, C::default());
                    im2col(&g, img, cols);
                    cols.as_ptr()
                };
                // SAFETY: out[n, grp*og.., :] is this task's block.
                unsafe {
                    let dst = op.get().add((n * g.o + grp * og) * ohw);
                    if let Some(b) = &bs {
                        for oc in 0..og {
                            std::slice::from_raw_parts_mut(dst.add(oc * ohw), ohw)
                                .fill(b[grp * og + oc]);
                        }
                    }
                    let beta = if bs.is_some() {
                        C::from_i64(1)
                    } else {
                        C::default()
                    };
                    crate::matmul::gemm_par(
                        og,
                        kr,
                        ohw,
                        C::from_i64(1),
                        m(ws[grp * og * kr..].as_ptr(), kr, 1),
                        m(colp, ohw, 1),
                        beta,
                        m(dst, ohw, 1),
                    );
                }
            }
        };
        par_samples(g.n, g.n * g.o * kr * ohw, sample);
    });
}

/// Runs `f(n, scratch)` for every sample, across rayon workers.
/// Below this many multiply-adds a convolution stays on the calling thread.
const PAR_MACS: usize = 1 << 18;

fn par_samples<C: Send>(n: usize, macs: usize, f: impl Fn(usize, &mut Vec<C>) + Sync) {
    let threads = rayon::current_num_threads().max(1);
    if n <= 1 || threads == 1 || macs < PAR_MACS {
        let mut s = Vec::new();
        (0..n).for_each(|i| f(i, &mut s));
        return;
    }
    let chunk = n.div_ceil(threads);
    rayon::scope(|sc| {
        for lo in (0..n).step_by(chunk) {
            let f = &f;
            sc.spawn(move |_| {
                let mut s = Vec::new();
                (lo..(lo + chunk).min(n)).for_each(|i| f(i, &mut s));
            });
        }
    });
}

/// `out = conv2d(x, w) + bias`, NCHW, f32 (f16/bf16 through f32) or f64.
pub fn forward(out: &TView, x: &TView, w: &TView, bias: Option<&TView>, g: Geom) {
    if out.dtype == crate::types::dtype::F64 {
        forward_c::<f64>(out, x, w, bias, g)
    } else {
        forward_c::<f32>(out, x, w, bias, g)
    }
}

fn backward_c<C: Gemm>(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    go: &TView,
    x: &TView,
    wt: &TView,
    g: Geom,
) {
    let gs = read::<C>(go);
    let (cg, og, kr, ohw) = (g.cg(), g.og(), g.krows(), g.ohw());
    if let Some(gb) = gb {
        let mut acc = vec![0f64; g.o];
        for n in 0..g.n {
            for (oc, a) in acc.iter_mut().enumerate() {
                *a += gs[(n * g.o + oc) * ohw..][..ohw]
                    .iter()
                    .map(|v| v.to_f64())
                    .sum::<f64>();
            }
        }
        crate::view::write(gb, &acc);
    }
    let one = C::from_i64(1);
    if let Some(gw) = gw {
        let xs = read::<C>(x);
        let macs = g.n * g.o * kr * ohw;
        let threads = if macs < PAR_MACS {
            1
        } else {
            rayon::current_num_threads().max(1)
        };
        let chunk = g.n.div_ceil(threads.min(g.n.max(1))).max(1);
        let parts: Vec<Vec<C>> = {
            let work = if threads == 1 { 0 } else { usize::MAX };
            crate::par::map_range(g.n.div_ceil(chunk), work, |part| {
                let lo = part * chunk;
                let mut acc = vec![C::default(); g.o * kr];
                let mut cols = vec![C::default(); kr * ohw];
                for n in lo..(lo + chunk).min(g.n) {
                    for grp in 0..g.groups {
                        let img = &xs[(n * g.c + grp * cg) * g.h * g.w..][..cg * g.h * g.w];
                        im2col(&g, img, &mut cols);
                        let gop = gs[(n * g.o + grp * og) * ohw..].as_ptr();
                        // SAFETY: acc rows of this group; cols^T via strides.
                        unsafe {
                            crate::matmul::gemm_par(
                                og,
                                ohw,
                                kr,
                                one,
                                m(gop, ohw, 1),
                                m(cols.as_ptr(), 1, ohw),
                                one,
                                m(acc[grp * og * kr..].as_mut_ptr(), kr, 1),
                            );
                        }
                    }
                }
                acc
            })
        };
        let mut total = vec![C::default(); g.o * kr];
        for p in parts {
            for (t, v) in total.iter_mut().zip(p) {
                *t = t.add(v);
            }
        }
        crate::view::write(gw, &total);
    }
    if let Some(gi) = gi {
        let ws = read::<C>(wt);
        let mut img = vec![C::default(); g.n * g.c * g.h * g.w];
        let ip = SendPtr(img.as_mut_ptr());
        par_samples(g.n, g.n * g.o * kr * ohw, |n, cols: &mut Vec<C>| {
            cols.resize(kr * ohw, C::default());
            for grp in 0..g.groups {
                let gop = gs[(n * g.o + grp * og) * ohw..].as_ptr();
                // SAFETY: cols = W_g^T @ go_g; then this sample's block of img.
                unsafe {
                    crate::matmul::gemm_par(
                        kr,
                        og,
                        ohw,
                        one,
                        m(ws[grp * og * kr..].as_ptr(), 1, kr),
                        m(gop, ohw, 1),
                        C::default(),
                        m(cols.as_mut_ptr(), ohw, 1),
                    );
                    let dst = std::slice::from_raw_parts_mut(
                        ip.get().add((n * g.c + grp * cg) * g.h * g.w),
                        cg * g.h * g.w,
                    );
                    col2im(&g, cols, dst);
                }
            }
        });
        crate::view::write(gi, &img);
    }
}

/// Gradients of [`forward`]; each output optional.
pub fn backward(
    gi: Option<&TView>,
    gw: Option<&TView>,
    gb: Option<&TView>,
    go: &TView,
    x: &TView,
    w: &TView,
    g: Geom,
) {
    if x.dtype == crate::types::dtype::F64 {
        backward_c::<f64>(gi, gw, gb, go, x, w, g)
    } else {
        backward_c::<f32>(gi, gw, gb, go, x, w, g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::testutil::*;

    fn naive(x: &[f32], w: &[f32], b: &[f32], g: &Geom) -> Vec<f32> {
        let mut o = vec![0f32; g.n * g.o * g.oh * g.ow];
        let (cg, og) = (g.c / g.groups, g.o / g.groups);
        for n in 0..g.n {
            for oc in 0..g.o {
                let grp = oc / og;
                for y in 0..g.oh {
                    for xx in 0..g.ow {
                        let mut s = b[oc];
                        for c in 0..cg {
                            for i in 0..g.kh {
                                for j in 0..g.kw {
                                    let iy =
                                        (y * g.stride.0 + i * g.dil.0) as isize - g.pad.0 as isize;
                                    let ix =
                                        (xx * g.stride.1 + j * g.dil.1) as isize - g.pad.1 as isize;
                                    if iy >= 0
                                        && ix >= 0
                                        && (iy as usize) < g.h
                                        && (ix as usize) < g.w
                                    {
                                        s += x[((n * g.c + grp * cg + c) * g.h + iy as usize)
                                            * g.w
                                            + ix as usize]
                                            * w[((oc * cg + c) * g.kh + i) * g.kw + j];
                                    }
                                }
                            }
                        }
                        o[((n * g.o + oc) * g.oh + y) * g.ow + xx] = s;
                    }
                }
            }
        }
        o
    }

    #[allow(clippy::too_many_arguments)]
    fn geom(
        n: usize,
        c: usize,
        h: usize,
        w: usize,
        o: usize,
        k: usize,
        s: usize,
        p: usize,
        d: usize,
        groups: usize,
    ) -> Geom {
        let oh = Geom::out_len(h as i64, k as i64, s as i64, p as i64, d as i64) as usize;
        let ow = Geom::out_len(w as i64, k as i64, s as i64, p as i64, d as i64) as usize;
        Geom {
            n,
            c,
            h,
            w,
            o,
            kh: k,
            kw: k,
            oh,
            ow,
            stride: (s, s),
            pad: (p, p),
            dil: (d, d),
            groups,
        }
    }

    #[test]
    fn forward_and_backward_match_naive() {
        for g in [
            geom(3, 4, 7, 6, 6, 3, 2, 1, 1, 2),
            geom(2, 3, 5, 5, 4, 1, 1, 0, 1, 1),
            geom(2, 2, 6, 6, 2, 2, 1, 2, 2, 1),
            // large enough for the parallel paths
            geom(4, 8, 16, 16, 16, 3, 1, 1, 1, 1),
        ] {
            let x: Vec<f32> = (0..g.n * g.c * g.h * g.w)
                .map(|i| ((i * 37) % 17) as f32 / 8.0 - 1.0)
                .collect();
            let w: Vec<f32> = (0..g.o * g.c / g.groups * g.kh * g.kw)
                .map(|i| ((i * 11) % 7) as f32 / 4.0 - 0.7)
                .collect();
            let b: Vec<f32> = (0..g.o).map(|i| i as f32 * 0.1).collect();
            let (mut xm, mut wm, mut bm) = (x.clone(), w.clone(), b.clone());
            let xv = f32v(&mut xm, &[g.n as i64, g.c as i64, g.h as i64, g.w as i64]);
            let wv = f32v(
                &mut wm,
                &[
                    g.o as i64,
                    (g.c / g.groups) as i64,
                    g.kh as i64,
                    g.kw as i64,
                ],
            );
            let bv = f32v(&mut bm, &[g.o as i64]);
            let oshape = [g.n as i64, g.o as i64, g.oh as i64, g.ow as i64];
            let mut o = vec![0f32; g.n * g.o * g.ohw()];
            let ov = f32v(&mut o, &oshape);
            forward(&ov, &xv, &wv, Some(&bv), g);
            close(&o, &naive(&x, &w, &b, &g), g.c / g.groups * g.kh * g.kw + 1);
            // backward against finite differences of sum(go * conv(x, w))
            let gov: Vec<f32> = (0..o.len()).map(|i| ((i * 3) % 5) as f32 - 2.0).collect();
            let mut gm = gov.clone();
            let gv = f32v(&mut gm, &oshape);
            let (mut gi, mut gw, mut gb) =
                (vec![0f32; x.len()], vec![0f32; w.len()], vec![0f32; g.o]);
            let (giv, gwv, gbv) = (
                f32v(&mut gi, xv.shape()),
                f32v(&mut gw, wv.shape()),
                f32v(&mut gb, &[g.o as i64]),
            );
            backward(Some(&giv), Some(&gwv), Some(&gbv), &gv, &xv, &wv, g);
            let zero = vec![0f32; g.o];
            let dot = |xx: &[f32], ww: &[f32]| -> f32 {
                naive(xx, ww, &zero, &g)
                    .iter()
                    .zip(&gov)
                    .map(|(a, b)| a * b)
                    .sum()
            };
            // linear in x and w, so the difference quotient is exact up to rounding
            for idx in [0, x.len() / 2, x.len() - 1] {
                let mut xp = x.clone();
                xp[idx] += 1.0;
                assert!(
                    (dot(&xp, &w) - dot(&x, &w) - gi[idx]).abs() < 1e-3,
                    "gi[{idx}]"
                );
            }
            for idx in [0, w.len() / 3, w.len() - 1] {
                let mut wp = w.clone();
                wp[idx] += 1.0;
                assert!(
                    (dot(&x, &wp) - dot(&x, &w) - gw[idx]).abs() < 1e-3,
                    "gw[{idx}]"
                );
            }
            let sums: Vec<f32> = (0..g.o)
                .map(|oc| {
                    (0..g.n)
                        .map(|n| {
                            gov[(n * g.o + oc) * g.ohw()..][..g.ohw()]
                                .iter()
                                .sum::<f32>()
                        })
                        .sum()
                })
                .collect();
            // Sums of small integers: exact in any order.
            assert_eq!(gb, sums);
        }
    }
}
