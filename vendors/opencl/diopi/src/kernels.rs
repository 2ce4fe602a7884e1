//! The OpenCL C program (`kernels.cl`), built once per (context, device)
//! of the queues it is asked for, and the launch of one of its kernels on
//! a queue. Kernel objects are cached per program; setting their arguments
//! and enqueuing happen under the program's lock (`clSetKernelArg` is the
//! one OpenCL call that is not thread-safe).
//!
//! Every enqueue asks for its event and keeps it until the command is
//! complete or failed: PoCL aborts the process when a command fails (for
//! instance behind a failed copy) whose event was already released.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::cl::{call, cl, Cl, Obj};
use crate::cl::{
    CL_DEVICE_EXTENSIONS, CL_EVENT_COMMAND_EXECUTION_STATUS, CL_PROGRAM_BUILD_LOG,
    CL_QUEUE_CONTEXT, CL_QUEUE_DEVICE,
};
use crate::rt::{err, MAX_DIMS, R, T};
use crate::types::dtype;

/// The OpenCL C source of every kernel.
pub(crate) const SOURCE: &str = include_str!("kernels.cl");

/// Whether the kernels read and write `d` (float64 only where the device
/// has `cl_khr_fp64`, checked at launch).
pub(crate) fn dtype_supported(d: i32) -> bool {
    use dtype::*;
    matches!(d, I8 | U8 | I16 | I32 | I64 | F16 | F32 | F64 | BOOL | BF16)
}

/// A tensor as a kernel argument: `TD` of `kernels.cl` (136 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Td {
    shape: [i64; MAX_DIMS],
    stride: [i64; MAX_DIMS],
    ndim: i32,
    dtype: i32,
}

impl Td {
    /// A descriptor of `shape` and `strides` (as many) with dtype `dt`.
    pub(crate) fn new(dt: i32, shape: &[i64], strides: &[i64]) -> Td {
        let mut td = Td {
            shape: [1; MAX_DIMS],
            stride: [0; MAX_DIMS],
            ndim: shape.len() as i32,
            dtype: dt,
        };
        td.shape[..shape.len()].copy_from_slice(shape);
        td.stride[..strides.len()].copy_from_slice(strides);
        td
    }
    /// The descriptor of `t` as it is.
    pub(crate) fn of(t: &T) -> Td {
        Td::new(t.dtype, &t.shape, &t.strides)
    }
    /// No tensor: a scalar operand passed by value, or an absent one.
    pub(crate) fn none() -> Td {
        Td::new(-1, &[], &[])
    }
    /// `t` read at the positions of `shape`, broadcast (stride 0 where `t`
    /// has size 1 or lacks the dimension); an error names `name` when it
    /// does not broadcast.
    pub(crate) fn bcast(t: &T, shape: &[i64], name: &str) -> R<Td> {
        if t.ndim() > shape.len() {
            return Err(bcast_err(t, shape, name));
        }
        let lead = shape.len() - t.ndim();
        let mut strides = vec![0i64; shape.len()];
        for (d, (&s, &st)) in t.shape.iter().zip(&t.strides).enumerate() {
            let want = shape[lead + d];
            strides[lead + d] = if s == want {
                st
            } else if s == 1 {
                0
            } else {
                return Err(bcast_err(t, shape, name));
            };
        }
        Ok(Td::new(t.dtype, shape, &strides))
    }
}

fn bcast_err(t: &T, shape: &[i64], name: &str) -> crate::rt::Error {
    err(format!(
        "{name} of shape {:?} does not broadcast to the output's shape {shape:?}",
        t.shape
    ))
}

/// One kernel argument.
#[derive(Clone, Copy)]
pub(crate) enum Arg {
    /// A pointer into device (SVM) memory.
    Ptr(*mut c_void),
    /// A tensor descriptor.
    Td(Td),
    /// `int`.
    I32(i32),
    /// `long`.
    I64(i64),
    /// `acc_t`: double where the device has `cl_khr_fp64`, else float.
    Acc(f64),
}

/// A built program and its kernels.
struct Program {
    program: Obj,
    fp64: bool,
    kernels: Mutex<HashMap<&'static str, Obj>>,
    /// Events of enqueued commands not yet seen complete.
    pending: Mutex<Vec<Obj>>,
}

// SAFETY: OpenCL objects may be used from any thread; the kernels (whose
// argument setting is not thread-safe) are only touched under their lock.
unsafe impl Send for Program {}
// SAFETY: as above.
unsafe impl Sync for Program {}

type Key = (usize, usize);

