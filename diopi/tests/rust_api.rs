//! The Rust API `dipu diopi-test` uses, on the C kernel library of the
//! C ABI tests (`ffi/tests/c/diopi_mini.c`): open by path, typed lookups,
//! a context on a stream, descriptors of runtime buffers, asynchronous
//! kernels read back after a synchronize, RequireTensor results and their
//! memory returned at context drop, generators.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dipu_diopi::{
    Context, ContextHandle, DiopiError, DiopiScalar, Dtype, OwnedTensor, TensorHandle, TensorInfo,
};

type AddFn = unsafe extern "C" fn(
    ContextHandle,
    TensorHandle,
    *const dipu_diopi::TensorDesc,
    *const dipu_diopi::TensorDesc,
    *const DiopiScalar,
) -> DiopiError;
type RequireFn = unsafe extern "C" fn(ContextHandle, i64, *mut TensorHandle) -> DiopiError;

/// The library is process-wide: one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn mini() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diopi-rust-api");
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libdiopi_mini.so");
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new("cc")
            .args(["-std=c11", "-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg("-I")
            .arg(root.join("include"))
            .arg(root.join("ffi/tests/c/diopi_mini.c"))
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lib
    })
}

#[test]
fn add_runs_on_the_stream_and_reads_back() {
    let _s = serial();
    let lib = dipu_diopi::open(mini()).expect("open the mini library");
    assert_eq!(lib.vendor_name().as_deref(), Some("mini"));
    // SAFETY: diopiAdd's C signature.
    let add: AddFn = unsafe { lib.function("diopiAdd") }.expect("diopiAdd");
    // SAFETY: any type: the symbol is absent.
    assert!(unsafe { lib.function::<AddFn>("diopiMul") }.is_none());

    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().new_stream(0, 0).unwrap();
    let ctx = Context::new(stream).unwrap();
    let n = 64usize;
    let bytes = n * 4;
    let (a, b, out) = (
        rt.allocate(bytes, stream).unwrap(),
        rt.allocate(bytes, stream).unwrap(),
        rt.allocate(bytes, stream).unwrap(),
    );
    let ha: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let hb: Vec<u8> = (0..n)
        .flat_map(|i| (1.0f32 + i as f32).to_le_bytes())
        .collect();
    a.copy_from_host(&ha, None).unwrap();
    b.copy_from_host(&hb, None).unwrap();
    let desc = |buf: &dipu_runtime::DeviceBuffer| {
        OwnedTensor::new(Dtype::FLOAT32, 0, buf.as_ptr(), bytes, 0, &[8, 8], None).unwrap()
    };
    let (ta, tb, tout) = (desc(&a), desc(&b), desc(&out));

    // Held behind a host function until `gate` is dropped (as a failed test
    // drops it too), the kernel cannot have run on return.
    let (gate, wait) = std::sync::mpsc::channel::<()>();
    dipu_diopi::launch_host_func(
        stream,
        Box::new(move || {
            let _ = wait.recv();
        }),
    )
    .unwrap();
    let counter = lib
        .symbol("diopi_mini_kernels_run")
        .unwrap()
        .cast::<AtomicI32>();
    // SAFETY: the library's `atomic_int`, same layout as AtomicI32.
    let counter = unsafe { &*counter };
    let before = counter.load(Ordering::SeqCst);
    let alpha = DiopiScalar::float(0.5);
    // SAFETY: handles of live descriptors and context.
    let r = unsafe {
        add(
            ctx.handle(),
            tout.handle(),
            ta.const_handle(),
            tb.const_handle(),
            &alpha,
        )
    };
    assert!(r.is_success(), "{}", lib.last_error().unwrap_or_default());
    // Gives a kernel run out of stream order the time to show (one in
    // order cannot run, however long this lasts).
    std::thread::sleep(std::time::Duration::from_millis(10));
    assert_eq!(counter.load(Ordering::SeqCst), before);
    drop(gate);
    ctx.stream().synchronize().unwrap();
    assert_eq!(counter.load(Ordering::SeqCst), before + 1);
    let got = tout.info().read_elements(&rt).unwrap();
    for i in 0..n {
        let v = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(v, i as f32 + 0.5 * (1.0 + i as f32));
    }

    // A failing kernel: its message through last_error.
    let short = OwnedTensor::new(Dtype::FLOAT32, 0, b.as_ptr(), bytes, 0, &[4], None).unwrap();
    // SAFETY: as above.
    let r = unsafe {
        add(
            ctx.handle(),
            tout.handle(),
            ta.const_handle(),
            short.const_handle(),
            &alpha,
        )
    };
    assert_eq!(r, DiopiError::ERROR_OCCURRED);
    assert!(lib.last_error().unwrap().contains("differ in size"));
    ctx.destroy().unwrap();
}

