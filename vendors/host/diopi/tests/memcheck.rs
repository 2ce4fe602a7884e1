//! With the memory checker's guards and poison on (its own process: the
//! settings are read when the runtime starts), a kernel still queued when
//! its input is freed reads the data, not the poison (the free is stream
//! ordered after it), and no kernel writes outside its tensors.

use std::ffi::c_void;

use dipu_diopi::{
    Context, ContextHandle, DiopiError, DiopiScalar, Dtype, OwnedTensor, TensorHandle,
};

type T = TensorHandle;
type C = *const dipu_diopi::TensorDesc;
type MulScalarFn = unsafe extern "C" fn(ContextHandle, T, C, *const DiopiScalar) -> DiopiError;
type LinearFn = unsafe extern "C" fn(ContextHandle, T, C, C, C) -> DiopiError;

#[test]
fn freed_inputs_stay_valid_for_queued_kernels_and_guards_hold() {
    std::env::set_var("DIPU_MEM_CHECK", "1");
    std::env::set_var("DIPU_MEM_CHECK_POISON", "1");
    dipu_diopi::keep_exports();
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let path = [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .map(|d| d.join("libdiopi_impl_host.so"))
        .find(|p| p.exists())
        .expect("libdiopi_impl_host.so next to the test executable");
    let lib = dipu_diopi::open(&path).unwrap();
    // SAFETY: the C signatures.
    let (mul, linear): (MulScalarFn, LinearFn) = unsafe {
        (
            lib.function("diopiMulScalar").unwrap(),
            lib.function("diopiLinear").unwrap(),
        )
    };
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let n = 4096usize;
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let bytes: Vec<u8> = host.iter().flat_map(|v| v.to_le_bytes()).collect();
    let a = rt.allocate(n * 4, stream).unwrap();
    a.copy_from_host(&bytes, None).unwrap();
    let out = rt.allocate(n * 4, stream).unwrap();
    let desc = |p: *mut c_void, shape: &[i64]| {
        OwnedTensor::new(
            Dtype::FLOAT32,
            0,
            p,
            (shape.iter().product::<i64>() * 4) as usize,
            0,
            shape,
            None,
        )
        .unwrap()
    };
    let (ta, tout) = (desc(a.as_ptr(), &[64, 64]), desc(out.as_ptr(), &[64, 64]));
    let y = rt.allocate(64 * 8 * 4, stream).unwrap();
    let w = rt.allocate(8 * 64 * 4, stream).unwrap();
    w.copy_from_host(&vec![0u8; 8 * 64 * 4], None).unwrap();
    // The stream is held until `open` is dropped (as a failed test drops it).
    let (open, wait) = std::sync::mpsc::channel::<()>();
    dipu_diopi::launch_host_func(
        stream,
        Box::new(move || {
            let _ = wait.recv();
        }),
    )
    .unwrap();
    let three = DiopiScalar::float(3.0);
    // SAFETY: live descriptors and context.
    assert!(unsafe { mul(ctx.handle(), tout.handle(), ta.const_handle(), &three) }.is_success());
    // a linear layer into an exactly sized output: guards catch any overrun
    let (ty, tw) = (desc(y.as_ptr(), &[64, 8]), desc(w.as_ptr(), &[8, 64]));
    // SAFETY: as above.
    assert!(unsafe {
        linear(
            ctx.handle(),
            ty.handle(),
            ta.const_handle(),
            tw.const_handle(),
            std::ptr::null(),
        )
    }
    .is_success());
    drop(ta);
    drop(a); // freed while both kernels still wait on the stream
    drop(open);
    stream.synchronize().unwrap();
    let mut got = vec![0u8; n * 4];
    out.copy_to_host(&mut got, None).unwrap();
    for (i, c) in got.chunks(4).enumerate() {
        let v = f32::from_le_bytes(c.try_into().unwrap());
        assert_eq!(
            v,
            3.0 * host[i],
            "element {i}: the kernel read freed (poisoned) memory"
        );
    }
    drop((tout, ty, tw));
    drop((out, y, w));
    ctx.destroy().unwrap();
    let report = rt.release_and_report();
    let mc = report.memcheck.expect("the memory checker is on");
    assert!(mc.violations.is_empty(), "{:?}", mc.violations);
}
