//! The cost of one small op through the library: `diopiMulScalar` on
//! 1024 floats queued on a stream, per call when many are queued and
//! per call with a synchronize after each, beside the same loop in plain
//! Rust. `cargo run --release -p dipu-diopi-host --example overhead`.

use dipu_diopi::{
    Context, ContextHandle, DiopiError, DiopiScalar, Dtype, OwnedTensor, TensorHandle,
};
use std::time::Instant;

type MulScalarFn = unsafe extern "C" fn(
    ContextHandle,
    TensorHandle,
    *const dipu_diopi::TensorDesc,
    *const DiopiScalar,
) -> DiopiError;

fn main() {
    dipu_diopi::keep_exports();
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = [dir.to_path_buf(), dir.join("deps")]
        .into_iter()
        .map(|d| d.join("libdiopi_impl_host.so"))
        .find(|p| p.exists())
        .expect("build the cdylib first: cargo build --release -p dipu-diopi-host");
    let lib = dipu_diopi::open(&path).unwrap();
    // SAFETY: the C signature of diopiMulScalar.
    let mul: MulScalarFn = unsafe { lib.function("diopiMulScalar") }.unwrap();
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let n = 1024usize;
    let (a, o) = (
        rt.allocate(n * 4, stream).unwrap(),
        rt.allocate(n * 4, stream).unwrap(),
    );
    let ta = OwnedTensor::new(Dtype::FLOAT32, 0, a.as_ptr(), n * 4, 0, &[n as i64], None).unwrap();
    let to = OwnedTensor::new(Dtype::FLOAT32, 0, o.as_ptr(), n * 4, 0, &[n as i64], None).unwrap();
    let two = DiopiScalar::float(2.0);
    let call = || {
        // SAFETY: live descriptors and context.
        let r = unsafe { mul(ctx.handle(), to.handle(), ta.const_handle(), &two) };
        assert!(r.is_success());
    };
    let iters = 20_000;
    for _ in 0..1000 {
        call();
    }
    stream.synchronize().unwrap();
    let t = Instant::now();
    for _ in 0..iters {
        call();
    }
    let enqueue = t.elapsed().as_secs_f64() / iters as f64 * 1e6;
    stream.synchronize().unwrap();
    let queued = t.elapsed().as_secs_f64() / iters as f64 * 1e6;
    let t = Instant::now();
    for _ in 0..iters {
        call();
        stream.synchronize().unwrap();
    }
    let synced = t.elapsed().as_secs_f64() / iters as f64 * 1e6;
    let mut x = vec![1.0f32; n];
    let mut y = vec![0.0f32; n];
    let t = Instant::now();
    for _ in 0..iters {
        for (d, s) in y.iter_mut().zip(&x) {
            *d = s * 2.0;
        }
        std::hint::black_box(&mut y);
        std::hint::black_box(&mut x);
    }
    let plain = t.elapsed().as_secs_f64() / iters as f64 * 1e6;
    println!("MulScalar 1024 f32: enqueue {enqueue:.2} us/call, queued throughput {queued:.2} us/call, call+synchronize {synced:.2} us/call; plain loop {plain:.3} us");
    drop((ta, to));
    ctx.destroy().unwrap();
}
