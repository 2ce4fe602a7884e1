//! Elementwise kernels: inputs are broadcast to the output's shape (numpy
//! rules), read through any strides and dtype, computed in f32 (f16, bf16,
//! f32), f64 or i64 (integers, bool), and stored into any strided output,
//! which may alias an input.

use crate::types::{dtype, Scalar};
use crate::view::{read_bcast, with_out, Num, TView};

/// The compute type of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// f32 (also for f16 and bf16)
    F32,
    /// f64
    F64,
    /// i64 (integers and bool)
    I64,
}

/// The compute kind that produces values of dtype `d`.
pub fn kind_of(d: i32) -> Kind {
    match d {
        dtype::F64 => Kind::F64,
        dtype::F32 | dtype::F16 | dtype::BF16 => Kind::F32,
        _ => Kind::I64,
    }
}

/// The compute kind that holds every dtype in `ds` (float wins over int).
pub fn common_kind(ds: &[i32]) -> Kind {
    if ds.contains(&dtype::F64) {
        Kind::F64
    } else if ds.iter().any(|&d| dtype::is_float(d)) {
        Kind::F32
    } else {
        Kind::I64
    }
}

/// Runs `$body` with `$C` bound to the compute type of `$kind`.
#[macro_export]
macro_rules! with_kind {
    ($kind:expr, $C:ident => $body:expr) => {
        match $kind {
            $crate::elementwise::Kind::F32 => {
                type $C = f32;
                $body
            }
            $crate::elementwise::Kind::F64 => {
                type $C = f64;
                $body
            }
            $crate::elementwise::Kind::I64 => {
                type $C = i64;
                $body
            }
        }
    };
}

/// Float math on the compute types.
pub trait Float: Num {
    /// e^x
    fn exp(self) -> Self;
    /// ln x
    fn ln(self) -> Self;
    /// sqrt x
    fn sqrt(self) -> Self;
    /// tanh x
    fn tanh(self) -> Self;
    /// erf x
    fn erf(self) -> Self;
    /// x^y
    fn powf(self, y: Self) -> Self;
    /// floor x
    fn floor(self) -> Self;
    /// trunc x
    fn trunc(self) -> Self;
}

/// e^x in f32 without a libm call (Cephes' polynomial after a base-2
/// range reduction; within 2 ulp of `f32::exp`): branch-free, so loops of
/// it vectorize. Underflow gives 0, overflow infinity, NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const HI: f32 = 88.722_83;
    const LO: f32 = -87.336_54;
    let xc = x.clamp(LO, HI);
    // round to nearest with the 1.5 * 2^23 trick (`round()` is a libm call
    // on baseline x86-64 and would stop the loop from vectorizing); the
    // integer n is then in the low bits of t
    const SHIFT: f32 = 12_582_912.0;
    let t = xc * std::f32::consts::LOG2_E + SHIFT;
    let ni = (t.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let n = t - SHIFT;
    let r = xc - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n in two steps keeps n = 128 (the top of the range) finite until the product
    let h = ni >> 1;
    let half = f32::from_bits(((h + 127) as u32) << 23);
    let rest = f32::from_bits((((ni - h) + 127) as u32) << 23);
    let v = y * half * rest;
    let v = if x < LO { 0.0 } else { v };
    let v = if x > HI { f32::INFINITY } else { v };
    if x.is_nan() {
        x
    } else {
        v
    }
}

fn exp_f64(x: f64) -> f64 {
    x.exp()
}

macro_rules! float_impl {
    ($t:ty, $erf:path, $exp:path) => {
        impl Float for $t {
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                <$t>::powf(self, y)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
        }
    };
}
float_impl!(f32, libm::erff, exp_f32);
float_impl!(f64, libm::erf, exp_f64);

/// An operand: a tensor or a scalar.
#[derive(Clone, Copy, Debug)]
pub enum Src {
    /// A tensor broadcast to the output's shape.
    T(TView),
    /// A scalar.
    S(Scalar),
}

impl Src {
    fn dtype(&self) -> i32 {
        match self {
            Src::T(t) => t.dtype,
            Src::S(Scalar::Float(_)) => dtype::F32,
            Src::S(Scalar::Int(_)) => dtype::I64,
        }
    }
}

fn c_of<C: Num>(s: Scalar) -> C {
    match s {
        Scalar::Float(v) => C::from_f64(v),
        Scalar::Int(v) => C::from_i64(v),
    }
}

const PAR_MIN: usize = 1 << 16;
const PAR_CHUNK: usize = 1 << 14;
/// Elements per stack block of [`map`].
const BLOCK: usize = 256;

