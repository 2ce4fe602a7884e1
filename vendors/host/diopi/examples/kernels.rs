//! Times the big kernels directly (no runtime): GEMM shapes of a
//! transformer block, a conv2d forward/backward of a small CNN, softmax
//! and layer norm. `cargo run --release -p dipu-diopi-host --example kernels`.

use diopi_impl_host::view::TView;
use diopi_impl_host::{conv, matmul, norm, reduce, types::dtype};
use std::time::Instant;

fn v(buf: &mut [f32], shape: &[i64]) -> TView {
    TView::contiguous(buf.as_mut_ptr() as *mut u8, dtype::F32, shape)
}

fn time(name: &str, mut f: impl FnMut()) {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..10 {
            f();
        }
        best = best.min(t.elapsed().as_secs_f64() / 10.0);
    }
    println!("{name:<40} {:10.1} us", best * 1e6);
}

fn main() {
    // examples export their symbols (-rdynamic, for `overhead`): the library's
    // entry points then need the diopirt functions dipu-diopi defines
    dipu_diopi::keep_exports();
    let (m, k, n) = (1024usize, 256usize, 768usize);
    let mut a = vec![0.5f32; m * k];
    let mut w = vec![0.25f32; n * k];
    let mut o = vec![0f32; m * n];
    let (av, wv, ov) = (
        v(&mut a, &[m as i64, k as i64]),
        v(&mut w, &[n as i64, k as i64]),
        v(&mut o, &[m as i64, n as i64]),
    );
    time("linear 1024x256 @ (768x256)^T", || {
        matmul::linear(&ov, &av, &wv, None)
    });
    let mut q = vec![0.1f32; 32 * 128 * 64];
    let mut s = vec![0f32; 32 * 128 * 128];
    let (qv, sv) = (v(&mut q, &[32, 128, 64]), v(&mut s, &[32, 128, 128]));
    time("bmm 32x128x64 @ 32x64x128", || {
        matmul::bgemm(&sv, &qv, &qv.transposed(1, 2), None, 1.0, 0.0)
    });
    let mut e = vec![0.5f32; 32 * 128 * 128];
    time("exp_f32 loop 524288", || {
        e.iter_mut()
            .for_each(|v| *v = diopi_impl_host::elementwise::exp_f32(*v * 0.5))
    });
    let mut s2 = vec![0f32; 32 * 128 * 128];
    let s2v = v(&mut s2, &[32, 128, 128]);
    time("softmax 32x128x128 dim -1 (out of place)", || {
        reduce::softmax(&s2v, &sv, 2, false)
    });
    time("softmax 32x128x128 dim -1", || {
        reduce::softmax(&sv, &sv, 2, false)
    });
    let mut x = vec![0.3f32; 1024 * 256];
    let xv = v(&mut x, &[1024, 256]);
    let mut y = vec![0f32; 1024 * 256];
    let yv = v(&mut y, &[1024, 256]);
    time("layer_norm 1024x256", || {
        norm::layer_norm(&yv, None, None, &xv, None, None, 256, 1e-5)
    });
    // the CNN of tests/test_training.py: conv 8->16 3x3 pad 1 on 16x8x8x8
    let g = conv::Geom {
        n: 16,
        c: 8,
        h: 8,
        w: 8,
        o: 16,
        kh: 3,
        kw: 3,
        oh: 8,
        ow: 8,
        stride: (1, 1),
        pad: (1, 1),
        dil: (1, 1),
        groups: 1,
    };
    let mut ci = vec![0.2f32; 16 * 8 * 64];
    let mut cw = vec![0.1f32; 16 * 8 * 9];
    let mut co = vec![0f32; 16 * 16 * 64];
    let (civ, cwv, cov) = (
        v(&mut ci, &[16, 8, 8, 8]),
        v(&mut cw, &[16, 8, 3, 3]),
        v(&mut co, &[16, 16, 8, 8]),
    );
    time("conv 16x8x8x8 -> 16 3x3 fwd", || {
        conv::forward(&cov, &civ, &cwv, None, g)
    });
    let mut gi = vec![0f32; 16 * 8 * 64];
    let mut gw = vec![0f32; 16 * 8 * 9];
    let (giv, gwv) = (v(&mut gi, &[16, 8, 8, 8]), v(&mut gw, &[16, 8, 3, 3]));
    time("conv 16x8x8x8 -> 16 3x3 bwd", || {
        conv::backward(Some(&giv), Some(&gwv), None, &cov, &civ, &cwv, g)
    });
    let g2 = conv::Geom {
        n: 64,
        c: 32,
        h: 32,
        w: 32,
        o: 64,
        kh: 3,
        kw: 3,
        oh: 32,
        ow: 32,
        stride: (1, 1),
        pad: (1, 1),
        dil: (1, 1),
        groups: 1,
    };
    let mut bi = vec![0.2f32; 64 * 32 * 1024];
    let mut bw = vec![0.1f32; 64 * 32 * 9];
    let mut bo = vec![0f32; 64 * 64 * 1024];
    let (biv, bwv, bov) = (
        v(&mut bi, &[64, 32, 32, 32]),
        v(&mut bw, &[64, 32, 3, 3]),
        v(&mut bo, &[64, 64, 32, 32]),
    );
    time("conv 64x32x32x32 -> 64 3x3 fwd", || {
        conv::forward(&bov, &biv, &bwv, None, g2)
    });
    let mut bgi = vec![0f32; 64 * 32 * 1024];
    let mut bgw = vec![0f32; 64 * 32 * 9];
    let (bgiv, bgwv) = (v(&mut bgi, &[64, 32, 32, 32]), v(&mut bgw, &[64, 32, 3, 3]));
    time("conv 64x32x32x32 -> 64 3x3 bwd", || {
        conv::backward(Some(&bgiv), Some(&bgwv), None, &bov, &biv, &bwv, g2)
    });
}
