//! Reduction kernels: `out = t0 op t1 op ... op tn-1`, always in rank
//! order, so every rank computes bitwise the same result.
//!
//! The terms are collective slots (aligned for every type); `out` is user
//! memory of any alignment. Each kernel works in blocks of [`BLOCK`]
//! elements: the block is reduced into an aligned accumulator on the stack
//! with plain loops over slices (which the compiler vectorises), then
//! copied out byte-wise. `f16` and `bf16` accumulate in `f32` and are
//! rounded once at the end; integers wrap on overflow.

use dipu_deviceapi::{DataType, Error, ErrorKind, Result};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::desc::{dtype_name, Reduction};
use super::nt;

/// Elements per accumulator block (at most 4 KiB for 8-byte types).
const BLOCK: usize = 512;

/// A reduction kernel: `(terms, outs, count)` writes the result to every
/// output; an output that is `streaming` is written with non-temporal
/// stores (then [`nt::fence`] before publishing it).
///
/// # Safety
/// Every term points to `count` readable elements of the kernel's type,
/// aligned for it, that nobody writes during the call; every output points
/// to `count` elements' worth of writable bytes (any alignment) that nobody
/// else reads or writes during the call, overlapping no other output and
/// no term, except that an output may be exactly a term (in place): each
/// block of the terms is read before the same block of the outputs is
/// written.
pub(crate) type Kernel = unsafe fn(&[*const u8], &[Out], usize);

/// Where a kernel writes its result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    pub(crate) ptr: *mut u8,
    /// Through non-temporal stores (for outputs not read again soon).
    pub(crate) streaming: bool,
}

/// The kernel for `dtype` and `op`.
pub(crate) fn kernel(dtype: DataType, op: Reduction) -> Result<Kernel> {
    macro_rules! kernel {
        ($run:ident, $t:ty, $f:expr) => {
            |t, o: &[Out], n| {
                // SAFETY: a kernel's caller promises what `$run` needs.
                unsafe { $run::<$t>(t, o, n, $f) }
            }
        };
    }
    macro_rules! pick {
        ($run:ident, $t:ty, $sum:expr, $prod:expr, $min:expr, $max:expr) => {
            match op {
                Reduction::Sum => kernel!($run, $t, $sum),
                Reduction::Prod => kernel!($run, $t, $prod),
                Reduction::Min => kernel!($run, $t, $min),
                Reduction::Max => kernel!($run, $t, $max),
            }
        };
    }
    macro_rules! int {
        ($t:ty) => {
            pick!(
                run,
                $t,
                <$t>::wrapping_add,
                <$t>::wrapping_mul,
                Ord::min,
                Ord::max
            )
        };
    }
    macro_rules! float {
        ($run:ident, $t:ty, $acc:ty) => {
            pick!(
                $run,
                $t,
                |a: $acc, b: $acc| a + b,
                |a: $acc, b: $acc| a * b,
                <$acc>::min,
                <$acc>::max
            )
        };
    }
    Ok(match dtype {
        DataType::F16 => float!(run_half, f16, f32),
        DataType::BF16 => float!(run_half, bf16, f32),
        DataType::F32 => float!(run, f32, f32),
        DataType::F64 => float!(run, f64, f64),
        DataType::I8 => int!(i8),
        DataType::U8 => int!(u8),
        DataType::I16 => int!(i16),
        DataType::I32 => int!(i32),
        DataType::U32 => int!(u32),
        DataType::I64 => int!(i64),
        DataType::U64 => int!(u64),
        other => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("the host vendor cannot reduce {}", dtype_name(other)),
            ))
        }
    })
}

/// `acc[i] = f(x[i], y[i])`.
#[inline(always)]
fn combine2<T: Copy>(acc: &mut [T], x: &[T], y: &[T], f: impl Fn(T, T) -> T) {
    for ((a, x), y) in acc.iter_mut().zip(x).zip(y) {
        *a = f(*x, *y);
    }
}

/// `acc[i] = f(acc[i], x[i])`.
#[inline(always)]
fn combine<T: Copy>(acc: &mut [T], x: &[T], f: impl Fn(T, T) -> T) {
    for (a, x) in acc.iter_mut().zip(x) {
        *a = f(*a, *x);
    }
}

/// Block `start..start + len` of term `term` as a slice.
///
/// # Safety
/// As for [`Kernel`], and `start + len <= count`.
#[inline(always)]
unsafe fn block<'a, T>(term: *const u8, start: usize, len: usize) -> &'a [T] {
    // SAFETY: the caller promises `count` aligned, readable elements that
    // nobody writes during the kernel; the block lies inside them.
    unsafe { std::slice::from_raw_parts(term.cast::<T>().add(start), len) }
}

