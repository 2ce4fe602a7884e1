//! CNCL's data types and reductions over byte buffers.

use dipu_fakekit::reduce::{fold_f32, Fold};
use half::{bf16, f16};

/// Bytes per element of a `cnclDataType_t`; `None` for a type CNCL lacks
/// (there is no 64-bit float).
pub(crate) fn size_of(dtype: i32) -> Option<usize> {
    Some(match dtype {
        0x20 | 0x30 => 1,
        0x10 | 0x11 | 0x21 | 0x31 => 2,
        0x12 | 0x22 | 0x32 => 4,
        0x23 | 0x33 => 8,
        _ => return None,
    })
}

macro_rules! combine {
    ($t:ty, $acc:expr, $other:expr, $f:expr) => {{
        let n = std::mem::size_of::<$t>();
        for (a, b) in $acc.chunks_exact_mut(n).zip($other.chunks_exact(n)) {
            let x = <$t>::from_ne_bytes(a.try_into().expect("element"));
            let y = <$t>::from_ne_bytes(b.try_into().expect("element"));
            a.copy_from_slice(&$f(x, y).to_ne_bytes());
        }
    }};
}

macro_rules! int_op {
    ($t:ty, $op:expr) => {
        match $op {
            0 => |x: $t, y: $t| x.wrapping_add(y),
            1 => |x: $t, y: $t| x.wrapping_mul(y),
            2 => |x: $t, y: $t| x.max(y),
            _ => |x: $t, y: $t| x.min(y),
        }
    };
}

macro_rules! float_op {
    ($t:ty, $op:expr) => {
        match $op {
            0 => |x: $t, y: $t| x + y,
            1 => |x: $t, y: $t| x * y,
            2 => |x: $t, y: $t| if y > x { y } else { x },
            _ => |x: $t, y: $t| if y < x { y } else { x },
        }
    };
}

/// `acc[i] = op(acc[i], other[i])` for every element; `false` for an
/// unknown type or operator (`cnclSum` 0, `cnclProd` 1, `cnclMax` 2,
/// `cnclMin` 3; there is no average).
pub(crate) fn combine(dtype: i32, op: i32, acc: &mut [u8], other: &[u8]) -> bool {
    if !(0..=3).contains(&op) {
        return false;
    }
    let fold = [Fold::Sum, Fold::Prod, Fold::Max, Fold::Min][op as usize];
    if dtype == 0x12 && fold_f32(fold, acc, other) {
        return true;
    }
    match dtype {
        0x10 => combine!(f16, acc, other, float_op!(f16, op)),
        0x11 => combine!(bf16, acc, other, float_op!(bf16, op)),
        0x12 => combine!(f32, acc, other, float_op!(f32, op)),
        0x20 => combine!(i8, acc, other, int_op!(i8, op)),
        0x21 => combine!(i16, acc, other, int_op!(i16, op)),
        0x22 => combine!(i32, acc, other, int_op!(i32, op)),
        0x23 => combine!(i64, acc, other, int_op!(i64, op)),
        0x30 => combine!(u8, acc, other, int_op!(u8, op)),
        0x31 => combine!(u16, acc, other, int_op!(u16, op)),
        0x32 => combine!(u32, acc, other, int_op!(u32, op)),
        0x33 => combine!(u64, acc, other, int_op!(u64, op)),
        _ => return false,
    }
    true
}
