//! libdiopi_impl_host.so opened through dipu-rs's DIOPI runtime: ops
//! return before their kernels run, run in stream order after the copies
//! they depend on, report bad input, and draw repeatable random numbers.

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};

use dipu_diopi::{
    Context, ContextHandle, DiopiError, DiopiScalar, DiopiSize, Dtype, GeneratorHandle,
    OwnedTensor, TensorHandle,
};
use dipu_runtime::{CopyKind, DeviceBuffer, Stream};

type T = TensorHandle;
type C = *const dipu_diopi::TensorDesc;
type MulScalarFn = unsafe extern "C" fn(ContextHandle, T, C, *const DiopiScalar) -> DiopiError;
type AddFn = unsafe extern "C" fn(ContextHandle, T, C, C, *const DiopiScalar) -> DiopiError;
type LinearFn = unsafe extern "C" fn(ContextHandle, T, C, C, C) -> DiopiError;
type ReluFn = unsafe extern "C" fn(ContextHandle, T, C) -> DiopiError;
type SumFn = unsafe extern "C" fn(ContextHandle, T, C, DiopiSize) -> DiopiError;
type UniformFn = unsafe extern "C" fn(ContextHandle, T, f64, f64, GeneratorHandle) -> DiopiError;
type RmsNormFn = unsafe extern "C" fn(ContextHandle, T, T, C, DiopiSize, C, C, f64) -> DiopiError;
type RotaryFn = unsafe extern "C" fn(ContextHandle, T, C, C, C, bool, bool) -> DiopiError;
type MaskedSoftmaxFn = unsafe extern "C" fn(ContextHandle, T, C, C, f64, bool) -> DiopiError;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The library cargo built for this package (target/<profile>/ or its deps/).
fn library() -> Arc<dipu_diopi::KernelLibrary> {
    dipu_diopi::keep_exports();
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let path = [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .map(|d: PathBuf| d.join("libdiopi_impl_host.so"))
        .find(|p| p.exists())
        .expect("libdiopi_impl_host.so next to the test executable");
    dipu_diopi::open(&path).expect("open libdiopi_impl_host.so")
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read_f32(b: &DeviceBuffer, n: usize) -> Vec<f32> {
    let mut out = vec![0u8; n * 4];
    b.copy_to_host(&mut out, None).unwrap();
    out.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn desc(b: &DeviceBuffer, bytes: usize, shape: &[i64]) -> OwnedTensor {
    OwnedTensor::new(Dtype::FLOAT32, 0, b.as_ptr(), bytes, 0, shape, None).unwrap()
}

/// Blocks `stream` until the returned sender is dropped (as a failed test
/// drops it too).
fn gate(stream: Stream) -> mpsc::Sender<()> {
    let (open, wait) = mpsc::channel::<()>();
    dipu_diopi::launch_host_func(
        stream,
        Box::new(move || {
            let _ = wait.recv();
        }),
    )
    .unwrap();
    open
}

#[test]
fn identity_and_a_kernel_after_an_async_copy_sees_the_copy() {
    let _s = serial();
    let lib = library();
    assert_eq!(lib.vendor_name().as_deref(), Some("host"));
    assert!(lib.impl_version().unwrap().contains("host"));
    // SAFETY: the C signature of diopiMulScalar.
    let mul: MulScalarFn = unsafe { lib.function("diopiMulScalar") }.unwrap();
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let n = 1024usize;
    let (a, out) = (
        rt.allocate(n * 4, stream).unwrap(),
        rt.allocate(n * 4, stream).unwrap(),
    );
    a.copy_from_host(&f32_bytes(&vec![0.0; n]), None).unwrap();
    out.copy_from_host(&f32_bytes(&vec![-1.0; n]), None)
        .unwrap();
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let host_bytes = f32_bytes(&host);
    let open = gate(stream);
    // SAFETY: host_bytes outlives the synchronize below; `a` is live.
    unsafe {
        rt.memcpy_async(
            a.as_ptr(),
            host_bytes.as_ptr().cast::<c_void>(),
            n * 4,
            CopyKind::HostToDevice,
            stream,
        )
    }
    .unwrap();
    let (ta, tout) = (desc(&a, n * 4, &[n as i64]), desc(&out, n * 4, &[n as i64]));
    let two = DiopiScalar::float(2.0);
    // SAFETY: live descriptors and context.
    let r = unsafe { mul(ctx.handle(), tout.handle(), ta.const_handle(), &two) };
    assert!(r.is_success(), "{:?}", lib.last_error());
    // The op returned while the stream is blocked: nothing ran yet (the
    // pause gives a kernel run out of stream order the time to show; one
    // in order cannot run, however long it lasts).
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: `out` is host memory of the host vendor; the stream is parked, so no kernel writes it now.
    let first = unsafe { *(out.as_ptr() as *const f32).add(1) };
    assert_eq!(first, -1.0, "the kernel ran before the stream reached it");
    drop(open);
    stream.synchronize().unwrap();
    let got = read_f32(&out, n);
    assert!(
        got.iter().zip(&host).all(|(g, h)| *g == 2.0 * h),
        "the kernel did not see the copied data"
    );
    ctx.destroy().unwrap();
}

#[test]
fn a_linear_relu_sum_chain_runs_in_order() {
    let _s = serial();
    let lib = library();
    // SAFETY: the C signatures.
    let (linear, relu, sum): (LinearFn, ReluFn, SumFn) = unsafe {
        (
            lib.function("diopiLinear").unwrap(),
            lib.function("diopiRelu").unwrap(),
            lib.function("diopiSum").unwrap(),
        )
    };
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let (b, i, o) = (8usize, 16usize, 4usize);
    let x: Vec<f32> = (0..b * i)
        .map(|k| ((k * 7) % 11) as f32 / 5.0 - 1.0)
        .collect();
    let w: Vec<f32> = (0..o * i)
        .map(|k| ((k * 3) % 7) as f32 / 7.0 - 0.4)
        .collect();
    let bias: Vec<f32> = (0..o).map(|k| k as f32 * 0.1 - 0.2).collect();
    let buf = |v: &[f32]| {
        let d = rt.allocate(v.len() * 4, stream).unwrap();
        d.copy_from_host(&f32_bytes(v), None).unwrap();
        d
    };
    let (bx, bw, bb) = (buf(&x), buf(&w), buf(&bias));
    let (by, bs) = (
        rt.allocate(b * o * 4, stream).unwrap(),
        rt.allocate(o * 4, stream).unwrap(),
    );
    let (tx, tw, tb) = (
        desc(&bx, b * i * 4, &[b as i64, i as i64]),
        desc(&bw, o * i * 4, &[o as i64, i as i64]),
        desc(&bb, o * 4, &[o as i64]),
    );
    let (ty, ts) = (
        desc(&by, b * o * 4, &[b as i64, o as i64]),
        desc(&bs, o * 4, &[o as i64]),
    );
    let open = gate(stream);
    let dims = [0i64];
    // SAFETY: live descriptors and context; `dims` outlives the call.
    unsafe {
        assert!(linear(
            ctx.handle(),
            ty.handle(),
            tx.const_handle(),
            tw.const_handle(),
            tb.const_handle()
        )
        .is_success());
        assert!(relu(ctx.handle(), ty.handle(), ty.const_handle()).is_success());
        assert!(sum(
            ctx.handle(),
            ts.handle(),
            ty.const_handle(),
            DiopiSize::from_slice(&dims)
        )
        .is_success());
    }
    drop(open);
    stream.synchronize().unwrap();
    let got = read_f32(&bs, o);
    let mut want = vec![0f32; o];
    for r in 0..b {
        for c in 0..o {
            let v: f32 = (0..i).map(|k| x[r * i + k] * w[c * i + k]).sum::<f32>() + bias[c];
            want[c] += v.max(0.0);
        }
    }
    // A chain of an i-term product and a b-term sum (docs/tolerance.md).
    dipu_diopi::tolerance::assert_close(&got, &want, "float32", i + b, "linear, relu, sum");
    ctx.destroy().unwrap();
}

#[test]
fn bad_shapes_fail_with_a_message() {
    let _s = serial();
    let lib = library();
    // SAFETY: the C signature of diopiAdd.
    let add: AddFn = unsafe { lib.function("diopiAdd") }.unwrap();
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let a = rt.allocate(64, stream).unwrap();
    let (t4, t3) = (desc(&a, 64, &[4]), desc(&a, 64, &[3]));
    let one = DiopiScalar::int(1);
    // SAFETY: live descriptors and context.
    let r = unsafe {
        add(
            ctx.handle(),
            t4.handle(),
            t4.const_handle(),
            t3.const_handle(),
            &one,
        )
    };
    assert_eq!(r, DiopiError::ERROR_OCCURRED);
    let msg = lib.last_error().unwrap();
    assert!(
        msg.contains("diopiAdd") && msg.contains("broadcast"),
        "{msg}"
    );
    // A NULL scalar is an error too, not a crash.
    // SAFETY: as above.
    let r = unsafe {
        add(
            ctx.handle(),
            t4.handle(),
            t4.const_handle(),
            t4.const_handle(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, DiopiError::ERROR_OCCURRED);
    ctx.destroy().unwrap();
}

#[test]
fn llm_functions_reject_bad_shapes_and_dtypes() {
    let _s = serial();
    let lib = library();
    // SAFETY: the C signatures of functions_ext.h's functions.
    let (rms, rotary, softmax) = unsafe {
        (
            lib.function::<RmsNormFn>("diopiRMSNorm").unwrap(),
            lib.function::<RotaryFn>("diopiRotaryEmbedding").unwrap(),
            lib.function::<MaskedSoftmaxFn>("diopiScaledMaskedSoftmax")
                .unwrap(),
        )
    };
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let a = rt.allocate(64, stream).unwrap();
    let (x, x23, x1) = (
        desc(&a, 64, &[2, 4]),
        desc(&a, 64, &[2, 3]),
        desc(&a, 64, &[1]),
    );
    let null = std::ptr::null();
    let ns = [3i64];
    let expect = |r: DiopiError, code: DiopiError, words: &[&str]| {
        assert_eq!(r, code);
        let msg = lib.last_error().unwrap();
        assert!(words.iter().all(|w| msg.contains(w)), "{msg}");
    };
    // SAFETY: live descriptors and context; NULL where a tensor is optional.
    unsafe {
        let r = rms(
            ctx.handle(),
            x.handle(),
            std::ptr::null_mut(),
            x.const_handle(),
            DiopiSize::from_slice(&ns),
            null,
            null,
            1e-6,
        );
        expect(
            r,
            DiopiError::ERROR_OCCURRED,
            &["diopiRMSNorm", "normalized_shape"],
        );
        let r = rotary(
            ctx.handle(),
            x23.handle(),
            x23.const_handle(),
            x1.const_handle(),
            x1.const_handle(),
            false,
            false,
        );
        expect(r, DiopiError::ERROR_OCCURRED, &["even"]);
        let r = softmax(ctx.handle(), x.handle(), x.const_handle(), null, 1.0, false);
        expect(r, DiopiError::ERROR_OCCURRED, &["mask is required"]);
        let r = softmax(
            ctx.handle(),
            x.handle(),
            x.const_handle(),
            x.const_handle(),
            1.0,
            false,
        );
        expect(r, DiopiError::DTYPE_NOT_SUPPORTED, &["mask", "bool"]);
    }
    ctx.destroy().unwrap();
}

#[test]
fn uniform_repeats_under_the_same_seed_and_offset() {
    let _s = serial();
    let lib = library();
    // SAFETY: the C signature of diopiUniformInp.
    let uniform: UniformFn = unsafe { lib.function("diopiUniformInp") }.unwrap();
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let g = dipu_diopi::generator(0).unwrap();
    let n = 256usize;
    let a = rt.allocate(n * 4, stream).unwrap();
    let t = desc(&a, n * 4, &[n as i64]);
    let draw = || {
        // SAFETY: live descriptor, context and generator.
        assert!(unsafe { uniform(ctx.handle(), t.handle(), -2.0, 2.0, g) }.is_success());
        stream.synchronize().unwrap();
        read_f32(&a, n)
    };
    dipu_diopi::set_seed_and_offset(g, 1234, 0).unwrap();
    let first = draw();
    let (_, off) = dipu_diopi::seed_and_offset(g).unwrap();
    assert!(off > 0, "the op advances the generator's offset");
    let second = draw();
    assert_ne!(first, second);
    dipu_diopi::set_seed_and_offset(g, 1234, 0).unwrap();
    assert_eq!(draw(), first);
    assert!(first.iter().all(|v| (-2.0..2.0).contains(v)));
    ctx.destroy().unwrap();
}
