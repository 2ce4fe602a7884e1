//! Rust mirrors of the DIOPI 1.0 C types (`include/diopi/diopirt.h`).
//!
//! Enums are plain `i32` constants: a C enum may carry any value and a Rust
//! enum with an unknown discriminant would be undefined behaviour.

use std::ffi::c_void;

/// `diopiDtype_t` values.
pub mod dtype {
    /// int8
    pub const I8: i32 = 0;
    /// uint8
    pub const U8: i32 = 1;
    /// int16
    pub const I16: i32 = 2;
    /// uint16
    pub const U16: i32 = 3;
    /// int32
    pub const I32: i32 = 4;
    /// uint32
    pub const U32: i32 = 5;
    /// int64
    pub const I64: i32 = 6;
    /// uint64
    pub const U64: i32 = 7;
    /// float16
    pub const F16: i32 = 8;
    /// float32
    pub const F32: i32 = 9;
    /// float64
    pub const F64: i32 = 10;
    /// bool (one byte, 0 or 1)
    pub const BOOL: i32 = 11;
    /// bfloat16
    pub const BF16: i32 = 12;

    /// The DIOPI name of a dtype, for error messages.
    pub fn name(d: i32) -> &'static str {
        match d {
            I8 => "int8",
            U8 => "uint8",
            I16 => "int16",
            U16 => "uint16",
            I32 => "int32",
            U32 => "uint32",
            I64 => "int64",
            U64 => "uint64",
            F16 => "float16",
            F32 => "float32",
            F64 => "float64",
            BOOL => "bool",
            BF16 => "bfloat16",
            13 => "tfloat32",
            14 => "complex32",
            15 => "complex64",
            16 => "complex128",
            _ => "unknown",
        }
    }

    /// Bytes per element of a supported dtype, `None` for the others.
    pub fn size(d: i32) -> Option<usize> {
        match d {
            I8 | U8 | BOOL => Some(1),
            I16 | U16 | F16 | BF16 => Some(2),
            I32 | U32 | F32 => Some(4),
            I64 | U64 | F64 => Some(8),
            _ => None,
        }
    }

    /// Whether `d` is a floating-point dtype.
    pub fn is_float(d: i32) -> bool {
        matches!(d, F16 | F32 | F64 | BF16)
    }
}

/// `diopiError_t` values this library returns.
pub mod error {
    /// diopiSuccess
    pub const SUCCESS: i32 = 0;
    /// diopiErrorOccurred
    pub const ERROR_OCCURRED: i32 = 1;
    /// diopiNoImplement
    pub const NO_IMPLEMENT: i32 = 13;
    /// diopiDtypeNotSupported
    pub const DTYPE_NOT_SUPPORTED: i32 = 1000;
}

/// `diopiReduction_t` values.
pub mod reduction {
    /// ReductionNone
    pub const NONE: i32 = 0;
    /// ReductionMean
    pub const MEAN: i32 = 1;
    /// ReductionSum
    pub const SUM: i32 = 2;
}

/// `diopiRoundMode_t` values.
pub mod round_mode {
    /// RoundModeNone: true division
    pub const NONE: i32 = 0;
    /// RoundModeTrunc
    pub const TRUNC: i32 = 1;
    /// RoundModeFloor
    pub const FLOOR: i32 = 2;
}

/// `diopiDevice_t`: host memory.
pub const DEVICE_HOST: i32 = 0;
/// `diopiDevice_t`: device memory.
pub const DEVICE_DEVICE: i32 = 1;

/// `diopiSize_t`: a borrowed list of int64, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DiopiSize {
    /// First element (NULL for the empty list).
    pub data: *const i64,
    /// Number of elements.
    pub len: i64,
}

impl DiopiSize {
    /// The elements as a vector (empty for NULL or a non-positive length).
    ///
    /// # Safety
    /// `data` must point at `len` readable int64 when non-NULL.
    pub unsafe fn to_vec(&self) -> Vec<i64> {
        if self.data.is_null() || self.len <= 0 {
            return Vec::new();
        }
        // SAFETY: the caller guarantees `len` readable elements at `data`.
        unsafe { std::slice::from_raw_parts(self.data, self.len as usize) }.to_vec()
    }
}

/// The value union of `diopiScalar_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ScalarValue {
    /// Valid when the stype is a floating type.
    pub fval: f64,
    /// Valid otherwise.
    pub ival: i64,
}

/// `diopiScalar_t`: `{stype, 4 bytes padding, union{double, int64}}`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DiopiScalar {
    /// A `diopiDtype_t` value.
    pub stype: i32,
    /// The value.
    pub value: ScalarValue,
}

/// A scalar operand read out of a `diopiScalar_t`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A floating-point value.
    Float(f64),
    /// An integer (or bool) value.
    Int(i64),
}

impl Scalar {
    /// The value as f64.
    pub fn f64(self) -> f64 {
        match self {
            Scalar::Float(v) => v,
            Scalar::Int(v) => v as f64,
        }
    }
    /// The value as i64 (floats truncate).
    pub fn i64(self) -> i64 {
        match self {
            Scalar::Float(v) => v as i64,
            Scalar::Int(v) => v,
        }
    }
    /// Whether the value is a float.
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Float(_))
    }
}

impl DiopiScalar {
    /// The Rust value of this scalar.
    pub fn get(&self) -> Scalar {
        if dtype::is_float(self.stype) {
            // SAFETY: fval is the member a float stype selects; every bit
            // pattern is a valid f64.
            Scalar::Float(unsafe { self.value.fval })
        } else {
            // SAFETY: every bit pattern is a valid i64.
            Scalar::Int(unsafe { self.value.ival })
        }
    }
}

/// Opaque `struct diopiTensor`.
#[repr(C)]
pub struct DiopiTensor {
    _private: [u8; 0],
}
/// Opaque `struct diopiContext`.
#[repr(C)]
pub struct DiopiContext {
    _private: [u8; 0],
}
/// Opaque `struct diopiGenerator`.
#[repr(C)]
pub struct DiopiGenerator {
    _private: [u8; 0],
}

/// `diopiTensorHandle_t`.
pub type TensorHandle = *mut DiopiTensor;
/// `diopiConstTensorHandle_t`.
pub type ConstTensorHandle = *const DiopiTensor;
/// `diopiContextHandle_t`.
pub type ContextHandle = *mut DiopiContext;
/// `diopiGeneratorHandle_t`.
pub type GeneratorHandle = *mut DiopiGenerator;
/// `diopiStreamHandle_t`.
pub type StreamHandle = *mut c_void;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_c() {
        assert_eq!(std::mem::size_of::<DiopiSize>(), 16);
        assert_eq!(std::mem::size_of::<DiopiScalar>(), 16);
        assert_eq!(std::mem::align_of::<DiopiScalar>(), 8);
    }

    #[test]
    fn scalar_reads_member_by_stype() {
        let f = DiopiScalar {
            stype: dtype::F64,
            value: ScalarValue { fval: 2.5 },
        };
        assert_eq!(f.get(), Scalar::Float(2.5));
        let i = DiopiScalar {
            stype: dtype::I64,
            value: ScalarValue { ival: -3 },
        };
        assert_eq!(i.get(), Scalar::Int(-3));
        assert_eq!(i.get().f64(), -3.0);
    }
}
