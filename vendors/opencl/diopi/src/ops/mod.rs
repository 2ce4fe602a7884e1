//! The exported C entry points (`diopi*`): each reads and checks its
//! arguments on the calling thread, then enqueues kernels on the context's
//! queue and returns.

use crate::kernels::{self, Arg, Td};
use crate::rt::{self, Error, R, T};
use crate::types::{dtype, error};

mod entry;
mod linalg;
mod nn;
mod pointwise;
mod reduce;

dipu_diopi_kernelkit::export_library_info!("opencl", "dipu-rs OpenCL DIOPI");

/// The queue kernels go to.
type Q = *mut std::ffi::c_void;

/// Error unless every tensor has a floating dtype, and float64 only on a
/// device with `cl_khr_fp64`.
pub(crate) fn check_float(q: Q, ts: &[(&T, &str)]) -> R<()> {
    for (t, name) in ts {
        if !t.is_float() {
            return Err(Error {
                code: error::DTYPE_NOT_SUPPORTED,
                msg: format!(
                    "{name} has dtype {}; a floating dtype is required",
                    dtype::name(t.dtype)
                ),
            });
        }
    }
    check_f64(q, ts)
}

/// Error for a float64 tensor on a device without `cl_khr_fp64`.
pub(crate) fn check_f64(q: Q, ts: &[(&T, &str)]) -> R<()> {
    if ts.iter().any(|(t, _)| t.dtype == dtype::F64) && !kernels::has_fp64(q)? {
        return Err(rt::dtype_err(
            "a float64 tensor (the device has no cl_khr_fp64)",
            dtype::F64,
        ));
    }
    Ok(())
}

pub(crate) use dipu_diopi_kernelkit::check::norm_dim;

/// Error unless `t` has exactly `shape`.
pub(crate) fn check_shape(t: &T, shape: &[i64], name: &str) -> R<()> {
    dipu_diopi_kernelkit::check::shape(&t.shape, shape, name)
}

/// Error unless `t` has an integer dtype (index tensors).
pub(crate) fn check_index(t: &T, name: &str) -> R<()> {
    dipu_diopi_kernelkit::check::index_dtype(t.dtype, name)
}

/// An operand of the elementwise kernel.
#[derive(Clone)]
pub(crate) enum Op {
    /// A tensor, broadcast to the output's shape.
    T(T),
    /// A value.
    S(f64),
    /// Unused.
    N,
}

/// Elementwise op code `code` of `kernels.cl`'s `apply`: `out = f(a, b, c)`
/// with parameters `p0`, `p1`, over `out`'s shape.
pub(crate) fn ew(q: Q, code: i32, out: &T, ops: [&Op; 3], p0: f64, p1: f64) -> R<()> {
    let mut args = vec![Arg::Ptr(out.ptr), Arg::Td(Td::of(out))];
    let mut vals = [0.0; 3];
    for (k, (o, name)) in ops
        .iter()
        .zip(["input", "other", "third operand"])
        .enumerate()
    {
        match o {
            Op::T(t) => {
                args.push(Arg::Ptr(t.ptr));
                args.push(Arg::Td(Td::bcast(t, &out.shape, name)?));
            }
            Op::S(v) => {
                vals[k] = *v;
                args.push(Arg::Ptr(out.ptr));
                args.push(Arg::Td(Td::none()));
            }
            Op::N => {
                args.push(Arg::Ptr(out.ptr));
                args.push(Arg::Td(Td::none()));
            }
        }
    }
    let mut all: Vec<(&T, &str)> = vec![(out, "out")];
    for o in ops {
        if let Op::T(t) = o {
            all.push((t, "input"));
        }
    }
    check_f64(q, &all)?;
    args.extend([
        Arg::I32(code),
        Arg::Acc(vals[0]),
        Arg::Acc(vals[1]),
        Arg::Acc(vals[2]),
        Arg::Acc(p0),
        Arg::Acc(p1),
        Arg::I64(out.numel()),
    ]);
    kernels::launch(q, "ew", &args, out.numel())
}

/// Contiguous strides of `shape`.
pub(crate) fn contiguous(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1].max(1);
    }
    s
}