fn programs() -> &'static Mutex<HashMap<Key, Arc<Program>>> {
    static P: OnceLock<Mutex<HashMap<Key, Arc<Program>>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

fn check(status: i32, what: &str) -> R<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(err(format!("{what} failed with OpenCL status {status}")))
    }
}

fn queue_info(cl: &Cl, q: Obj, param: u32) -> R<Obj> {
    let mut v: Obj = std::ptr::null_mut();
    let st = call!(
        cl,
        clGetCommandQueueInfo(
            q,
            param,
            std::mem::size_of::<Obj>(),
            (&mut v as *mut Obj).cast(),
            std::ptr::null_mut()
        )
    );
    check(st, "clGetCommandQueueInfo")?;
    Ok(v)
}

fn device_extensions(cl: &Cl, device: Obj) -> R<String> {
    let mut n = 0usize;
    let st = call!(
        cl,
        clGetDeviceInfo(
            device,
            CL_DEVICE_EXTENSIONS,
            0,
            std::ptr::null_mut(),
            &mut n
        )
    );
    check(st, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS)")?;
    let mut buf = vec![0u8; n];
    let st = call!(
        cl,
        clGetDeviceInfo(
            device,
            CL_DEVICE_EXTENSIONS,
            n,
            buf.as_mut_ptr().cast(),
            std::ptr::null_mut()
        )
    );
    check(st, "clGetDeviceInfo(CL_DEVICE_EXTENSIONS)")?;
    Ok(String::from_utf8_lossy(&buf)
        .trim_end_matches('\0')
        .to_owned())
}

fn build_log(cl: &Cl, program: Obj, device: Obj) -> String {
    let mut n = 0usize;
    let size = |n: &mut usize| {
        // SAFETY: a size query into a local.
        cl.clGetProgramBuildInfo().map(|f| unsafe {
            f(
                program,
                device,
                CL_PROGRAM_BUILD_LOG,
                0,
                std::ptr::null_mut(),
                n,
            )
        })
    };
    if size(&mut n).is_err() || n == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; n];
    if let Ok(f) = cl.clGetProgramBuildInfo() {
        // SAFETY: `buf` has the `n` bytes the driver asked for.
        unsafe {
            f(
                program,
                device,
                CL_PROGRAM_BUILD_LOG,
                n,
                buf.as_mut_ptr().cast(),
                std::ptr::null_mut(),
            )
        };
    }
    String::from_utf8_lossy(&buf)
        .trim_end_matches('\0')
        .to_owned()
}

/// The program of `q`'s context and device, built on first use.
fn program_for(cl: &Cl, q: Obj) -> R<Arc<Program>> {
    let ctx = queue_info(cl, q, CL_QUEUE_CONTEXT)?;
    let device = queue_info(cl, q, CL_QUEUE_DEVICE)?;
    let key = (ctx as usize, device as usize);
    let mut all = programs().lock();
    if let Some(p) = all.get(&key) {
        return Ok(Arc::clone(p));
    }
    let fp64 = device_extensions(cl, device)?
        .split_whitespace()
        .any(|e| e == "cl_khr_fp64");
    let src = SOURCE.as_ptr().cast();
    let len = SOURCE.len();
    let mut code = 0;
    let program = call!(cl, clCreateProgramWithSource(ctx, 1, &src, &len, &mut code));
    check(code, "clCreateProgramWithSource")?;
    let options = c"-cl-std=CL1.2";
    let st = call!(
        cl,
        clBuildProgram(
            program,
            1,
            &device,
            options.as_ptr(),
            std::ptr::null(),
            std::ptr::null_mut()
        )
    );
    if st != 0 {
        return Err(err(format!(
            "clBuildProgram of the kernels failed with OpenCL status {st}: {}",
            build_log(cl, program, device)
        )));
    }
    let p = Arc::new(Program {
        program,
        fp64,
        kernels: Mutex::new(HashMap::new()),
        pending: Mutex::new(Vec::new()),
    });
    all.insert(key, Arc::clone(&p));
    Ok(p)
}

/// Whether the device of `q` computes in double (`cl_khr_fp64`), which
/// float64 tensors need.
pub(crate) fn has_fp64(q: Obj) -> R<bool> {
    let cl = cl().map_err(err)?;
    Ok(program_for(cl, q)?.fp64)
}

