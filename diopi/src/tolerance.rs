//! dipu-rs's tolerance policy for comparing device results with CPU
//! references (docs/tolerance.md), the same table as the adapters' Python
//! helper `adapters/dipu_tolerance.py`.
//!
//! A value passes when `|actual - expected| <= atol + rtol * |expected|`,
//! NaN matching NaN and an infinity only itself. Integer and bool results
//! have a zero tolerance: they must be equal. The table's absolute parts
//! are for data of unit size; [`Tolerance::scaled`] adapts them to terms of
//! another magnitude.
//!
//! ```
//! use dipu_diopi::tolerance::{assert_close, Tolerance};
//!
//! let t = Tolerance::of("float32", 64).unwrap();
//! assert!(t.atol > 1e-5 && t.rtol < 1e-4);
//! let expected = [1.0f32, 2.0, 3.0];
//! assert_close(&[1.0f32, 2.0, 3.000001], &expected, "float32", 1, "sum");
//! ```

use std::fmt;

/// `(atol, rtol)` of a result that went through one rounding in its dtype
/// (an elementwise op, a cast): PyTorch's defaults for its `assert_close`.
pub const BASE: [(&str, f64, f64); 6] = [
    ("float64", 1e-7, 1e-7),
    ("float32", 1e-5, 1.3e-6),
    ("bfloat16", 1e-5, 1.6e-2),
    ("float16", 1e-5, 1e-3),
    ("complex128", 1e-7, 1e-7),
    ("complex64", 1e-5, 1.3e-6),
];

/// The dtypes compared exactly: no rounding happens in them.
pub const EXACT: [&str; 9] = [
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
];

/// The bound for one comparison: `|actual - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub atol: f64,
    /// Part relative to the expected value.
    pub rtol: f64,
}

impl Tolerance {
    /// The policy's tolerance for a result of `dtype` (DIOPI's name,
    /// "float32") whose elements each sum at most `reduction_len` terms (1:
    /// elementwise; a chain of reductions adds up its lengths). Both parts
    /// grow as `sqrt(reduction_len)`; a reduction's absolute part is at
    /// least the dtype's relative precision. Zero for integer and bool
    /// dtypes; `None` for a dtype the policy does not know.
    pub fn of(dtype: &str, reduction_len: usize) -> Option<Tolerance> {
        if EXACT.contains(&dtype) {
            return Some(Tolerance::EXACT);
        }
        let &(_, mut atol, rtol) = BASE.iter().find(|(name, _, _)| *name == dtype)?;
        if reduction_len > 1 {
            atol = atol.max(rtol);
        }
        let growth = (reduction_len.max(1) as f64).sqrt();
        Some(Tolerance {
            atol: atol * growth,
            rtol: rtol * growth,
        })
    }

    /// The same tolerance for terms of magnitude about `scale` rather than
    /// 1 (an update of a trained parameter, say): the absolute part scales
    /// with them, the relative part stays.
    pub fn scaled(self, scale: f64) -> Tolerance {
        Tolerance {
            atol: self.atol * scale,
            rtol: self.rtol,
        }
    }

    /// Equality: the tolerance of integer and bool results.
    pub const EXACT: Tolerance = Tolerance {
        atol: 0.0,
        rtol: 0.0,
    };

    /// The largest `|actual - expected|` allowed at `expected`.
    pub fn bound(&self, expected: f64) -> f64 {
        self.atol + self.rtol * expected.abs()
    }

    /// Whether `actual` matches `expected`: within the bound, NaN for NaN,
    /// an infinity only for itself.
    pub fn accepts(&self, actual: f64, expected: f64) -> bool {
        if actual.is_nan() || expected.is_nan() {
            return actual.is_nan() && expected.is_nan();
        }
        if actual == expected {
            return true;
        }
        actual.is_finite()
            && expected.is_finite()
            && (actual - expected).abs() <= self.bound(expected)
    }

    /// Compares two slices element by element.
    pub fn check<A: Copy + Into<f64>, E: Copy + Into<f64>>(
        &self,
        actual: &[A],
        expected: &[E],
    ) -> Result<(), Mismatch> {
        let mut m = Mismatch {
            tolerance: *self,
            len: expected.len(),
            actual_len: actual.len(),
            count: 0,
            index: 0,
            actual: 0.0,
            expected: 0.0,
        };
        if actual.len() != expected.len() {
            return Err(m);
        }
        let mut worst = f64::NEG_INFINITY;
        for (k, (&a, &e)) in actual.iter().zip(expected).enumerate() {
            let (a, e): (f64, f64) = (a.into(), e.into());
            if self.accepts(a, e) {
                continue;
            }
            m.count += 1;
            let excess = match (a - e).abs() - self.bound(e) {
                x if x.is_finite() => x,
                _ => f64::INFINITY,
            };
            if excess > worst {
                worst = excess;
                (m.index, m.actual, m.expected) = (k, a, e);
            }
        }
        if m.count == 0 {
            Ok(())
        } else {
            Err(m)
        }
    }
}

