//! The host reductions of the host-staged collectives over TCP: the ranks'
//! rows of elements, in rank order, folded into one, for every data type
//! and operator. As the host vendor's collectives do, `f16` and `bf16`
//! accumulate in `f32` and are rounded once, and integers wrap; `Avg` is
//! the sum divided by the number of rows, integers truncating toward zero
//! (as the process group's averaging emulation does).

use dipu_deviceapi::{DataType, Error, ErrorKind, ReduceOp, Result};
use half::{bf16, f16};

/// Elements folded at a time (the accumulator's length).
const CHUNK: usize = 4096;

/// An element type read from and written to native-endian bytes.
trait Elem: Copy {
    const SIZE: usize;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, bytes: &mut [u8]);
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().expect("a whole element"))
            }
            fn write(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
elem!(f16, bf16, f32, f64, i8, u8, i16, i32, i64, u32, u64);

/// `out` = the element-wise fold of `rows` (each `out.len()` bytes; `None`
/// is `out`'s own bytes, read before they are overwritten): each element
/// read as `T`, widened by `up`, combined in rank order, divided by
/// `average` (`Avg`) and narrowed by `down`. Generic over the functions, so
/// that every type and operator gets its own inlined loop.
fn fold_with<T: Elem, A: Copy>(
    rows: &[Option<&[u8]>],
    out: &mut [u8],
    up: impl Fn(T) -> A,
    combine: impl Fn(A, A) -> A,
    average: Option<fn(A, usize) -> A>,
    down: impl Fn(A) -> T,
) {
    let n = rows.len();
    let mut acc: Vec<A> = Vec::with_capacity(CHUNK);
    let count = out.len() / T::SIZE;
    let mut start = 0;
    while start < count {
        let len = CHUNK.min(count - start);
        let span = start * T::SIZE..(start + len) * T::SIZE;
        acc.clear();
        {
            // This chunk of every row (read before `out` is written).
            let own: &[u8] = out;
            let rows: Vec<&[u8]> = rows
                .iter()
                .map(|r| &r.unwrap_or(own)[span.clone()])
                .collect();
            acc.extend(rows[0].chunks_exact(T::SIZE).map(|b| up(T::read(b))));
            for row in &rows[1..] {
                for (a, b) in acc.iter_mut().zip(row.chunks_exact(T::SIZE)) {
                    *a = combine(*a, up(T::read(b)));
                }
            }
        }
        for (a, b) in acc.iter().zip(out[span].chunks_exact_mut(T::SIZE)) {
            let a = match average {
                Some(divide) => divide(*a, n),
                None => *a,
            };
            down(a).write(b);
        }
        start += len;
    }
}

/// The kernel of floats `$t` accumulated in `$a`.
macro_rules! float_fold {
    ($t:ty, $a:ty, $up:expr, $down:expr, $op:expr) => {{
        let average: Option<fn($a, usize) -> $a> = Some(|a, n| a / n as $a);
        let kernel: Kernel = match $op {
            ReduceOp::Sum => {
                Box::new(|r, o| fold_with::<$t, $a>(r, o, $up, |a, b| a + b, None, $down))
            }
            ReduceOp::Avg => {
                Box::new(move |r, o| fold_with::<$t, $a>(r, o, $up, |a, b| a + b, average, $down))
            }
            ReduceOp::Prod => {
                Box::new(|r, o| fold_with::<$t, $a>(r, o, $up, |a, b| a * b, None, $down))
            }
            ReduceOp::Min => {
                Box::new(|r, o| fold_with::<$t, $a>(r, o, $up, <$a>::min, None, $down))
            }
            ReduceOp::Max => {
                Box::new(|r, o| fold_with::<$t, $a>(r, o, $up, <$a>::max, None, $down))
            }
            _ => return None,
        };
        Some(kernel)
    }};
}

/// The kernel of integers `$t`, which wrap; `Avg` divides in `$wide`.
macro_rules! int_fold {
    ($t:ty, $wide:ty, $op:expr) => {{
        let average: Option<fn($t, usize) -> $t> =
            Some(|a, n| (<$wide>::from(a) / n as $wide) as $t);
        let same = |x: $t| x;
        let kernel: Kernel = match $op {
            ReduceOp::Sum => Box::new(move |r, o| {
                fold_with::<$t, $t>(r, o, same, <$t>::wrapping_add, None, same)
            }),
            ReduceOp::Avg => Box::new(move |r, o| {
                fold_with::<$t, $t>(r, o, same, <$t>::wrapping_add, average, same)
            }),
            ReduceOp::Prod => Box::new(move |r, o| {
                fold_with::<$t, $t>(r, o, same, <$t>::wrapping_mul, None, same)
            }),
            ReduceOp::Min => {
                Box::new(move |r, o| fold_with::<$t, $t>(r, o, same, std::cmp::min, None, same))
            }
            ReduceOp::Max => {
                Box::new(move |r, o| fold_with::<$t, $t>(r, o, same, std::cmp::max, None, same))
            }
            _ => return None,
        };
        Some(kernel)
    }};
}

/// Folds rows into an output of the same length.
type Kernel = Box<dyn Fn(&[Option<&[u8]>], &mut [u8])>;

/// The fold of `dtype` under `op`, if there is one.
fn kernel(dtype: DataType, op: ReduceOp) -> Option<Kernel> {
    match dtype {
        DataType::F16 => float_fold!(f16, f32, f16::to_f32, f16::from_f32, op),
        DataType::BF16 => float_fold!(bf16, f32, bf16::to_f32, bf16::from_f32, op),
        DataType::F32 => float_fold!(f32, f32, |x| x, |x| x, op),
        DataType::F64 => float_fold!(f64, f64, |x| x, |x| x, op),
        DataType::I8 => int_fold!(i8, i64, op),
        DataType::U8 => int_fold!(u8, u64, op),
        DataType::I16 => int_fold!(i16, i64, op),
        DataType::I32 => int_fold!(i32, i64, op),
        DataType::I64 => int_fold!(i64, i64, op),
        DataType::U32 => int_fold!(u32, u64, op),
        DataType::U64 => int_fold!(u64, u64, op),
        _ => None,
    }
}

/// Sets `out` to the element-wise `op` of `rows` (rank order, each as long
/// as `out`, whole `dtype` elements; `None` is `out`'s own bytes, as this
/// rank's row is when the result replaces it).
pub(crate) fn fold(
    dtype: DataType,
    op: ReduceOp,
    rows: &[Option<&[u8]>],
    out: &mut [u8],
) -> Result<()> {
    let kernel = kernel(dtype, op).ok_or_else(|| unsupported(dtype, op))?;
    let size = dtype.size_in_bytes();
    let fits = |r: &Option<&[u8]>| r.is_none_or(|r| r.len() == out.len());
    if rows.is_empty() || out.len() % size != 0 || !rows.iter().all(fits) {
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "a host reduction of {} rows into {} bytes of {dtype:?}: the rows do not match",
                rows.len(),
                out.len()
            ),
        ));
    }
    kernel(rows, out);
    Ok(())
}