/// Releases the events of commands that are done (complete or failed).
fn sweep(cl: &Cl, pending: &mut Vec<Obj>) {
    let (Ok(info), Ok(release)) = (cl.clGetEventInfo(), cl.clReleaseEvent()) else {
        return;
    };
    pending.retain(|&ev| {
        let mut status = 1i32;
        // SAFETY: `ev` is an event this library holds; `status` is a local.
        let st = unsafe {
            info(
                ev,
                CL_EVENT_COMMAND_EXECUTION_STATUS,
                4,
                (&mut status as *mut i32).cast(),
                std::ptr::null_mut(),
            )
        };
        if st == 0 && status <= 0 {
            // SAFETY: the command is done; the event is released once.
            unsafe { release(ev) };
            false
        } else {
            true
        }
    });
}

/// Enqueues `kernel` of the program on queue `q` with `args`, over `n`
/// work-items (nothing for `n` = 0); returns once it is queued.
pub(crate) fn launch(q: Obj, kernel: &'static str, args: &[Arg], n: i64) -> R<()> {
    if n <= 0 {
        return Ok(());
    }
    let cl = cl().map_err(err)?;
    let p = program_for(cl, q)?;
    let mut kernels = p.kernels.lock();
    let k = match kernels.get(kernel) {
        Some(&k) => k,
        None => {
            let name = CString::new(kernel).map_err(|_| err("kernel name"))?;
            let mut code = 0;
            let k = call!(cl, clCreateKernel(p.program, name.as_ptr(), &mut code));
            check(code, &format!("clCreateKernel({kernel})"))?;
            kernels.insert(kernel, k);
            k
        }
    };
    for (i, a) in args.iter().enumerate() {
        let i = i as u32;
        let what = || format!("argument {i} of kernel {kernel}");
        let st = match *a {
            Arg::Ptr(ptr) => call!(cl, clSetKernelArgSVMPointer(k, i, ptr.cast_const())),
            Arg::Td(td) => call!(
                cl,
                clSetKernelArg(k, i, std::mem::size_of::<Td>(), (&td as *const Td).cast())
            ),
            Arg::I32(v) => call!(cl, clSetKernelArg(k, i, 4, (&v as *const i32).cast())),
            Arg::I64(v) => call!(cl, clSetKernelArg(k, i, 8, (&v as *const i64).cast())),
            Arg::Acc(v) if p.fp64 => call!(cl, clSetKernelArg(k, i, 8, (&v as *const f64).cast())),
            Arg::Acc(v) => {
                let f = v as f32;
                call!(cl, clSetKernelArg(k, i, 4, (&f as *const f32).cast()))
            }
        };
        check(st, &what())?;
    }
    const GROUP: i64 = 64;
    let global = ((n + GROUP - 1) / GROUP * GROUP) as usize;
    let mut ev: Obj = std::ptr::null_mut();
    let st = call!(
        cl,
        clEnqueueNDRangeKernel(
            q,
            k,
            1,
            std::ptr::null(),
            &global,
            std::ptr::null(),
            0,
            std::ptr::null(),
            &mut ev
        )
    );
    drop(kernels);
    check(
        st,
        &format!("clEnqueueNDRangeKernel({kernel}, {n} work-items)"),
    )?;
    let mut pending = p.pending.lock();
    pending.push(ev);
    if pending.len() >= 64 {
        sweep(cl, &mut pending);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[i64], strides: &[i64]) -> T {
        T {
            ptr: std::ptr::null_mut(),
            dtype: dtype::F32,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }

    #[test]
    fn the_descriptor_has_the_layout_of_kernels_cl() {
        assert_eq!(std::mem::size_of::<Td>(), 136);
        assert_eq!(std::mem::offset_of!(Td, stride), 64);
        assert_eq!(std::mem::offset_of!(Td, ndim), 128);
        assert_eq!(std::mem::offset_of!(Td, dtype), 132);
        assert!(SOURCE
            .contains("long shape[MAXD];\n    long stride[MAXD];\n    int ndim;\n    int dtype;"));
    }

    #[test]
    fn broadcasting_gives_zero_strides_and_refuses_mismatches() {
        let b = Td::bcast(&t(&[4], &[2]), &[3, 4], "other").unwrap();
        assert_eq!(
            (b.ndim, &b.shape[..2], &b.stride[..2]),
            (2, &[3, 4][..], &[0, 2][..])
        );
        let one = Td::bcast(&t(&[3, 1], &[5, 5]), &[3, 4], "other").unwrap();
        assert_eq!(&one.stride[..2], &[5, 0]);
        let e = Td::bcast(&t(&[5], &[1]), &[3, 4], "other").unwrap_err();
        assert!(e.msg.contains("does not broadcast"), "{}", e.msg);
        assert!(Td::bcast(&t(&[2, 3, 4], &[12, 4, 1]), &[3, 4], "x").is_err());
        assert_eq!(Td::none().dtype, -1);
    }
}
