//! Test inputs of every data type and host-side reference reductions (in
//! rank order, in the kernels' precision, so results compare bitwise).

use dipu_deviceapi::{DataType, ReduceOp};
use half::{bf16, f16};

/// The ops the host vendor implements.
pub(super) const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];

fn encode<T: Copy>(values: &[T]) -> Vec<u8> {
    // SAFETY: the values are plain numbers: their bytes are initialised
    // and may be read as `u8`.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
    .to_vec()
}

fn decode<T: Copy + Default>(bytes: &[u8]) -> Vec<T> {
    let mut out = vec![T::default(); bytes.len() / std::mem::size_of::<T>()];
    // SAFETY: `out` has room for the bytes, which came from `encode` of
    // values of the same plain type; the buffers are distinct.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), bytes.len());
    }
    out
}

/// `len` elements of `dtype` for `rank`: small values, negative ones for
/// signed types, fractions for floats (so sums depend on the order). The
/// values repeat every [`PERIOD`] elements (a prime, so no chunk or block
/// size is a multiple of it), which keeps large inputs cheap to make.
pub(super) fn input(dtype: DataType, rank: usize, len: usize) -> Vec<u8> {
    let period = pattern(dtype, rank, PERIOD.min(len));
    let e = dtype.size_in_bytes();
    let mut out = Vec::with_capacity(len * e);
    while out.len() < len * e {
        let take = period.len().min(len * e - out.len());
        out.extend_from_slice(&period[..take]);
    }
    out
}

const PERIOD: usize = 4099;

fn pattern(dtype: DataType, rank: usize, len: usize) -> Vec<u8> {
    let base = |i: usize| ((i * 7 + i / 13 + rank * 3 + 1) % 13) as i64;
    let float = |i: usize| (base(i) - 6) as f64 * 0.37 + rank as f64 * 0.011;
    macro_rules! ints {
        ($t:ty, $shift:expr) => {
            encode(
                &(0..len)
                    .map(|i| (base(i) - $shift) as $t)
                    .collect::<Vec<$t>>(),
            )
        };
    }
    match dtype {
        DataType::F16 => encode(
            &(0..len)
                .map(|i| f16::from_f64(float(i)))
                .collect::<Vec<_>>(),
        ),
        DataType::BF16 => encode(
            &(0..len)
                .map(|i| bf16::from_f64(float(i)))
                .collect::<Vec<_>>(),
        ),
        DataType::F32 => encode(&(0..len).map(|i| float(i) as f32).collect::<Vec<_>>()),
        DataType::F64 => encode(&(0..len).map(float).collect::<Vec<_>>()),
        DataType::I8 => ints!(i8, 6),
        DataType::U8 => ints!(u8, 0),
        DataType::I16 => ints!(i16, 6),
        DataType::I32 => ints!(i32, 6),
        DataType::I64 => ints!(i64, 6),
        DataType::U32 => ints!(u32, 0),
        DataType::U64 => ints!(u64, 0),
        other => panic!("no inputs for {other:?}"),
    }
}

/// Element-wise `terms[0] op terms[1] op ...` in the vendor's semantics.
pub(super) fn reduce(dtype: DataType, op: ReduceOp, terms: &[Vec<u8>]) -> Vec<u8> {
    macro_rules! fold {
        ($t:ty, $acc:ty, $widen:expr, $narrow:expr, $sum:expr, $prod:expr, $min:expr, $max:expr) => {{
            let terms: Vec<Vec<$t>> = terms.iter().map(|t| decode::<$t>(t)).collect();
            let f = |a: $acc, b: $acc| -> $acc {
                match op {
                    ReduceOp::Sum => $sum(a, b),
                    ReduceOp::Prod => $prod(a, b),
                    ReduceOp::Min => $min(a, b),
                    ReduceOp::Max => $max(a, b),
                    other => panic!("no reference for {other:?}"),
                }
            };
            let out: Vec<$t> = (0..terms[0].len())
                .map(|i| {
                    let acc = terms
                        .iter()
                        .map(|t| $widen(t[i]))
                        .reduce(f)
                        .expect("a term");
                    $narrow(acc)
                })
                .collect();
            encode(&out)
        }};
    }
    macro_rules! int {
        ($t:ty) => {
            fold!(
                $t,
                $t,
                |x| x,
                |x| x,
                <$t>::wrapping_add,
                <$t>::wrapping_mul,
                Ord::min,
                Ord::max
            )
        };
    }
    macro_rules! float {
        ($t:ty, $acc:ty, $widen:expr, $narrow:expr) => {
            fold!(
                $t,
                $acc,
                $widen,
                $narrow,
                |a: $acc, b: $acc| a + b,
                |a: $acc, b: $acc| a * b,
                <$acc>::min,
                <$acc>::max
            )
        };
    }
    match dtype {
        DataType::F16 => float!(f16, f32, f16::to_f32, f16::from_f32),
        DataType::BF16 => float!(bf16, f32, bf16::to_f32, bf16::from_f32),
        DataType::F32 => float!(f32, f32, |x| x, |x| x),
        DataType::F64 => float!(f64, f64, |x| x, |x| x),
        DataType::I8 => int!(i8),
        DataType::U8 => int!(u8),
        DataType::I16 => int!(i16),
        DataType::I32 => int!(i32),
        DataType::I64 => int!(i64),
        DataType::U32 => int!(u32),
        DataType::U64 => int!(u64),
        other => panic!("no reference for {other:?}"),
    }
}