/// The kernel for types reduced in their own precision.
///
/// # Safety
/// As for [`Kernel`] with elements of type `T`.
unsafe fn run<T: Copy + Default>(
    terms: &[*const u8],
    outs: &[Out],
    count: usize,
    f: impl Fn(T, T) -> T + Copy,
) {
    let mut acc = [T::default(); BLOCK];
    let mut start = 0;
    while start < count {
        let len = BLOCK.min(count - start);
        let acc = &mut acc[..len];
        // SAFETY: `start + len <= count`, and the caller's contract.
        unsafe {
            match terms {
                [] => return,
                [only] => acc.copy_from_slice(block(*only, start, len)),
                [first, second, rest @ ..] => {
                    combine2(
                        acc,
                        block(*first, start, len),
                        block(*second, start, len),
                        f,
                    );
                    for term in rest {
                        combine(acc, block(*term, start, len), f);
                    }
                }
            }
        }
        let bytes = std::mem::size_of_val(acc);
        for out in outs {
            // SAFETY: `out` has room for `count` elements and overlaps no
            // term (nor the stack accumulator); a byte copy needs no
            // alignment.
            unsafe {
                nt::copy(
                    acc.as_ptr().cast::<u8>(),
                    out.ptr.add(start * std::mem::size_of::<T>()),
                    bytes,
                    out.streaming,
                );
            }
        }
        start += len;
    }
}

/// 16-bit floats, converted through `f32`.
trait Half: Copy + Default {
    fn widen(src: &[Self], dst: &mut [f32]);
    fn narrow(dst: &mut [Self], src: &[f32]);
}

impl Half for f16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(dst: &mut [Self], src: &[f32]) {
        dst.convert_from_f32_slice(src);
    }
}

impl Half for bf16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(dst: &mut [Self], src: &[f32]) {
        dst.convert_from_f32_slice(src);
    }
}

/// The kernel for 16-bit floats: accumulate in `f32`, round once.
///
/// # Safety
/// As for [`Kernel`] with elements of type `H`.
unsafe fn run_half<H: Half>(
    terms: &[*const u8],
    outs: &[Out],
    count: usize,
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    let mut acc = [0f32; BLOCK];
    let mut tmp = [0f32; BLOCK];
    let mut narrow = [H::default(); BLOCK];
    let mut start = 0;
    while start < count {
        let len = BLOCK.min(count - start);
        let (acc, tmp, narrow) = (&mut acc[..len], &mut tmp[..len], &mut narrow[..len]);
        for (k, term) in terms.iter().enumerate() {
            // SAFETY: `start + len <= count`, and the caller's contract.
            let x: &[H] = unsafe { block(*term, start, len) };
            if k == 0 {
                H::widen(x, acc);
            } else {
                H::widen(x, tmp);
                combine(acc, tmp, f);
            }
        }
        H::narrow(narrow, acc);
        for out in outs {
            // SAFETY: as in `run`.
            unsafe {
                nt::copy(
                    narrow.as_ptr().cast::<u8>(),
                    out.ptr.add(start * std::mem::size_of::<H>()),
                    std::mem::size_of_val(narrow),
                    out.streaming,
                );
            }
        }
        start += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply<T: Copy + Default>(dtype: DataType, op: Reduction, terms: &[Vec<T>]) -> Vec<T> {
        let count = terms[0].len();
        let ptrs: Vec<*const u8> = terms.iter().map(|t| t.as_ptr().cast()).collect();
        // One byte of offset: the output may be unaligned.
        let size = std::mem::size_of::<T>();
        let mut raw = vec![0u8; count * size + 1];
        let mut second = vec![0u8; count * size];
        let k = kernel(dtype, op).unwrap();
        // SAFETY: the terms are `count` aligned elements each; `raw[1..]`
        // and `second` have room for `count` elements and are separate
        // buffers.
        unsafe {
            let outs = [
                Out {
                    ptr: raw.as_mut_ptr().add(1),
                    streaming: count % 2 == 1,
                },
                Out {
                    ptr: second.as_mut_ptr(),
                    streaming: count % 2 == 0,
                },
            ];
            k(&ptrs, &outs, count);
        }
        nt::fence();
        assert_eq!(raw[1..], second[..], "both outputs hold the result");
        (0..count)
            // SAFETY: reads element i of the unaligned output.
            .map(|i| unsafe { raw.as_ptr().add(1 + i * size).cast::<T>().read_unaligned() })
            .collect()
    }

    #[test]
    fn reduces_in_rank_order_across_blocks() {
        let n = BLOCK * 2 + 7;
        let a: Vec<i32> = (0..n as i32).collect();
        let b: Vec<i32> = (0..n as i32).map(|i| 3 - i).collect();
        let c = vec![i32::MAX; n];
        let sum = apply(
            DataType::I32,
            Reduction::Sum,
            &[a.clone(), b.clone(), c.clone()],
        );
        assert!(sum.iter().all(|x| *x == 3i32.wrapping_add(i32::MAX)));
        let min = apply(DataType::I32, Reduction::Min, &[a.clone(), b.clone()]);
        assert_eq!(min[0], 0);
        assert_eq!(min[n - 1], 3 - (n as i32 - 1));
        let one = apply(DataType::I32, Reduction::Prod, std::slice::from_ref(&a));
        assert_eq!(one, a);
        let h: Vec<f16> = (0..n).map(|i| f16::from_f32(i as f32 * 0.5)).collect();
        let s = apply(DataType::F16, Reduction::Sum, &[h.clone(), h.clone()]);
        assert_eq!(s[9], f16::from_f32(9.0));
        let m = apply(
            DataType::F64,
            Reduction::Max,
            &[vec![1.0f64, -2.0], vec![0.5, 7.0]],
        );
        assert_eq!(m, [1.0, 7.0]);
    }
}