#[test]
fn required_tensors_are_readable_and_freed_at_drop() {
    let _s = serial();
    let lib = dipu_diopi::open(mini()).unwrap();
    // SAFETY: diopi_mini_require's C signature.
    let require: RequireFn = unsafe { lib.function("diopi_mini_require") }.unwrap();
    let rt = dipu_runtime::get().unwrap();
    let stream = rt.context().default_stream(0).unwrap();
    let base = rt.stats(0).unwrap().allocated_bytes.current;
    let ctx = Context::new(stream).unwrap();
    let mut out: TensorHandle = std::ptr::null_mut();
    // SAFETY: a live context and a writable out-pointer.
    let r = unsafe { require(ctx.handle(), 4096, &mut out) };
    assert!(r.is_success(), "{}", lib.last_error().unwrap_or_default());
    assert_eq!(ctx.required_count(), 2);
    // SAFETY: a handle the context owns.
    let info = unsafe { TensorInfo::read(out) }.unwrap();
    assert_eq!(
        (info.dtype, info.device, info.shape.clone()),
        (Dtype::INT8, 0, vec![4096])
    );
    assert!(rt.stats(0).unwrap().allocated_bytes.current >= base + 4096);
    ctx.stream().synchronize().unwrap();
    drop(ctx);
    assert_eq!(rt.stats(0).unwrap().allocated_bytes.current, base);
    assert!(dipu_diopi::context_get(std::ptr::null()).is_err());
}

#[test]
fn generator_handles_name_the_runtime_generators() {
    let _s = serial();
    let g = dipu_diopi::generator(0).unwrap();
    dipu_diopi::set_seed_and_offset(g, 77, 40).unwrap();
    assert_eq!(dipu_diopi::seed_and_offset(g).unwrap(), (77, 40));
    let rt = dipu_runtime::get().unwrap();
    assert_eq!(
        rt.default_generator(0).unwrap().philox_inputs(4).unwrap(),
        (77, 40)
    );
    assert_eq!(dipu_diopi::seed_and_offset(g).unwrap(), (77, 44));
    assert!(dipu_diopi::generator(1000).is_err());
    let bogus = 8usize as *const c_void;
    assert!(dipu_diopi::seed_and_offset(bogus.cast()).is_err());
}

#[test]
fn contexts_on_many_threads_require_and_free_independently() {
    let _s = serial();
    let lib = dipu_diopi::open(mini()).unwrap();
    // SAFETY: diopi_mini_require's C signature.
    let require: RequireFn = unsafe { lib.function("diopi_mini_require") }.unwrap();
    let rt = dipu_runtime::get().unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let rt = Arc::clone(&rt);
            std::thread::spawn(move || {
                let stream = rt.context().stream_from_pool(0, false).unwrap();
                for _ in 0..25 {
                    let ctx = Context::new(stream).unwrap();
                    let mut out: TensorHandle = std::ptr::null_mut();
                    // SAFETY: a live context and a writable out-pointer.
                    assert!(unsafe { require(ctx.handle(), 512, &mut out) }.is_success());
                    assert_eq!(ctx.required_count(), 2);
                }
                stream.synchronize().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
