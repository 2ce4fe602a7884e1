//! Element-wise reductions of HCCL's types on host memory.

use dipu_fakekit::reduce::{fold_f32, Fold};
use half::{bf16, f16};

/// An HCCL operator (`HCCL_REDUCE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Sum,
    Prod,
    Max,
    Min,
}

impl Op {
    /// From `HcclReduceOp`; HCCL has no average.
    pub(crate) fn from_code(op: i32) -> Option<Op> {
        Some(match op {
            0 => Op::Sum,
            1 => Op::Prod,
            2 => Op::Max,
            3 => Op::Min,
            _ => return None,
        })
    }
}

/// Bytes of one element of `HcclDataType` `dtype`, if the fake knows it.
pub(crate) fn size_of(dtype: i32) -> Option<usize> {
    Some(match dtype {
        0 | 7 => 1,
        1 | 3 | 8 | 11 => 2,
        2 | 4 | 9 => 4,
        5 | 6 | 10 => 8,
        _ => return None,
    })
}

macro_rules! fold {
    ($t:ty, $acc:expr, $src:expr, $op:expr) => {{
        let n = $acc.len() / std::mem::size_of::<$t>();
        for i in 0..n {
            let at = i * std::mem::size_of::<$t>();
            let a =
                <$t>::from_ne_bytes($acc[at..at + std::mem::size_of::<$t>()].try_into().unwrap());
            let b =
                <$t>::from_ne_bytes($src[at..at + std::mem::size_of::<$t>()].try_into().unwrap());
            let r = match $op {
                Op::Sum => a + b,
                Op::Prod => a * b,
                Op::Max => {
                    if b > a {
                        b
                    } else {
                        a
                    }
                }
                Op::Min => {
                    if b < a {
                        b
                    } else {
                        a
                    }
                }
            };
            $acc[at..at + std::mem::size_of::<$t>()].copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

/// `acc = acc op src`, element-wise, for `dtype` (integers wrap).
pub(crate) fn combine(dtype: i32, op: Op, acc: &mut [u8], src: &[u8]) {
    let fold = match op {
        Op::Sum => Fold::Sum,
        Op::Prod => Fold::Prod,
        Op::Max => Fold::Max,
        Op::Min => Fold::Min,
    };
    if dtype == 4 && fold_f32(fold, acc, src) {
        return;
    }
    match dtype {
        0 => fold!(W<i8>, acc, src, op),
        1 => fold!(W<i16>, acc, src, op),
        2 => fold!(W<i32>, acc, src, op),
        5 => fold!(W<i64>, acc, src, op),
        6 => fold!(W<u64>, acc, src, op),
        7 => fold!(W<u8>, acc, src, op),
        8 => fold!(W<u16>, acc, src, op),
        9 => fold!(W<u32>, acc, src, op),
        3 => fold!(f16, acc, src, op),
        11 => fold!(bf16, acc, src, op),
        4 => fold!(f32, acc, src, op),
        10 => fold!(f64, acc, src, op),
        _ => {}
    }
}

/// Wrapping integers with the operations `fold!` uses.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct W<T>(T);

macro_rules! wrapping {
    ($($t:ty),*) => {$(
        impl W<$t> {
            fn from_ne_bytes(b: [u8; std::mem::size_of::<$t>()]) -> Self {
                W(<$t>::from_ne_bytes(b))
            }
            fn to_ne_bytes(self) -> [u8; std::mem::size_of::<$t>()] {
                self.0.to_ne_bytes()
            }
        }
        impl std::ops::Add for W<$t> {
            type Output = Self;
            fn add(self, o: Self) -> Self {
                W(self.0.wrapping_add(o.0))
            }
        }
        impl std::ops::Mul for W<$t> {
            type Output = Self;
            fn mul(self, o: Self) -> Self {
                W(self.0.wrapping_mul(o.0))
            }
        }
    )*};
}

wrapping!(i8, i16, i32, i64, u8, u16, u32, u64);