#[derive(Clone, Copy)]
struct Ptr<T>(*const T);
// SAFETY: used only to hand disjoint chunks of one buffer to rayon workers.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    /// The pointer (a method, so closures capture the whole Send wrapper).
    fn get(self) -> *const T {
        self.0
    }
}

/// `out[i] = f(ins[0][i], ..)` over `out`'s shape: the core of every
/// elementwise kernel. Inputs may alias `out`.
///
/// Inputs of the compute type are read in place through their (broadcast)
/// strides, a row at a time, after the dims that every operand walks
/// contiguously are merged; other inputs are converted first.
pub fn map<C: Num, const N: usize>(out: &TView, ins: [&TView; N], f: impl Fn([C; N]) -> C + Sync) {
    let shape = out.shape();
    let n = out.numel();
    if n == 0 {
        return;
    }
    let direct = out.dtype == C::DTYPE && out.is_contiguous();
    // An input read in place must not be one the kernel's own writes could
    // change before it is read: one that `out` shares must be exactly `out`
    // (each block of it is read before that block is written).
    let in_place = |k: usize| {
        ins[k].dtype == C::DTYPE && (!direct || !ins[k].overlaps(out) || ins[k].same_layout(out))
    };
    let bufs: [Option<Vec<C>>; N] = std::array::from_fn(|k| {
        (!in_place(k)).then(|| read_bcast::<C>(ins[k], shape).into_owned())
    });
    let dense = crate::view::contiguous_strides(shape);
    let mut strides: [Vec<i64>; N] = std::array::from_fn(|k| match bufs[k] {
        Some(_) => dense.clone(),
        None => ins[k]
            .broadcast_strides(shape)
            .expect("shapes checked before launch"),
    });
    let ptrs: [Ptr<C>; N] = std::array::from_fn(|k| match &bufs[k] {
        Some(b) => Ptr(b.as_ptr()),
        None => Ptr(ins[k].ptr as *const C),
    });
    let mut dims = shape.to_vec();
    coalesce(&mut dims, &mut strides);
    let nd = dims.len();
    let inner = dims[nd - 1] as usize;
    let rows = n / inner;
    // the offset of row `r`'s first element in input `k`
    let row_base = |k: usize, mut r: usize| -> isize {
        let mut off = 0isize;
        for d in (0..nd - 1).rev() {
            let sz = dims[d] as usize;
            off += (r % sz) as isize * strides[k][d] as isize;
            r /= sz;
        }
        off
    };
    let inner_stride: [isize; N] = std::array::from_fn(|k| strides[k][nd - 1] as isize);
    // The work is cut in pieces of at most PAR_CHUNK elements of one row.
    let per_row = inner.div_ceil(PAR_CHUNK);
    let pieces = rows * per_row;
    let run = |o: *mut C, plo: usize, phi: usize| {
        let mut blk = [[C::default(); BLOCK]; N];
        let mut res = [C::default(); BLOCK];
        for piece in plo..phi {
            let r = piece / per_row;
            let lo = piece % per_row * PAR_CHUNK;
            let hi = (lo + PAR_CHUNK).min(inner);
            let bases: [isize; N] = std::array::from_fn(|k| row_base(k, r));
            let mut at = lo;
            while at < hi {
                let len = BLOCK.min(hi - at);
                for k in 0..N {
                    let st = inner_stride[k];
                    // SAFETY: every offset lies inside input k's memory (its
                    // strides were checked against the output shape).
                    unsafe {
                        let p = ptrs[k].get().offset(bases[k] + at as isize * st);
                        if st == 1 {
                            blk[k][..len].copy_from_slice(std::slice::from_raw_parts(p, len));
                        } else if st == 0 {
                            blk[k][..len].fill(*p);
                        } else {
                            for (j, b) in blk[k][..len].iter_mut().enumerate() {
                                *b = *p.offset(j as isize * st);
                            }
                        }
                    }
                }
                if len == BLOCK {
                    for (j, x) in res.iter_mut().enumerate() {
                        *x = f(std::array::from_fn(|k| blk[k][j]));
                    }
                } else {
                    for (j, x) in res[..len].iter_mut().enumerate() {
                        *x = f(std::array::from_fn(|k| blk[k][j]));
                    }
                }
                // SAFETY: row r's elements [at, at + len) lie inside the
                // n-element output, which no other task writes.
                unsafe { std::ptr::copy_nonoverlapping(res.as_ptr(), o.add(r * inner + at), len) };
                at += len;
            }
        }
    };
    let exec = |o: *mut C| {
        if n >= PAR_MIN {
            let op = Ptr(o as *const C);
            // about PAR_CHUNK elements per task
            let per = (PAR_CHUNK / inner.min(PAR_CHUNK)).max(1);
            rayon::scope(|s| {
                for lo in (0..pieces).step_by(per) {
                    let run = &run;
                    s.spawn(move |_| run(op.get() as *mut C, lo, (lo + per).min(pieces)));
                }
            });
        } else {
            run(o, 0, pieces);
        }
    };
    if direct {
        exec(out.ptr as *mut C);
    } else {
        let mut tmp = vec![C::default(); n];
        exec(tmp.as_mut_ptr());
        crate::view::write(out, &tmp);
    }
}

