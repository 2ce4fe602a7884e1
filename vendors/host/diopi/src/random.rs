//! Random kernels on Philox4x32-10: element `i` of a call draws from the
//! counter (i / 4, offset) under the key `seed`, so a seed and offset
//! taken from the runtime's generator repeat a run exactly.

use crate::elementwise::kind_of;
use crate::view::{read, with_out, write, Num, TView};

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32 with 10 rounds.
pub fn philox(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for r in 0..10 {
        if r > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// [`philox`] on `L` counters at once (one per lane), the same key: the
/// loop over lanes vectorizes.
#[inline(always)]
fn philox_lanes<const L: usize>(mut c: [[u32; L]; 4], mut k: [u32; 2]) -> [[u32; L]; 4] {
    for r in 0..10 {
        if r > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let mut n = [[0u32; L]; 4];
        for l in 0..L {
            let p0 = (M0 as u64) * (c[0][l] as u64);
            let p1 = (M1 as u64) * (c[2][l] as u64);
            n[0][l] = ((p1 >> 32) as u32) ^ c[1][l] ^ k[0];
            n[1][l] = p1 as u32;
            n[2][l] = ((p0 >> 32) as u32) ^ c[3][l] ^ k[1];
            n[3][l] = p0 as u32;
        }
        c = n;
    }
    c
}

/// The 53 bits of [`Stream::uniform`] made of two words.
#[inline(always)]
fn bits53(a: u32, b: u32) -> u64 {
    ((a as u64) << 21) ^ (b as u64 >> 11)
}

/// A counter-based stream of random words for one kernel call.
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    /// Generator seed (the key).
    pub seed: u64,
    /// Generator offset (the high counter words).
    pub offset: u64,
}

impl Stream {
    fn block(&self, b: u64) -> [u32; 4] {
        philox(
            [
                b as u32,
                (b >> 32) as u32,
                self.offset as u32,
                (self.offset >> 32) as u32,
            ],
            [self.seed as u32, (self.seed >> 32) as u32],
        )
    }
    /// `out[j]` = the 53 random bits of `self.uniform(first + j)` (the
    /// uniform is `out[j] * 2^-53`) for an even `first`, eight Philox
    /// blocks at a time.
    pub fn bits53_into(&self, first: u64, out: &mut [u64]) {
        const L: usize = 8;
        debug_assert!(first % 2 == 0);
        let key = [self.seed as u32, (self.seed >> 32) as u32];
        let mut b0 = first / 2;
        for chunk in out.chunks_mut(2 * L) {
            let c: [[u32; L]; 4] = [
                std::array::from_fn(|l| (b0 + l as u64) as u32),
                std::array::from_fn(|l| ((b0 + l as u64) >> 32) as u32),
                [self.offset as u32; L],
                [(self.offset >> 32) as u32; L],
            ];
            let w = philox_lanes(c, key);
            for (j, o) in chunk.iter_mut().enumerate() {
                let l = j / 2;
                *o = if j % 2 == 0 {
                    bits53(w[0][l], w[1][l])
                } else {
                    bits53(w[2][l], w[3][l])
                };
            }
            b0 += L as u64;
        }
    }
    /// `out[j]` = word `(first + j) % 4` of Philox block `(first + j) / 4`,
    /// for `first` a multiple of 4: 32 random bits per element, four
    /// elements per block (dropout's draw).
    pub fn words_into(&self, first: u64, out: &mut [u32]) {
        const L: usize = 8;
        debug_assert!(first % 4 == 0);
        let key = [self.seed as u32, (self.seed >> 32) as u32];
        let mut b0 = first / 4;
        for chunk in out.chunks_mut(4 * L) {
            let c: [[u32; L]; 4] = [
                std::array::from_fn(|l| (b0 + l as u64) as u32),
                std::array::from_fn(|l| ((b0 + l as u64) >> 32) as u32),
                [self.offset as u32; L],
                [(self.offset >> 32) as u32; L],
            ];
            let w = philox_lanes(c, key);
            for (j, o) in chunk.iter_mut().enumerate() {
                *o = w[j % 4][j / 4];
            }
            b0 += L as u64;
        }
    }
    /// `out[j] = self.uniform(first + j)` for an even `first`.
    pub fn uniforms_into(&self, first: u64, out: &mut [f64]) {
        let mut bits = [0u64; 64];
        let mut at = first;
        for chunk in out.chunks_mut(bits.len()) {
            let b = &mut bits[..chunk.len()];
            self.bits53_into(at, b);
            for (o, &v) in chunk.iter_mut().zip(b.iter()) {
                *o = v as f64 * (1.0 / (1u64 << 53) as f64);
            }
            at += chunk.len() as u64;
        }
    }
    /// Uniform in [0, 1) for element `i` (53 bits).
    pub fn uniform(&self, i: u64) -> f64 {
        let w = self.block(i / 2);
        let (a, b) = if i % 2 == 0 {
            (w[0], w[1])
        } else {
            (w[2], w[3])
        };
        (((a as u64) << 21) ^ (b as u64 >> 11)) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Standard normal for element `i` (Box-Muller).
    pub fn normal(&self, i: u64) -> f64 {
        let w = self.block(i / 2);
        let u1 = ((w[0] as u64) << 21 ^ (w[1] as u64 >> 11)) as f64 * (1.0 / (1u64 << 53) as f64);
        let u2 = ((w[2] as u64) << 21 ^ (w[3] as u64 >> 11)) as f64 * (1.0 / (1u64 << 53) as f64);
        let r = (-2.0 * (1.0 - u1).ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        if i % 2 == 0 {
            r * t.cos()
        } else {
            r * t.sin()
        }
    }
    /// A 64-bit word for element `i`.
    pub fn word(&self, i: u64) -> u64 {
        let w = self.block(i / 2);
        let (a, b) = if i % 2 == 0 {
            (w[0], w[1])
        } else {
            (w[2], w[3])
        };
        ((a as u64) << 32) | b as u64
    }
}

/// Fills `out` with uniform values in [from, to).
pub fn uniform(out: &TView, from: f64, to: f64, s: Stream) {
    let mut v = vec![0f64; out.numel()];
    s.uniforms_into(0, &mut v);
    let v: Vec<f64> = v
        .into_iter()
        .map(|u| {
            let x = from + u * (to - from);
            if x >= to && to > from {
                from
            } else {
                x
            }
        })
        .collect();
    write(out, &v);
}

/// Fills `out` with normal values.
pub fn normal(out: &TView, mean: f64, std: f64, s: Stream) {
    let v: Vec<f64> = (0..out.numel() as u64)
        .map(|i| mean + std * s.normal(i))
        .collect();
    write(out, &v);
}

/// Fills `out` with integers in [from, to) (`to` None: up to the dtype's
/// exactly representable range).
pub fn random(out: &TView, from: i64, to: Option<i64>, s: Stream) {
    use crate::types::dtype;
    let hi = to.unwrap_or(match out.dtype {
        dtype::F32 => 1 << 24,
        dtype::F64 => 1 << 53,
        dtype::F16 => 1 << 11,
        dtype::BF16 => 1 << 8,
        dtype::I8 => i8::MAX as i64 + 1,
        dtype::U8 => 256,
        dtype::BOOL => 2,
        dtype::I16 => i16::MAX as i64 + 1,
        dtype::I32 => i32::MAX as i64 + 1,
        _ => i64::MAX,
    });
    let range = (hi as i128 - from as i128).max(1) as u128;
    let v: Vec<i64> = (0..out.numel() as u64)
        .map(|i| (from as i128 + (s.word(i) as u128 % range) as i128) as i64)
        .collect();
    write(out, &v);
}

/// Dropout: keeps each element with probability 1-p, scaled by 1/(1-p);
/// `mask` (optional) receives 1 for kept elements. Not training: a copy.
pub fn dropout(out: &TView, mask: Option<&TView>, x: &TView, p: f64, train: bool, s: Stream) {
    let n = out.numel();
    if !train || p <= 0.0 {
        crate::view::copy(out, x);
        if let Some(m) = mask {
            crate::elementwise::fill(m, crate::types::Scalar::Int(1));
        }
        return;
    }
    // the uniforms in parallel pieces of an even length (a Philox block
    // serves two elements)
    const PIECE: usize = 1 << 14;
    // keep element i when its 32 random bits, as a fraction of 2^32, are
    // at least p
    let threshold = (p * 4_294_967_296.0).ceil().min(4_294_967_296.0) as u64;
    let mut keep = vec![false; n];
    crate::par::chunks_each(&mut keep, PIECE, n * 16, |piece, ks| {
        let mut u = [0u32; 512];
        for (k, sub) in ks.chunks_mut(u.len()).enumerate() {
            let first = (piece * PIECE + k * u.len()) as u64;
            let u = &mut u[..sub.len()];
            s.words_into(first, u);
            for (kk, &uu) in sub.iter_mut().zip(u.iter()) {
                *kk = uu as u64 >= threshold;
            }
        }
    });
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    crate::with_kind!(kind_of(out.dtype), C => {
        let xs = read::<C>(x);
        let sc = C::from_f64(scale);
        with_out::<C>(out, &[x], |o| {
            for ((d, &e), &k) in o.iter_mut().zip(xs.iter()).zip(&keep) {
                *d = if k { e.mul(sc) } else { C::default() };
            }
        });
    });
    if let Some(m) = mask {
        use crate::types::dtype;
        if matches!(m.dtype, dtype::BOOL | dtype::U8) && m.is_contiguous() && m.numel() == n {
            // SAFETY: contiguous one-byte elements, n of them; a bool is
            // the byte 0 or 1.
            unsafe { std::ptr::copy_nonoverlapping(keep.as_ptr() as *const u8, m.ptr, n) };
        } else {
            let mv: Vec<i64> = keep.iter().map(|&k| k as i64).collect();
            write(m, &mv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::testutil::*;

    #[test]
    fn philox_known_answer() {
        // Random123's known-answer vectors for philox4x32-10.
        assert_eq!(
            philox([0; 4], [0; 2]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
    }

    #[test]
    fn batched_uniforms_match_single_ones() {
        let s = Stream {
            seed: 0x1234_5678_9abc,
            offset: (7u64 << 32) + 3,
        };
        // a block index that crosses 2^32 and a ragged tail
        for first in [0u64, 10, (1u64 << 33) - 6] {
            let mut u = vec![0f64; 37];
            s.uniforms_into(first, &mut u);
            for (j, &v) in u.iter().enumerate() {
                assert_eq!(
                    v.to_bits(),
                    s.uniform(first + j as u64).to_bits(),
                    "element {j} after {first}"
                );
            }
        }
    }

    #[test]
    fn uniform_normal_dropout_statistics_and_repeatability() {
        let s = Stream {
            seed: 42,
            offset: 8,
        };
        let mut a = vec![0f32; 4000];
        let av = f32v(&mut a, &[4000]);
        uniform(&av, -1.0, 3.0, s);
        assert!(a.iter().all(|&v| (-1.0..3.0).contains(&v)));
        let mean = a.iter().sum::<f32>() / 4000.0;
        assert!((mean - 1.0).abs() < 0.1, "{mean}");
        let mut b = vec![0f32; 4000];
        let bv = f32v(&mut b, &[4000]);
        uniform(&bv, -1.0, 3.0, s);
        assert_eq!(a, b, "same seed and offset repeat");
        uniform(
            &bv,
            -1.0,
            3.0,
            Stream {
                seed: 42,
                offset: 12,
            },
        );
        assert_ne!(a, b, "another offset differs");
        normal(&av, 2.0, 0.5, s);
        let m = a.iter().sum::<f32>() / 4000.0;
        let sd = (a.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / 4000.0).sqrt();
        assert!(
            (m - 2.0).abs() < 0.05 && (sd - 0.5).abs() < 0.05,
            "{m} {sd}"
        );
        let mut x = vec![1.0f32; 4000];
        let xv = f32v(&mut x, &[4000]);
        let mut mask = vec![0u8; 4000];
        let mv = crate::view::testutil::view_of(&mut mask, crate::types::dtype::U8, &[4000], &[1]);
        dropout(&xv, Some(&mv), &xv, 0.25, true, s);
        let kept = mask.iter().filter(|&&m| m == 1).count() as f32 / 4000.0;
        assert!((kept - 0.75).abs() < 0.05);
        assert!(x.iter().zip(&mask).all(|(&v, &m)| if m == 1 {
            (v - 4.0 / 3.0).abs() < 1e-6
        } else {
            v == 0.0
        }));
        let mut r = vec![0i64; 1000];
        let rv = crate::view::testutil::view_of(&mut r, crate::types::dtype::I64, &[1000], &[1]);
        random(&rv, -3, Some(4), s);
        assert!(r.iter().all(|&v| (-3..4).contains(&v)));
        assert!((-3..4).all(|k| r.contains(&k)));
    }
}