/// Why a comparison failed: how many elements, and the worst one.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// The bound that was applied.
    pub tolerance: Tolerance,
    /// Elements expected.
    pub len: usize,
    /// Elements given (differs from `len` only for a length mismatch).
    pub actual_len: usize,
    /// Elements outside the bound.
    pub count: usize,
    /// Flat index of the element furthest outside it.
    pub index: usize,
    /// Its value.
    pub actual: f64,
    /// Its expected value.
    pub expected: f64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.actual_len != self.len {
            return write!(f, "{} elements, {} expected", self.actual_len, self.len);
        }
        let t = self.tolerance;
        write!(
            f,
            "{} of {} elements differ (atol {:e}, rtol {:e}); worst at index {}: actual {}, expected {}, |diff| {:e} > bound {:e}",
            self.count,
            self.len,
            t.atol,
            t.rtol,
            self.index,
            self.actual,
            self.expected,
            (self.actual - self.expected).abs(),
            t.bound(self.expected)
        )
    }
}

impl std::error::Error for Mismatch {}

/// The policy's `(atol, rtol)` for `dtype` and `reduction_len`; `None` for
/// a dtype it does not know.
pub fn tolerance(dtype: &str, reduction_len: usize) -> Option<(f64, f64)> {
    Tolerance::of(dtype, reduction_len).map(|t| (t.atol, t.rtol))
}

/// Panics with `msg`, the count, the worst element, its index and the bound
/// unless `actual` matches `expected` within the policy's tolerance for
/// `dtype` and `reduction_len` (a test's assertion).
#[track_caller]
pub fn assert_close<A: Copy + Into<f64>, E: Copy + Into<f64>>(
    actual: &[A],
    expected: &[E],
    dtype: &str,
    reduction_len: usize,
    msg: &str,
) {
    let t = Tolerance::of(dtype, reduction_len)
        .unwrap_or_else(|| panic!("{msg}: no tolerance for dtype {dtype}"));
    if let Err(m) = t.check(actual, expected) {
        panic!("{msg}: {dtype}, reduction_len {reduction_len}: {m}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_growth() {
        assert_eq!(tolerance("float32", 1), Some((1e-5, 1.3e-6)));
        assert_eq!(tolerance("int64", 1000), Some((0.0, 0.0)));
        assert_eq!(tolerance("bool", 1), Some((0.0, 0.0)));
        assert_eq!(tolerance("tfloat32", 1), None);
        let (a, r) = tolerance("float32", 16).unwrap();
        assert!((a - 4e-5).abs() < 1e-12 && (r - 5.2e-6).abs() < 1e-12);
        // A half-precision reduction's absolute part is its relative precision.
        let (a, r) = tolerance("float16", 4).unwrap();
        assert!((a - 2e-3).abs() < 1e-12 && (r - 2e-3).abs() < 1e-12);
        let t = Tolerance::of("float32", 4).unwrap().scaled(1e-3);
        assert!((t.atol - 2e-8).abs() < 1e-15 && (t.rtol - 2.6e-6).abs() < 1e-12);
    }

    #[test]
    fn special_values() {
        let t = Tolerance::of("float32", 1).unwrap();
        assert!(t.accepts(f64::NAN, f64::NAN));
        assert!(t.accepts(f64::INFINITY, f64::INFINITY));
        assert!(!t.accepts(f64::INFINITY, f64::NEG_INFINITY));
        assert!(!t.accepts(f64::NAN, 1.0));
        assert!(!t.accepts(1.0, f64::NAN));
        assert!(!t.accepts(f64::INFINITY, 1e30));
        assert!(Tolerance::EXACT.accepts(3.0, 3.0));
        assert!(!Tolerance::EXACT.accepts(3.0, 3.0000000001));
    }

    #[test]
    fn mismatch_names_the_worst_element() {
        let t = Tolerance::of("float32", 1).unwrap();
        let e = [1.0f32, 2.0, 3.0, 4.0];
        let m = t.check(&[1.0f32, 2.1, 3.0, 4.5], &e).unwrap_err();
        assert_eq!((m.count, m.index), (2, 3));
        let text = m.to_string();
        assert!(
            text.contains("2 of 4 elements") && text.contains("index 3"),
            "{text}"
        );
        assert!(
            t.check(&[1.0f32; 3], &e).is_err(),
            "a length mismatch fails"
        );
    }
}
