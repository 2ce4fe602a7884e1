//! Element-wise reductions over NCCL's data types, on byte buffers.

/// Bytes of one element of NCCL type `t` (`None`: no such type).
pub(crate) fn size_of(t: i32) -> Option<usize> {
    Some(match t {
        0 | 1 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => return None,
    })
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise.
            let mut e = 127 - 15 + 1;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let frac = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if frac != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = (frac | 0x80_0000) >> (1 - e);
        let half = (m >> 13) + u32::from((m >> 12) & 1 == 1 && (m & 0x2fff) != 0);
        return sign | half as u16;
    }
    let mut out = (e as u32) << 10 | (frac >> 13);
    let rest = frac & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && out & 1 == 1) {
        out += 1;
    }
    sign | out as u16
}

fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

fn f32_to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

macro_rules! fold_ints {
    ($ty:ty, $inputs:expr, $out:expr, $op:expr, $n:expr) => {{
        const W: usize = std::mem::size_of::<$ty>();
        for (i, chunk) in $out.chunks_exact_mut(W).enumerate() {
            let get = |b: &[u8]| <$ty>::from_ne_bytes(b[i * W..(i + 1) * W].try_into().unwrap());
            let mut acc = get($inputs[0]);
            for b in &$inputs[1..] {
                let x = get(b);
                acc = match $op {
                    0 | 4 => acc.wrapping_add(x),
                    1 => acc.wrapping_mul(x),
                    2 => acc.max(x),
                    _ => acc.min(x),
                };
            }
            if $op == 4 {
                acc /= $n as $ty;
            }
            chunk.copy_from_slice(&acc.to_ne_bytes());
        }
    }};
}

fn fold_floats(
    inputs: &[&[u8]],
    out: &mut [u8],
    op: i32,
    w: usize,
    get: impl Fn(&[u8]) -> f64,
    put: impl Fn(f64, &mut [u8]),
) {
    for (i, chunk) in out.chunks_exact_mut(w).enumerate() {
        let mut acc = get(&inputs[0][i * w..(i + 1) * w]);
        for b in &inputs[1..] {
            let x = get(&b[i * w..(i + 1) * w]);
            acc = match op {
                0 | 4 => acc + x,
                1 => acc * x,
                2 => acc.max(x),
                _ => acc.min(x),
            };
        }
        if op == 4 {
            acc /= inputs.len() as f64;
        }
        put(acc, chunk);
    }
}

/// Float32 (the common case) over aligned buffers, a whole input at a
/// time, with the same arithmetic as [`fold_floats`] (in f64, rounded
/// once); `false` if a buffer is not aligned.
fn fold_f32(inputs: &[&[u8]], out: &mut [u8], op: i32) -> bool {
    fn floats(b: &[u8]) -> Option<&[f32]> {
        // SAFETY: every bit pattern is an f32; only the aligned middle is used.
        let (head, mid, tail) = unsafe { b.align_to::<f32>() };
        (head.is_empty() && tail.is_empty()).then_some(mid)
    }
    let Some(ins) = inputs.iter().map(|b| floats(b)).collect::<Option<Vec<_>>>() else {
        return false;
    };
    // SAFETY: as above, written as f32s.
    let (head, outs, tail) = unsafe { out.align_to_mut::<f32>() };
    if !head.is_empty() || !tail.is_empty() || ins.is_empty() {
        return false;
    }
    let len = outs.len();
    let mut acc: Vec<f64> = vec![0.0; len];
    for i in 0..len {
        acc[i] = f64::from(ins[0][i]);
    }
    for input in &ins[1..] {
        // One loop per operator, the operator chosen once per input.
        match op {
            0 | 4 => (0..len).for_each(|i| acc[i] += f64::from(input[i])),
            1 => (0..len).for_each(|i| acc[i] *= f64::from(input[i])),
            2 => (0..len).for_each(|i| acc[i] = acc[i].max(f64::from(input[i]))),
            _ => (0..len).for_each(|i| acc[i] = acc[i].min(f64::from(input[i]))),
        }
    }
    let n = ins.len() as f64;
    for i in 0..len {
        outs[i] = if op == 4 {
            (acc[i] / n) as f32
        } else {
            acc[i] as f32
        };
    }
    true
}

/// Reduces `inputs` (equal lengths) element-wise with NCCL operator `op`
/// (sum, prod, max, min, avg) of type `t` into `out`.
pub(crate) fn reduce(inputs: &[&[u8]], out: &mut [u8], t: i32, op: i32) {
    let n = inputs.len();
    if t == 7 && fold_f32(inputs, out, op) {
        return;
    }
    match t {
        0 => fold_ints!(i8, inputs, out, op, n),
        1 => fold_ints!(u8, inputs, out, op, n),
        2 => fold_ints!(i32, inputs, out, op, n),
        3 => fold_ints!(u32, inputs, out, op, n),
        4 => fold_ints!(i64, inputs, out, op, n),
        5 => fold_ints!(u64, inputs, out, op, n),
        6 => fold_floats(
            inputs,
            out,
            op,
            2,
            |b| f64::from(f16_to_f32(u16::from_ne_bytes([b[0], b[1]]))),
            |v, o| o.copy_from_slice(&f32_to_f16(v as f32).to_ne_bytes()),
        ),
        7 => fold_floats(
            inputs,
            out,
            op,
            4,
            |b| f64::from(f32::from_ne_bytes(b.try_into().unwrap())),
            |v, o| o.copy_from_slice(&(v as f32).to_ne_bytes()),
        ),
        8 => fold_floats(
            inputs,
            out,
            op,
            8,
            |b| f64::from_ne_bytes(b.try_into().unwrap()),
            |v, o| o.copy_from_slice(&v.to_ne_bytes()),
        ),
        _ => fold_floats(
            inputs,
            out,
            op,
            2,
            |b| f64::from(bf16_to_f32(u16::from_ne_bytes([b[0], b[1]]))),
            |v, o| o.copy_from_slice(&f32_to_bf16(v as f32).to_ne_bytes()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_round_trip() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 0.000_061_035_156, 3.140_625] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "{v}");
            assert_eq!(
                bf16_to_f32(f32_to_bf16(v)).to_bits() >> 16,
                f32_to_bf16(v) as u32
            );
        }
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
    }

    #[test]
    fn reductions() {
        let a: Vec<u8> = [1i32, -5, 7].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let b: Vec<u8> = [2i32, 3, -7].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut out = vec![0u8; 12];
        reduce(&[&a, &b], &mut out, 2, 0);
        assert_eq!(
            out,
            [3i32, -2, 0]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>()
        );
        reduce(&[&a, &b], &mut out, 2, 3);
        assert_eq!(
            out,
            [1i32, -5, -7]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>()
        );
        let x: Vec<u8> = [1.0f32, 4.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let y: Vec<u8> = [3.0f32, 8.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut out = vec![0u8; 8];
        reduce(&[&x, &y], &mut out, 7, 4);
        assert_eq!(
            out,
            [2.0f32, 6.0]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect::<Vec<_>>()
        );
    }
}
