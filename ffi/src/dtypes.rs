//! The element types of the C ABI beyond the vendor's: bool and complex,
//! mapped onto vendor types as ProcessGroupNCCL maps them (bool as bytes,
//! with SUM as MAX and PROD as MIN; complex as pairs of reals, for the
//! operators that act on the parts separately).

use dipu_deviceapi::{DataType, ReduceOp};
use dipu_runtime::{Error, ErrorKind, Result};

use crate::process_group::{dipu_dtype, dipu_reduce_op};

/// bool (1 byte, 0 or 1): reduced as an unsigned byte, SUM as MAX (logical
/// or) and PROD as MIN (logical and); AVG is rejected.
pub const DIPU_DTYPE_BOOL: dipu_dtype = 11;
/// complex64 (two f32): moved as 2 f32 per element; only SUM and AVG reduce it.
pub const DIPU_DTYPE_C64: dipu_dtype = 12;
/// complex128 (two f64): moved as 2 f64 per element; only SUM and AVG reduce it.
pub const DIPU_DTYPE_C128: dipu_dtype = 13;

/// How a C element type travels: as `per` elements of the vendor's `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wire {
    /// The C code, for messages.
    code: dipu_dtype,
    pub(crate) dtype: DataType,
    pub(crate) per: usize,
}

/// The C name of an element type code.
fn name(code: dipu_dtype) -> String {
    match code {
        DIPU_DTYPE_BOOL => "bool".into(),
        DIPU_DTYPE_C64 => "complex64".into(),
        DIPU_DTYPE_C128 => "complex128".into(),
        code => DataType::from_code(code).map_or(code.to_string(), |t| format!("{t:?}")),
    }
}

/// The wire form of a `dipu_dtype`, or `InvalidArgument`.
pub(crate) fn data_type(code: dipu_dtype) -> Result<Wire> {
    let (dtype, per) = match code {
        DIPU_DTYPE_BOOL => (DataType::U8, 1),
        DIPU_DTYPE_C64 => (DataType::F32, 2),
        DIPU_DTYPE_C128 => (DataType::F64, 2),
        code => match DataType::from_code(code) {
            Some(t) => (t, 1),
            None => {
                return Err(Error::invalid_argument(format!(
                    "{code} is not an element type (DIPU_DTYPE_F16..DIPU_DTYPE_C128)"
                )))
            }
        },
    };
    Ok(Wire { code, dtype, per })
}

impl Wire {
    /// The operator the vendor runs for `op` on this type: `InvalidArgument`
    /// for an unknown code, `Unsupported` naming both for a combination that
    /// has no meaning here.
    pub(crate) fn reduce(self, op: dipu_reduce_op) -> Result<ReduceOp> {
        let r = ReduceOp::from_code(op).ok_or_else(|| {
            Error::invalid_argument(format!(
                "{op} is not a reduce operator (DIPU_REDUCE_SUM..DIPU_REDUCE_AVG)"
            ))
        })?;
        let mapped = match (self.code, r) {
            (DIPU_DTYPE_BOOL, ReduceOp::Sum) => Some(ReduceOp::Max),
            (DIPU_DTYPE_BOOL, ReduceOp::Prod) => Some(ReduceOp::Min),
            (DIPU_DTYPE_BOOL, ReduceOp::Avg) => None,
            (DIPU_DTYPE_C64 | DIPU_DTYPE_C128, ReduceOp::Sum | ReduceOp::Avg) => Some(r),
            (DIPU_DTYPE_C64 | DIPU_DTYPE_C128, _) => None,
            _ => Some(r),
        };
        mapped.ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!(
                    "reduce operator {r:?} is not supported on {} elements",
                    name(self.code)
                ),
            )
        })
    }

    /// `count` elements of the C type in vendor elements.
    pub(crate) fn count(self, count: usize, what: &str) -> Result<usize> {
        count
            .checked_mul(self.per)
            .ok_or_else(|| Error::invalid_argument(format!("{what}: {count} elements overflow")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bool_and_complex_map_as_nccl_does() {
        let b = data_type(DIPU_DTYPE_BOOL).unwrap();
        assert_eq!((b.dtype, b.per), (DataType::U8, 1));
        assert_eq!(b.reduce(0).unwrap(), ReduceOp::Max);
        assert_eq!(b.reduce(1).unwrap(), ReduceOp::Min);
        assert_eq!(b.reduce(2).unwrap(), ReduceOp::Min);
        assert_eq!(b.reduce(3).unwrap(), ReduceOp::Max);
        let e = b.reduce(4).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(
            e.message().contains("Avg") && e.message().contains("bool"),
            "{e}"
        );

        let c = data_type(DIPU_DTYPE_C128).unwrap();
        assert_eq!((c.dtype, c.per), (DataType::F64, 2));
        assert_eq!(c.count(3, "buf").unwrap(), 6);
        assert_eq!(c.reduce(0).unwrap(), ReduceOp::Sum);
        assert_eq!(c.reduce(4).unwrap(), ReduceOp::Avg);
        let e = data_type(DIPU_DTYPE_C64).unwrap().reduce(3).unwrap_err();
        assert!(
            e.message().contains("Max") && e.message().contains("complex64"),
            "{e}"
        );
        assert!(c.count(usize::MAX, "buf").is_err());

        let f = data_type(2).unwrap();
        assert_eq!((f.dtype, f.per), (DataType::F32, 1));
        assert_eq!(f.reduce(4).unwrap(), ReduceOp::Avg);
        assert!(data_type(14).is_err() && data_type(-1).is_err());
        assert_eq!(f.reduce(5).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}
