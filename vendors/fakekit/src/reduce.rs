//! A fast path for the reduction every fake does most: float32, in place,
//! one input at a time (`acc[i] = acc[i] op src[i]`), with the operator
//! chosen once per buffer instead of once per element.

/// An element-wise operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// `a + b`.
    Sum,
    /// `a * b`.
    Prod,
    /// `b` if `b > a`, else `a`.
    Max,
    /// `b` if `b < a`, else `a`.
    Min,
}

/// The f32s of `b` when it is 4-aligned and a whole number of them.
fn floats(b: &[u8]) -> Option<&[f32]> {
    // SAFETY: every bit pattern is an f32; only the aligned middle is used.
    let (head, mid, tail) = unsafe { b.align_to::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

/// `acc[i] = acc[i] op src[i]` over f32s; `false` (nothing done) unless
/// both buffers are 4-aligned whole f32s of the same length.
pub fn fold_f32(op: Fold, acc: &mut [u8], src: &[u8]) -> bool {
    let Some(src) = floats(src) else {
        return false;
    };
    // SAFETY: as in `floats`, and written as f32s.
    let (head, acc, tail) = unsafe { acc.align_to_mut::<f32>() };
    if !head.is_empty() || !tail.is_empty() || acc.len() != src.len() {
        return false;
    }
    let n = acc.len();
    match op {
        Fold::Sum => (0..n).for_each(|i| acc[i] += src[i]),
        Fold::Prod => (0..n).for_each(|i| acc[i] *= src[i]),
        Fold::Max => (0..n).for_each(|i| {
            if src[i] > acc[i] {
                acc[i] = src[i];
            }
        }),
        Fold::Min => (0..n).for_each(|i| {
            if src[i] < acc[i] {
                acc[i] = src[i];
            }
        }),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|f| f.to_ne_bytes()).collect()
    }

    #[test]
    fn each_operator_and_a_misaligned_buffer() {
        let a = [1.0f32, -2.0, 3.0, f32::NAN];
        let b = [4.0f32, 5.0, -6.0, 1.0];
        for (op, want) in [
            (Fold::Sum, [5.0f32, 3.0, -3.0, f32::NAN]),
            (Fold::Prod, [4.0, -10.0, -18.0, f32::NAN]),
            (Fold::Max, [4.0, 5.0, 3.0, f32::NAN]),
            (Fold::Min, [1.0, -2.0, -6.0, f32::NAN]),
        ] {
            let mut acc = bytes(&a);
            assert!(fold_f32(op, &mut acc, &bytes(&b)));
            let got: Vec<u32> = acc
                .chunks(4)
                .map(|c| f32::from_ne_bytes(c.try_into().unwrap()).to_bits())
                .collect();
            let want: Vec<u32> = want.iter().map(|f| f.to_bits()).collect();
            assert_eq!(got, want, "{op:?}");
        }
        // A heap buffer is 4-aligned, so one byte in is not.
        let mut acc = bytes(&[0.0; 5]);
        assert!(
            !fold_f32(Fold::Sum, &mut acc[1..17], &bytes(&b)),
            "misaligned"
        );
        assert!(
            !fold_f32(Fold::Sum, &mut acc[..12], &bytes(&b)),
            "lengths differ"
        );
    }
}