/// Merges neighbouring dims that every operand (the dense output and each
/// of `strides`) walks as one, and drops size-1 dims, keeping at least one.
fn coalesce<const N: usize>(dims: &mut Vec<i64>, strides: &mut [Vec<i64>; N]) {
    let dense = crate::view::contiguous_strides(dims);
    let all: Vec<Vec<i64>> = std::iter::once(dense)
        .chain(strides.iter().cloned())
        .collect();
    let mut nd: Vec<i64> = Vec::new();
    let mut ns: Vec<Vec<i64>> = vec![Vec::new(); all.len()];
    for d in 0..dims.len() {
        if dims[d] == 1 {
            continue;
        }
        let merge = !nd.is_empty()
            && all
                .iter()
                .zip(&ns)
                .all(|(st, n)| *n.last().unwrap() == st[d] * dims[d]);
        if merge {
            *nd.last_mut().unwrap() *= dims[d];
            for (st, n) in all.iter().zip(ns.iter_mut()) {
                *n.last_mut().unwrap() = st[d];
            }
        } else {
            nd.push(dims[d]);
            for (st, n) in all.iter().zip(ns.iter_mut()) {
                n.push(st[d]);
            }
        }
    }
    if nd.is_empty() {
        nd.push(1);
        for n in ns.iter_mut() {
            n.push(0);
        }
    }
    *dims = nd;
    for (k, st) in strides.iter_mut().enumerate() {
        *st = std::mem::take(&mut ns[k + 1]);
    }
}

/// Fills `out` with a scalar.
pub fn fill(out: &TView, v: Scalar) {
    with_kind!(kind_of(out.dtype), C => {
        let c: C = c_of(v);
        with_out::<C>(out, &[], |b| b.fill(c));
    })
}

/// Binary operators (`a op b`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    /// a + alpha * b
    Add(Scalar),
    /// a - alpha * b
    Sub(Scalar),
    /// a * b
    Mul,
    /// a / b, with a rounding mode (diopiRoundMode_t)
    Div(i32),
    /// a ^ b
    Pow,
    /// max(a, b), NaN propagating
    Maximum,
    /// min(a, b), NaN propagating
    Minimum,
    /// a == b
    Eq,
    /// a != b
    Ne,
    /// a < b
    Lt,
    /// a <= b
    Le,
    /// a > b
    Gt,
    /// a >= b
    Ge,
}

