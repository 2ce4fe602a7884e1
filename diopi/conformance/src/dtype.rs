//! The element types the runner uses, with their DIOPI codes, byte images
//! and diopi_test's tolerances.

use half::{bf16, f16};

/// An element type of a test tensor (a subset of `diopiDtype_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dtype {
    /// `diopi_dtype_bool` (11), one byte 0/1.
    Bool,
    /// `diopi_dtype_uint8` (1).
    U8,
    /// `diopi_dtype_int32` (4).
    I32,
    /// `diopi_dtype_int64` (6).
    I64,
    /// `diopi_dtype_float16` (8).
    F16,
    /// `diopi_dtype_bfloat16` (12).
    Bf16,
    /// `diopi_dtype_float32` (9).
    F32,
    /// `diopi_dtype_float64` (10).
    F64,
}

impl Dtype {
    /// The `diopiDtype_t` value.
    pub(crate) fn code(self) -> i32 {
        match self {
            Dtype::Bool => 11,
            Dtype::U8 => 1,
            Dtype::I32 => 4,
            Dtype::I64 => 6,
            Dtype::F16 => 8,
            Dtype::Bf16 => 12,
            Dtype::F32 => 9,
            Dtype::F64 => 10,
        }
    }

    /// The type of a `diopiDtype_t` value, if the runner knows it.
    pub(crate) fn from_code(code: i32) -> Option<Dtype> {
        [
            Dtype::Bool,
            Dtype::U8,
            Dtype::I32,
            Dtype::I64,
            Dtype::F16,
            Dtype::Bf16,
            Dtype::F32,
            Dtype::F64,
        ]
        .into_iter()
        .find(|d| d.code() == code)
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::F64 => 8,
        }
    }

    /// The name used in reports (`float32`, ...).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "bool",
            Dtype::U8 => "uint8",
            Dtype::I32 => "int32",
            Dtype::I64 => "int64",
            Dtype::F16 => "float16",
            Dtype::Bf16 => "bfloat16",
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
        }
    }

    /// Whether it is a floating type.
    pub(crate) fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::F64)
    }

    /// diopi_test's default `(atol, rtol)`: 1e-5 both, 1e-2/5e-2 for half
    /// types; integer and bool results must be exact.
    pub(crate) fn tolerance(self) -> (f64, f64) {
        match self {
            Dtype::F16 | Dtype::Bf16 => (1e-2, 5e-2),
            Dtype::F32 | Dtype::F64 => (1e-5, 1e-5),
            _ => (0.0, 0.0),
        }
    }

    /// `v` as this type would hold it (rounded to its precision, truncated
    /// toward zero and wrapped for integers, 0/1 for bool).
    pub(crate) fn round(self, v: f64) -> f64 {
        match self {
            Dtype::Bool => f64::from(u8::from(v != 0.0)),
            Dtype::U8 => f64::from(v as i64 as u8),
            Dtype::I32 => f64::from(v as i64 as i32),
            Dtype::I64 => v as i64 as f64,
            Dtype::F16 => f16::from_f64(v).to_f64(),
            Dtype::Bf16 => bf16::from_f64(v).to_f64(),
            Dtype::F32 => f64::from(v as f32),
            Dtype::F64 => v,
        }
    }

    /// Appends the little-endian image of `v` to `out`.
    pub(crate) fn encode(self, v: f64, out: &mut Vec<u8>) {
        match self {
            Dtype::Bool => out.push(u8::from(v != 0.0)),
            Dtype::U8 => out.push(v as i64 as u8),
            Dtype::I32 => out.extend_from_slice(&(v as i64 as i32).to_le_bytes()),
            Dtype::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
            Dtype::F16 => out.extend_from_slice(&f16::from_f64(v).to_bits().to_le_bytes()),
            Dtype::Bf16 => out.extend_from_slice(&bf16::from_f64(v).to_bits().to_le_bytes()),
            Dtype::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            Dtype::F64 => out.extend_from_slice(&v.to_le_bytes()),
        }
    }

    /// Reads the element whose image starts at `b` (at least
    /// [`Dtype::size`] bytes).
    pub(crate) fn decode(self, b: &[u8]) -> f64 {
        let two = || [b[0], b[1]];
        let four = || [b[0], b[1], b[2], b[3]];
        let eight = || [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        match self {
            Dtype::Bool | Dtype::U8 => f64::from(b[0]),
            Dtype::I32 => f64::from(i32::from_le_bytes(four())),
            Dtype::I64 => i64::from_le_bytes(eight()) as f64,
            Dtype::F16 => f16::from_bits(u16::from_le_bytes(two())).to_f64(),
            Dtype::Bf16 => bf16::from_bits(u16::from_le_bytes(two())).to_f64(),
            Dtype::F32 => f64::from(f32::from_le_bytes(four())),
            Dtype::F64 => f64::from_le_bytes(eight()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_round_trip() {
        for dt in [
            Dtype::Bool,
            Dtype::U8,
            Dtype::I32,
            Dtype::I64,
            Dtype::F16,
            Dtype::Bf16,
            Dtype::F32,
            Dtype::F64,
        ] {
            let mut b = Vec::new();
            dt.encode(1.0, &mut b);
            assert_eq!(b.len(), dt.size(), "{}", dt.name());
            assert_eq!(dt.decode(&b), 1.0, "{}", dt.name());
        }
        let mut b = Vec::new();
        Dtype::F16.encode(1.5, &mut b);
        assert_eq!(b, [0x00, 0x3e]);
        assert_eq!(Dtype::Bf16.round(1.0 + 1.0 / 512.0), 1.0);
        assert_eq!(Dtype::I64.round(-2.7), -2.0);
    }
}