/// Whether `dtype` and `op` have a host reduction.
pub(crate) fn check(dtype: DataType, op: ReduceOp) -> Result<()> {
    kernel(dtype, op)
        .map(drop)
        .ok_or_else(|| unsupported(dtype, op))
}

fn unsupported(dtype: DataType, op: ReduceOp) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the host-staged collectives have no reduction {op:?} of {dtype:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Elem>(values: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; values.len() * T::SIZE];
        for (v, b) in values.iter().zip(out.chunks_exact_mut(T::SIZE)) {
            v.write(b);
        }
        out
    }

    fn values<T: Elem>(bytes: &[u8]) -> Vec<T> {
        bytes.chunks_exact(T::SIZE).map(T::read).collect()
    }

    fn run<T: Elem>(dtype: DataType, op: ReduceOp, rows: &[Vec<T>]) -> Vec<T> {
        let rows: Vec<Vec<u8>> = rows.iter().map(|r| bytes(r)).collect();
        let refs: Vec<Option<&[u8]>> = rows.iter().map(|r| Some(r.as_slice())).collect();
        let mut out = vec![0u8; rows[0].len()];
        fold(dtype, op, &refs, &mut out).unwrap();
        values(&out)
    }

    #[test]
    fn every_type_and_operator_has_a_fold() {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                check(dtype, op).unwrap();
            }
        }
    }

    #[test]
    fn floats_and_integers() {
        let rows = vec![vec![1.5f32, -2.0, 3.0], vec![2.5, 4.0, -1.0]];
        assert_eq!(run(DataType::F32, ReduceOp::Sum, &rows), [4.0, 2.0, 2.0]);
        assert_eq!(
            run(DataType::F32, ReduceOp::Prod, &rows),
            [3.75, -8.0, -3.0]
        );
        assert_eq!(run(DataType::F32, ReduceOp::Min, &rows), [1.5, -2.0, -1.0]);
        assert_eq!(run(DataType::F32, ReduceOp::Max, &rows), [2.5, 4.0, 3.0]);
        assert_eq!(run(DataType::F32, ReduceOp::Avg, &rows), [2.0, 1.0, 1.0]);
        let ints = vec![vec![7i32, -7, i32::MAX], vec![0, 0, 1]];
        assert_eq!(
            run(DataType::I32, ReduceOp::Avg, &ints),
            [3, -3, i32::MIN / 2],
            "truncated toward zero, after a wrapping sum"
        );
        let bytes8 = vec![vec![200u8, 3], vec![100, 5], vec![1, 7]];
        assert_eq!(run(DataType::U8, ReduceOp::Sum, &bytes8), [45, 15]);
        assert_eq!(run(DataType::U8, ReduceOp::Avg, &bytes8), [15, 5]);
    }

    #[test]
    fn halves_accumulate_in_f32_and_round_once() {
        // 2048 + 1 + 1 in f16 step by step stays 2048 (1 is half an ulp);
        // accumulated in f32 it is 2050, which f16 holds exactly.
        let rows: Vec<Vec<f16>> = [2048.0, 1.0, 1.0]
            .iter()
            .map(|v| vec![f16::from_f32(*v)])
            .collect();
        assert_eq!(
            run(DataType::F16, ReduceOp::Sum, &rows),
            [f16::from_f32(2050.0)]
        );
        let rows: Vec<Vec<bf16>> = [3.0, 5.0]
            .iter()
            .map(|v| vec![bf16::from_f32(*v)])
            .collect();
        assert_eq!(
            run(DataType::BF16, ReduceOp::Avg, &rows),
            [bf16::from_f32(4.0)]
        );
    }

    #[test]
    fn long_rows_cross_chunks() {
        let n = 3 * CHUNK + 17;
        let a: Vec<i64> = (0..n as i64).collect();
        let b: Vec<i64> = (0..n as i64).map(|i| 2 * i).collect();
        let got = run(DataType::I64, ReduceOp::Sum, &[a, b]);
        assert!(got.iter().enumerate().all(|(i, v)| *v == 3 * i as i64));
    }

    #[test]
    fn mismatched_rows_are_an_error() {
        let (a, b) = (vec![0u8; 8], vec![0u8; 4]);
        let mut out = vec![0u8; 8];
        let e = fold(
            DataType::F32,
            ReduceOp::Sum,
            &[Some(&a), Some(&b)],
            &mut out,
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
    }

    #[test]
    fn the_output_can_be_a_row() {
        // Rank 1's row is the output itself, read before it is written.
        let (a, c) = (bytes(&[1i32, 2, 3]), bytes(&[100i32, 200, 300]));
        let mut out = bytes(&[10i32, 20, 30]);
        fold(
            DataType::I32,
            ReduceOp::Sum,
            &[Some(&a), None, Some(&c)],
            &mut out,
        )
        .unwrap();
        assert_eq!(values::<i32>(&out), [111, 222, 333]);
        let n = 2 * CHUNK + 5;
        let mut out = bytes(&vec![2.0f64; n]);
        let other = bytes(&vec![3.0f64; n]);
        fold(
            DataType::F64,
            ReduceOp::Prod,
            &[None, Some(&other)],
            &mut out,
        )
        .unwrap();
        assert!(values::<f64>(&out).iter().all(|v| *v == 6.0));
    }
}