impl BinOp {
    /// Whether the result is a comparison (bool-valued).
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

fn run_bin<C: Num>(out: &TView, a: Src, b: Src, f: impl Fn(C, C) -> C + Sync) {
    match (a, b) {
        (Src::T(x), Src::T(y)) => map::<C, 2>(out, [&x, &y], |[p, q]| f(p, q)),
        (Src::T(x), Src::S(s)) => {
            let q: C = c_of(s);
            map::<C, 1>(out, [&x], |[p]| f(p, q))
        }
        (Src::S(s), Src::T(y)) => {
            let p: C = c_of(s);
            map::<C, 1>(out, [&y], |[q]| f(p, q))
        }
        (Src::S(s), Src::S(t)) => {
            let v = f(c_of(s), c_of(t));
            with_out::<C>(out, &[], |buf| buf.fill(v))
        }
    }
}

fn pow_i64(x: i64, y: i64) -> i64 {
    if y < 0 {
        match x {
            1 => 1,
            -1 => {
                if y % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        }
    } else {
        x.wrapping_pow(y.min(u32::MAX as i64) as u32)
    }
}

fn float_bin<C: Float>(out: &TView, a: Src, b: Src, op: BinOp) {
    let t = |v: bool| C::from_i64(v as i64);
    match op {
        BinOp::Add(al) => {
            let al: C = c_of(al);
            run_bin::<C>(out, a, b, move |x, y| x.add(y.mul(al)))
        }
        BinOp::Sub(al) => {
            let al: C = c_of(al);
            run_bin::<C>(out, a, b, move |x, y| x.sub(y.mul(al)))
        }
        BinOp::Mul => run_bin::<C>(out, a, b, |x, y| x.mul(y)),
        BinOp::Div(mode) => match mode {
            crate::types::round_mode::TRUNC => run_bin::<C>(out, a, b, |x, y| x.div(y).trunc()),
            crate::types::round_mode::FLOOR => run_bin::<C>(out, a, b, |x, y| x.div(y).floor()),
            _ => run_bin::<C>(out, a, b, |x, y| x.div(y)),
        },
        BinOp::Pow => match b {
            // the common exponents as multiplications (exact as powf is,
            // and the loop vectorizes)
            Src::S(Scalar::Float(e)) if e.to_bits() == 2f64.to_bits() => {
                run_bin::<C>(out, a, b, |x, _| x.mul(x))
            }
            Src::S(Scalar::Int(2)) => run_bin::<C>(out, a, b, |x, _| x.mul(x)),
            Src::S(Scalar::Float(e)) if e.to_bits() == 1f64.to_bits() => {
                run_bin::<C>(out, a, b, |x, _| x)
            }
            Src::S(Scalar::Int(1)) => run_bin::<C>(out, a, b, |x, _| x),
            _ => run_bin::<C>(out, a, b, |x, y| x.powf(y)),
        },
        BinOp::Maximum => run_bin::<C>(out, a, b, |x, y| x.max_nan(y)),
        BinOp::Minimum => run_bin::<C>(out, a, b, |x, y| x.min_nan(y)),
        BinOp::Eq => run_bin::<C>(out, a, b, move |x, y| t(x == y)),
        BinOp::Ne => run_bin::<C>(out, a, b, move |x, y| t(x != y)),
        BinOp::Lt => run_bin::<C>(out, a, b, move |x, y| t(x < y)),
        BinOp::Le => run_bin::<C>(out, a, b, move |x, y| t(x <= y)),
        BinOp::Gt => run_bin::<C>(out, a, b, move |x, y| t(x > y)),
        BinOp::Ge => run_bin::<C>(out, a, b, move |x, y| t(x >= y)),
    }
}

fn int_bin(out: &TView, a: Src, b: Src, op: BinOp) {
    let t = |v: bool| v as i64;
    match op {
        BinOp::Add(al) => {
            let al = al.i64();
            run_bin::<i64>(out, a, b, move |x, y| x.wrapping_add(y.wrapping_mul(al)))
        }
        BinOp::Sub(al) => {
            let al = al.i64();
            run_bin::<i64>(out, a, b, move |x, y| x.wrapping_sub(y.wrapping_mul(al)))
        }
        BinOp::Mul => run_bin::<i64>(out, a, b, |x, y| x.wrapping_mul(y)),
        BinOp::Div(mode) => match mode {
            crate::types::round_mode::FLOOR => run_bin::<i64>(out, a, b, |x, y| {
                if y == 0 {
                    0
                } else {
                    x.div_euclid(y) - ((x.rem_euclid(y) != 0 && y < 0) as i64)
                }
            }),
            _ => run_bin::<i64>(out, a, b, |x, y| x.checked_div(y).unwrap_or(0)),
        },
        BinOp::Pow => run_bin::<i64>(out, a, b, pow_i64),
        BinOp::Maximum => run_bin::<i64>(out, a, b, |x, y| x.max(y)),
        BinOp::Minimum => run_bin::<i64>(out, a, b, |x, y| x.min(y)),
        BinOp::Eq => run_bin::<i64>(out, a, b, move |x, y| t(x == y)),
        BinOp::Ne => run_bin::<i64>(out, a, b, move |x, y| t(x != y)),
        BinOp::Lt => run_bin::<i64>(out, a, b, move |x, y| t(x < y)),
        BinOp::Le => run_bin::<i64>(out, a, b, move |x, y| t(x <= y)),
        BinOp::Gt => run_bin::<i64>(out, a, b, move |x, y| t(x > y)),
        BinOp::Ge => run_bin::<i64>(out, a, b, move |x, y| t(x >= y)),
    }
}

/// The compute kind of a binary op: from the output's dtype for
/// arithmetic (float division of integers computes in f64), from the
/// inputs for comparisons.
pub fn binary_kind(out: &TView, a: &Src, b: &Src, op: BinOp) -> Kind {
    if op.is_compare() {
        common_kind(&[a.dtype(), b.dtype()])
    } else if matches!(op, BinOp::Div(m) if m == crate::types::round_mode::NONE)
        || matches!(op, BinOp::Pow)
    {
        let k = kind_of(out.dtype);
        if k == Kind::I64 && common_kind(&[a.dtype(), b.dtype()]) != Kind::I64 {
            Kind::F64
        } else {
            k
        }
    } else {
        let k = kind_of(out.dtype);
        // integer outputs of float rounding-division compute in f64
        if k == Kind::I64
            && matches!(op, BinOp::Div(_))
            && common_kind(&[a.dtype(), b.dtype()]) != Kind::I64
        {
            Kind::F64
        } else {
            k
        }
    }
}

/// `out = a op b` with broadcasting.
pub fn binary(out: &TView, a: Src, b: Src, op: BinOp) {
    match binary_kind(out, &a, &b, op) {
        Kind::F32 => float_bin::<f32>(out, a, b, op),
        Kind::F64 => float_bin::<f64>(out, a, b, op),
        Kind::I64 => int_bin(out, a, b, op),
    }
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// sqrt
    Sqrt,
    /// 1/sqrt
    Rsqrt,
    /// e^x
    Exp,
    /// ln
    Log,
    /// -x
    Neg,
    /// |x|
    Abs,
    /// sign
    Sign,
    /// 1/x
    Reciprocal,
    /// erf
    Erf,
    /// 1/(1+e^-x)
    Sigmoid,
    /// tanh
    Tanh,
    /// x * sigmoid(x)
    Silu,
    /// max(x, 0)
    Relu,
    /// GELU, exact (false) or the tanh approximation (true)
    Gelu(bool),
}

impl UnOp {
    /// Whether the op also works on integer outputs.
    pub fn int_ok(self) -> bool {
        matches!(self, UnOp::Neg | UnOp::Abs | UnOp::Sign | UnOp::Relu)
    }
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

fn float_un<C: Float>(out: &TView, x: &TView, op: UnOp) {
    let zero = C::from_i64(0);
    let one = C::from_i64(1);
    let half = C::from_f64(0.5);
    match op {
        UnOp::Sqrt => map::<C, 1>(out, [x], |[v]| v.sqrt()),
        UnOp::Rsqrt => map::<C, 1>(out, [x], move |[v]| one.div(v.sqrt())),
        UnOp::Exp => map::<C, 1>(out, [x], |[v]| v.exp()),
        UnOp::Log => map::<C, 1>(out, [x], |[v]| v.ln()),
        UnOp::Neg => map::<C, 1>(out, [x], move |[v]| zero.sub(v)),
        UnOp::Abs => map::<C, 1>(
            out,
            [x],
            move |[v]| if v < zero { zero.sub(v) } else { v.add(zero) },
        ),
        UnOp::Sign => map::<C, 1>(out, [x], move |[v]| {
            if v > zero {
                one
            } else if v < zero {
                zero.sub(one)
            } else {
                v
            }
        }),
        UnOp::Reciprocal => map::<C, 1>(out, [x], move |[v]| one.div(v)),
        UnOp::Erf => map::<C, 1>(out, [x], |[v]| v.erf()),
        UnOp::Sigmoid => map::<C, 1>(out, [x], move |[v]| one.div(one.add(zero.sub(v).exp()))),
        UnOp::Tanh => map::<C, 1>(out, [x], |[v]| v.tanh()),
        UnOp::Silu => map::<C, 1>(out, [x], move |[v]| v.div(one.add(zero.sub(v).exp()))),
        UnOp::Relu => map::<C, 1>(
            out,
            [x],
            move |[v]| if v > zero || v.is_nan() { v } else { zero },
        ),
        UnOp::Gelu(false) => {
            let r = C::from_f64(std::f64::consts::FRAC_1_SQRT_2);
            map::<C, 1>(out, [x], move |[v]| {
                half.mul(v).mul(one.add(v.mul(r).erf()))
            })
        }
        UnOp::Gelu(true) => {
            let k = C::from_f64(SQRT_2_OVER_PI);
            let c = C::from_f64(0.044715);
            map::<C, 1>(out, [x], move |[v]| {
                half.mul(v)
                    .mul(one.add(k.mul(v.add(c.mul(v).mul(v).mul(v))).tanh()))
            })
        }
    }
}

/// `out = op(x)`. Integer outputs support only [`UnOp::int_ok`] ops.
pub fn unary(out: &TView, x: &TView, op: UnOp) {
    match kind_of(out.dtype) {
        Kind::F32 => float_un::<f32>(out, x, op),
        Kind::F64 => float_un::<f64>(out, x, op),
        Kind::I64 => match op {
            UnOp::Neg => map::<i64, 1>(out, [x], |[v]| v.wrapping_neg()),
            UnOp::Abs => map::<i64, 1>(out, [x], |[v]| v.wrapping_abs()),
            UnOp::Sign => map::<i64, 1>(out, [x], |[v]| v.signum()),
            UnOp::Relu => map::<i64, 1>(out, [x], |[v]| v.max(0)),
            _ => {}
        },
    }
}

/// Activation backward operators: `gi = f(go, saved)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BackOp {
    /// go where input > threshold, else 0
    Threshold(Scalar),
    /// GELU backward (tanh approximation when true); saved = input
    Gelu(bool),
    /// SiLU backward; saved = input
    Silu,
    /// sigmoid backward; saved = forward output
    Sigmoid,
    /// tanh backward; saved = forward output
    Tanh,
}

fn float_back<C: Float>(gi: &TView, go: &TView, s: &TView, op: BackOp) {
    let zero = C::from_i64(0);
    let one = C::from_i64(1);
    let half = C::from_f64(0.5);
    match op {
        BackOp::Threshold(th) => {
            let th: C = c_of(th);
            map::<C, 2>(gi, [go, s], move |[g, x]| if x > th { g } else { zero })
        }
        BackOp::Gelu(false) => {
            let r = C::from_f64(std::f64::consts::FRAC_1_SQRT_2);
            let p = C::from_f64(FRAC_1_SQRT_2PI);
            map::<C, 2>(gi, [go, s], move |[g, x]| {
                let cdf = half.mul(one.add(x.mul(r).erf()));
                let pdf = p.mul(zero.sub(half.mul(x).mul(x)).exp());
                g.mul(cdf.add(x.mul(pdf)))
            })
        }
        BackOp::Gelu(true) => {
            let k = C::from_f64(SQRT_2_OVER_PI);
            let c = C::from_f64(0.044715);
            let c3 = C::from_f64(3.0 * 0.044715);
            map::<C, 2>(gi, [go, s], move |[g, x]| {
                let t = k.mul(x.add(c.mul(x).mul(x).mul(x))).tanh();
                let dt = one.sub(t.mul(t)).mul(k).mul(one.add(c3.mul(x).mul(x)));
                g.mul(half.mul(one.add(t)).add(half.mul(x).mul(dt)))
            })
        }
        BackOp::Silu => map::<C, 2>(gi, [go, s], move |[g, x]| {
            let sg = one.div(one.add(zero.sub(x).exp()));
            g.mul(sg).mul(one.add(x.mul(one.sub(sg))))
        }),
        BackOp::Sigmoid => map::<C, 2>(gi, [go, s], move |[g, y]| g.mul(y).mul(one.sub(y))),
        BackOp::Tanh => map::<C, 2>(gi, [go, s], move |[g, y]| g.mul(one.sub(y.mul(y)))),
    }
}

/// Activation backward into `gi` (float outputs).
pub fn backward(gi: &TView, go: &TView, saved: &TView, op: BackOp) {
    match kind_of(gi.dtype) {
        Kind::F64 => float_back::<f64>(gi, go, saved, op),
        _ => float_back::<f32>(gi, go, saved, op),
    }
}

/// Ternary operators.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TerOp {
    /// a + v * b * c
    Addcmul(Scalar),
    /// a + v * b / c
    Addcdiv(Scalar),
    /// a != 0 ? b : c (where; masked fill as where(mask, value, input))
    Where,
}

/// `out = op(a, b, c)` with broadcasting.
pub fn ternary(out: &TView, a: &TView, b: &TView, c: &TView, op: TerOp) {
    with_kind!(kind_of(out.dtype), C => match op {
        TerOp::Addcmul(v) => {
            let v: C = c_of(v);
            map::<C, 3>(out, [a, b, c], move |[x, y, z]| x.add(v.mul(y).mul(z)))
        }
        TerOp::Addcdiv(v) => {
            let v: C = c_of(v);
            map::<C, 3>(out, [a, b, c], move |[x, y, z]| x.add(v.mul(y).div(z)))
        }
        TerOp::Where => {
            let zero = C::default();
            map::<C, 3>(out, [a, b, c], move |[m, y, z]| if m != zero { y } else { z })
        }
    })
}

/// `out = where(mask, value, input)` with a scalar value.
pub fn masked_fill_scalar(out: &TView, input: &TView, mask: &TView, v: Scalar) {
    with_kind!(kind_of(out.dtype), C => {
        let v: C = c_of(v);
        let zero = C::default();
        map::<C, 2>(out, [mask, input], move |[m, x]| if m != zero { v } else { x })
    })
}

/// Clamps `x` between optional scalar bounds (NaN stays NaN).
pub fn clamp_scalar(out: &TView, x: &TView, lo: Option<Scalar>, hi: Option<Scalar>) {
    with_kind!(kind_of(out.dtype), C => {
        let lo: Option<C> = lo.map(c_of);
        let hi: Option<C> = hi.map(c_of);
        map::<C, 1>(out, [x], move |[v]| clamp1(v, lo, hi))
    })
}

#[inline(always)]
fn clamp1<C: Num>(v: C, lo: Option<C>, hi: Option<C>) -> C {
    if v.is_nan() {
        return v;
    }
    let mut r = v;
    if let Some(l) = lo {
        if r < l || l.is_nan() {
            r = l;
        }
    }
    if let Some(h) = hi {
        if r > h || h.is_nan() {
            r = h;
        }
    }
    r
}

/// Clamps `x` between optional tensor bounds.
pub fn clamp_tensor(out: &TView, x: &TView, lo: Option<&TView>, hi: Option<&TView>) {
    with_kind!(kind_of(out.dtype), C => match (lo, hi) {
        (Some(l), Some(h)) => map::<C, 3>(out, [x, l, h], |[v, l, h]| clamp1(v, Some(l), Some(h))),
        (Some(l), None) => map::<C, 2>(out, [x, l], |[v, l]| clamp1(v, Some(l), None)),
        (None, Some(h)) => map::<C, 2>(out, [x, h], |[v, h]| clamp1(v, None, Some(h))),
        (None, None) => map::<C, 1>(out, [x], |[v]| v),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::testutil::*;

    #[test]
    fn add_broadcast_strided_alias() {
        // a: 2x3 viewed transposed from a 3x2 buffer; b: row of 3.
        let mut am = vec![1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        let a = view_of(&mut am, dtype::F32, &[2, 3], &[1, 2]);
        let mut bm = vec![10.0f32, 20.0, 30.0];
        let b = f32v(&mut bm, &[3]);
        let mut om = vec![0.0f32; 6];
        let o = f32v(&mut om, &[2, 3]);
        binary(&o, Src::T(a), Src::T(b), BinOp::Add(Scalar::Int(2)));
        assert_eq!(om, vec![21.0, 42.0, 63.0, 24.0, 45.0, 66.0]);
        // out aliases a (transposed layout): in-place add of a scalar
        binary(
            &a,
            Src::T(a),
            Src::S(Scalar::Float(0.5)),
            BinOp::Sub(Scalar::Int(1)),
        );
        assert_eq!(am, vec![0.5, 3.5, 1.5, 4.5, 2.5, 5.5]);
        // out partially overlapping its input: y[i] = x[i+1] * 2 in place
        let mut m = vec![1.0f32, 2.0, 3.0, 4.0];
        let src = view_of(&mut m[1..], dtype::F32, &[3], &[1]);
        let dst = view_of(&mut m[..3], dtype::F32, &[3], &[1]);
        binary(&dst, Src::T(src), Src::S(Scalar::Int(2)), BinOp::Mul);
        assert_eq!(m, vec![4.0, 6.0, 8.0, 4.0]);
    }

    #[test]
    fn zero_dim_and_f16() {
        let mut s = vec![3.0f32];
        let z = f32v(&mut s, &[]);
        let mut om = vec![half::f16::ZERO; 4];
        let o = view_of(&mut om, dtype::F16, &[2, 2], &[2, 1]);
        let mut xm: Vec<half::f16> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .map(|&v| half::f16::from_f32(v))
            .collect();
        let x = view_of(&mut xm, dtype::F16, &[2, 2], &[2, 1]);
        binary(&o, Src::T(x), Src::T(z), BinOp::Mul);
        let got: Vec<f32> = om.iter().map(|h| h.to_f32()).collect();
        assert_eq!(got, vec![3.0, 6.0, 9.0, 12.0]);
        // 0-dim output
        let mut r = vec![0.0f32];
        let rv = f32v(&mut r, &[]);
        unary(&rv, &z, UnOp::Neg);
        assert_eq!(r, vec![-3.0]);
    }

    #[test]
    fn compare_writes_bool_and_ints_divide() {
        let mut a = vec![1i64, 5, -7];
        let av = view_of(&mut a, dtype::I64, &[3], &[1]);
        let mut o = vec![7u8; 3];
        let ov = view_of(&mut o, dtype::BOOL, &[3], &[1]);
        binary(&ov, Src::T(av), Src::S(Scalar::Float(1.5)), BinOp::Gt);
        assert_eq!(o, vec![0, 1, 0]);
        let mut d = vec![0i64; 3];
        let dv = view_of(&mut d, dtype::I64, &[3], &[1]);
        binary(
            &dv,
            Src::T(av),
            Src::S(Scalar::Int(2)),
            BinOp::Div(crate::types::round_mode::FLOOR),
        );
        assert_eq!(d, vec![0, 2, -4]);
        binary(
            &dv,
            Src::T(av),
            Src::S(Scalar::Int(2)),
            BinOp::Div(crate::types::round_mode::TRUNC),
        );
        assert_eq!(d, vec![0, 2, -3]);
        // true division of ints into a float output
        let mut f = vec![0f32; 3];
        let fv = f32v(&mut f, &[3]);
        binary(&fv, Src::T(av), Src::S(Scalar::Int(2)), BinOp::Div(0));
        assert_eq!(f, vec![0.5, 2.5, -3.5]);
    }

    #[test]
    fn unary_and_backward_match_formulas() {
        let xs = [-2.0f32, -0.5, 0.0, 0.7, 3.0];
        let mut x = xs.to_vec();
        let xv = f32v(&mut x, &[5]);
        let mut o = vec![0f32; 5];
        let ov = f32v(&mut o, &[5]);
        unary(&ov, &xv, UnOp::Gelu(false));
        let want: Vec<f32> = xs
            .iter()
            .map(|&v| 0.5 * v * (1.0 + libm::erff(v / 2f32.sqrt())))
            .collect();
        close(&o, &want, 1);
        // numeric derivative check of the gelu backward (both forms) and silu
        for (f, b) in [
            (UnOp::Gelu(false), BackOp::Gelu(false)),
            (UnOp::Gelu(true), BackOp::Gelu(true)),
            (UnOp::Silu, BackOp::Silu),
        ] {
            let mut g = vec![1.0f32; 5];
            let gv = f32v(&mut g, &[5]);
            let mut gi = vec![0f32; 5];
            let giv = f32v(&mut gi, &[5]);
            backward(&giv, &gv, &xv, b);
            let h = 1e-3f32;
            let num: Vec<f32> = xs
                .iter()
                .map(|&v| {
                    let mut p = [v + h, v - h];
                    let pv = f32v(&mut p, &[2]);
                    let mut q = [0f32; 2];
                    let qv = f32v(&mut q, &[2]);
                    unary(&qv, &pv, f);
                    (q[0] - q[1]) / (2.0 * h)
                })
                .collect();
            // A difference quotient, not a CPU result: its own truncation
            // and cancellation error, O(h^2) and O(eps/h), is the bound.
            for (j, (a, n)) in gi.iter().zip(&num).enumerate() {
                assert!((a - n).abs() <= 2e-3 * (1.0 + n.abs()), "[{j}] {a} vs {n}");
            }
        }
        // relu in place keeps NaN
        let mut r = vec![-1.0f32, f32::NAN, 2.0];
        let rv = f32v(&mut r, &[3]);
        unary(&rv, &rv, UnOp::Relu);
        assert_eq!(r[0], 0.0);
        assert!(r[1].is_nan());
        assert_eq!(r[2], 2.0);
    }

    #[test]
    fn where_clamp_masked_fill() {
        let mut c = vec![1u8, 0, 1];
        let cv = view_of(&mut c, dtype::BOOL, &[3], &[1]);
        let mut a = vec![1.0f32, 2.0, 3.0];
        let av = f32v(&mut a, &[3]);
        let mut b = vec![9.0f32];
        let bv = f32v(&mut b, &[]);
        let mut o = vec![0f32; 3];
        let ov = f32v(&mut o, &[3]);
        ternary(&ov, &cv, &av, &bv, TerOp::Where);
        assert_eq!(o, vec![1.0, 9.0, 3.0]);
        masked_fill_scalar(&ov, &av, &cv, Scalar::Int(-1));
        assert_eq!(o, vec![-1.0, 2.0, -1.0]);
        clamp_scalar(&ov, &av, Some(Scalar::Float(1.5)), Some(Scalar::Float(2.5)));
        assert_eq!(o, vec![1.5, 2.0, 2.5]);
        clamp_tensor(&ov, &av, None, Some(&bv));
        assert_eq!(o, vec![1.0, 2.0, 3.0]);
        ternary(&ov, &av, &av, &av, TerOp::Addcdiv(Scalar::Float(0.5)));
        assert_eq!(o, vec![1.5, 2.5, 3.5]);
    }

    #[test]
    fn fast_exp_is_within_two_ulp() {
        let mut x = -90.0f32;
        while x < 90.0 {
            let (got, want) = (exp_f32(x), x.exp());
            if got == want {
                // exact (including 0 and infinity)
            } else if want.is_normal() {
                let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
                assert!(ulp <= 2, "exp({x}) = {got}, want {want}");
            } else {
                assert!(
                    got == 0.0 || (got - want).abs() < 1.2e-38,
                    "exp({x}) = {got}, want {want}"
                );
            }
            x += 0.0137;
        }
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
    }

    #[test]
    fn large_parallel_map_matches_serial() {
        let n = PAR_MIN * 2 + 3;
        let mut x: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let xv = f32v(&mut x, &[n as i64]);
        unary(&xv, &xv, UnOp::Neg);
        assert!(x.iter().enumerate().all(|(i, &v)| v == -(i as f32)));
    }
}
