//! Strided tensor views and the element plumbing every kernel shares:
//! dtype dispatch, gathering a strided (possibly broadcast) tensor into a
//! contiguous buffer of a compute type, and scattering results back.

use crate::types::dtype;
use half::{bf16, f16};
use std::borrow::Cow;

/// Most dimensions a tensor may have here.
pub const MAX_DIMS: usize = 8;

/// A strided tensor in memory the kernels can address: element 0, dtype,
/// shape and strides (in elements). Plain data, copied into kernel closures.
#[derive(Clone, Copy, Debug)]
pub struct TView {
    /// Address of element 0.
    pub ptr: *mut u8,
    /// A `diopiDtype_t` value.
    pub dtype: i32,
    /// Number of dimensions (0 for a 0-dim tensor).
    pub ndim: usize,
    /// Sizes (first `ndim` used).
    pub shape: [i64; MAX_DIMS],
    /// Strides in elements (first `ndim` used).
    pub strides: [i64; MAX_DIMS],
}

// SAFETY: a TView is an address plus metadata; kernels that use it run in
// stream order, after the framework made the memory valid, and the
// framework keeps it alive until the stream passes the kernel.
unsafe impl Send for TView {}
// SAFETY: as above; shared views are only read concurrently.
unsafe impl Sync for TView {}

/// Row-major contiguous strides of a shape.
pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1].max(1);
    }
    s
}

impl TView {
    /// A view of `shape`/`strides` at `ptr`. Panics beyond `MAX_DIMS` (callers check).
    pub fn new(ptr: *mut u8, dtype: i32, shape: &[i64], strides: &[i64]) -> TView {
        assert!(shape.len() <= MAX_DIMS && shape.len() == strides.len());
        let mut v = TView {
            ptr,
            dtype,
            ndim: shape.len(),
            shape: [0; MAX_DIMS],
            strides: [0; MAX_DIMS],
        };
        v.shape[..shape.len()].copy_from_slice(shape);
        v.strides[..shape.len()].copy_from_slice(strides);
        v
    }

    /// A contiguous view of `shape` at `ptr`.
    pub fn contiguous(ptr: *mut u8, dtype: i32, shape: &[i64]) -> TView {
        TView::new(ptr, dtype, shape, &contiguous_strides(shape))
    }

    /// Sizes.
    pub fn shape(&self) -> &[i64] {
        &self.shape[..self.ndim]
    }
    /// Strides.
    pub fn strides(&self) -> &[i64] {
        &self.strides[..self.ndim]
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape().iter().map(|&s| s.max(0) as usize).product()
    }
    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        dtype::size(self.dtype).unwrap_or(1)
    }
    /// Whether elements are row-major contiguous (size-1 dims ignored).
    pub fn is_contiguous(&self) -> bool {
        let mut expect = 1i64;
        for d in (0..self.ndim).rev() {
            if self.shape[d] != 1 {
                if self.strides[d] != expect {
                    return false;
                }
                expect *= self.shape[d];
            }
        }
        true
    }
    /// The byte range [lo, hi) the view touches (empty for numel 0).
    pub fn byte_range(&self) -> (usize, usize) {
        if self.numel() == 0 {
            return (self.ptr as usize, self.ptr as usize);
        }
        let (mut lo, mut hi) = (0i64, 0i64);
        for d in 0..self.ndim {
            let ext = (self.shape[d] - 1) * self.strides[d];
            if ext < 0 {
                lo += ext;
            } else {
                hi += ext;
            }
        }
        let es = self.elem_size() as i64;
        let base = self.ptr as i64;
        ((base + lo * es) as usize, (base + (hi + 1) * es) as usize)
    }
    /// Whether two views share any byte of memory.
    pub fn overlaps(&self, other: &TView) -> bool {
        let (a0, a1) = self.byte_range();
        let (b0, b1) = other.byte_range();
        a0 < b1 && b0 < a1
    }
    /// Whether two views address exactly the same elements in the same order.
    pub fn same_layout(&self, other: &TView) -> bool {
        self.ptr == other.ptr
            && self.dtype == other.dtype
            && self.shape() == other.shape()
            && self.strides() == other.strides()
    }
    /// Strides of this view broadcast to `shape` (numpy rules), or None if
    /// the shapes are incompatible.
    pub fn broadcast_strides(&self, shape: &[i64]) -> Option<Vec<i64>> {
        if self.ndim > shape.len() {
            // leading size-1 dims may be dropped
            let extra = self.ndim - shape.len();
            if self.shape[..extra].iter().any(|&s| s != 1) {
                return None;
            }
            let sub = TView::new(
                self.ptr,
                self.dtype,
                &self.shape[extra..self.ndim],
                &self.strides[extra..self.ndim],
            );
            return sub.broadcast_strides(shape);
        }
        let lead = shape.len() - self.ndim;
        let mut st = vec![0i64; shape.len()];
        for d in 0..self.ndim {
            let s = self.shape[d];
            if s == shape[lead + d] {
                st[lead + d] = if s == 1 { 0 } else { self.strides[d] };
            } else if s == 1 {
                st[lead + d] = 0;
            } else {
                return None;
            }
        }
        Some(st)
    }
    /// This view with dimensions `d0` and `d1` exchanged.
    pub fn transposed(&self, d0: usize, d1: usize) -> TView {
        let mut v = *self;
        v.shape.swap(d0, d1);
        v.strides.swap(d0, d1);
        v
    }
}

/// The numpy broadcast of two shapes, or None.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let x = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let y = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return None;
        };
    }
    Some(out)
}

/// Calls `f(i, offset)` for every element `i` (row-major order over
/// `shape`) with its offset under `strides` (in elements).
#[inline]
pub fn for_each_offset(shape: &[i64], strides: &[i64], mut f: impl FnMut(usize, isize)) {
    for_each_row(shape, strides, |first, base, len, stride| {
        for j in 0..len {
            f(first + j, base + j as isize * stride);
        }
    });
}

/// Calls `f(first, base, len, stride)` for every innermost row of `shape`
/// (row-major): elements `first..first + len` sit at offsets `base + j *
/// stride` under `strides` (in elements). A kernel's inner loop then runs
/// over one row at a time.
#[inline]
pub fn for_each_row(shape: &[i64], strides: &[i64], mut f: impl FnMut(usize, isize, usize, isize)) {
    if shape.iter().any(|&s| s <= 0) {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(0, 0, 1, 0);
        return;
    }
    let inner = shape[nd - 1] as usize;
    let inner_stride = strides[nd - 1] as isize;
    let mut idx = [0i64; MAX_DIMS];
    let mut base: isize = 0;
    let mut first = 0usize;
    loop {
        f(first, base, inner, inner_stride);
        first += inner;
        let mut d = nd - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            base += strides[d] as isize;
            if idx[d] < shape[d] {
                break;
            }
            base -= strides[d] as isize * shape[d] as isize;
            idx[d] = 0;
        }
    }
}

/// A compute type kernels work in: f32, f64 or i64.
pub trait Num: Copy + Send + Sync + Default + PartialOrd + std::fmt::Debug + 'static {
    /// From f32.
    fn from_f32(v: f32) -> Self;
    /// From f64.
    fn from_f64(v: f64) -> Self;
    /// From i64.
    fn from_i64(v: i64) -> Self;
    /// To f32.
    fn to_f32(self) -> f32;
    /// To f64.
    fn to_f64(self) -> f64;
    /// To i64.
    fn to_i64(self) -> i64;
    /// The dtype whose storage equals this type.
    const DTYPE: i32;
    /// a + b (integers wrap).
    fn add(self, b: Self) -> Self;
    /// a - b (integers wrap).
    fn sub(self, b: Self) -> Self;
    /// a * b (integers wrap).
    fn mul(self, b: Self) -> Self;
    /// a / b (integer division by zero gives 0).
    fn div(self, b: Self) -> Self;
    /// The smaller (NaN wins for floats).
    fn min_nan(self, b: Self) -> Self;
    /// The larger (NaN wins for floats).
    fn max_nan(self, b: Self) -> Self;
    /// Whether the value is NaN.
    fn is_nan(self) -> bool;
}

impl Num for f32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    const DTYPE: i32 = dtype::F32;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        self + b
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        self - b
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        self * b
    }
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        self / b
    }
    #[inline(always)]
    fn min_nan(self, b: Self) -> Self {
        if self.is_nan() || b.is_nan() {
            Self::NAN
        } else {
            self.min(b)
        }
    }
    #[inline(always)]
    fn max_nan(self, b: Self) -> Self {
        if self.is_nan() || b.is_nan() {
            Self::NAN
        } else {
            self.max(b)
        }
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}
impl Num for f64 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v as f64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self as i64
    }
    const DTYPE: i32 = dtype::F64;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        self + b
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        self - b
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        self * b
    }
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        self / b
    }
    #[inline(always)]
    fn min_nan(self, b: Self) -> Self {
        if self.is_nan() || b.is_nan() {
            Self::NAN
        } else {
            self.min(b)
        }
    }
    #[inline(always)]
    fn max_nan(self, b: Self) -> Self {
        if self.is_nan() || b.is_nan() {
            Self::NAN
        } else {
            self.max(b)
        }
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}
impl Num for i64 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as i64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as i64
    }
    #[inline(always)]
    fn from_i64(v: i64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn to_i64(self) -> i64 {
        self
    }
    const DTYPE: i32 = dtype::I64;
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        self.wrapping_add(b)
    }
    #[inline(always)]
    fn sub(self, b: Self) -> Self {
        self.wrapping_sub(b)
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        self.wrapping_mul(b)
    }
    #[inline(always)]
    fn div(self, b: Self) -> Self {
        self.checked_div(b).unwrap_or(0)
    }
    #[inline(always)]
    fn min_nan(self, b: Self) -> Self {
        self.min(b)
    }
    #[inline(always)]
    fn max_nan(self, b: Self) -> Self {
        self.max(b)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        false
    }
}

/// A storage element type: loads into and stores from a compute type.
pub trait Elem: Copy + 'static {
    /// Convert to the compute type.
    fn load<C: Num>(self) -> C;
    /// Convert from the compute type.
    fn store<C: Num>(c: C) -> Self;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn load<C: Num>(self) -> C { C::from_i64(self as i64) }
            #[inline(always)]
            fn store<C: Num>(c: C) -> Self { c.to_i64() as $t }
        }
    )*};
}
int_elem!(i8, u8, i16, u16, i32, u32, i64, u64);

impl Elem for f32 {
    #[inline(always)]
    fn load<C: Num>(self) -> C {
        C::from_f32(self)
    }
    #[inline(always)]
    fn store<C: Num>(c: C) -> Self {
        c.to_f32()
    }
}
impl Elem for f64 {
    #[inline(always)]
    fn load<C: Num>(self) -> C {
        C::from_f64(self)
    }
    #[inline(always)]
    fn store<C: Num>(c: C) -> Self {
        c.to_f64()
    }
}
impl Elem for f16 {
    #[inline(always)]
    fn load<C: Num>(self) -> C {
        C::from_f32(self.to_f32())
    }
    #[inline(always)]
    fn store<C: Num>(c: C) -> Self {
        f16::from_f32(c.to_f32())
    }
}
impl Elem for bf16 {
    #[inline(always)]
    fn load<C: Num>(self) -> C {
        C::from_f32(self.to_f32())
    }
    #[inline(always)]
    fn store<C: Num>(c: C) -> Self {
        bf16::from_f32(c.to_f32())
    }
}
/// A bool element (one byte).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Bool8(pub u8);
impl Elem for Bool8 {
    #[inline(always)]
    fn load<C: Num>(self) -> C {
        C::from_i64((self.0 != 0) as i64)
    }
    #[inline(always)]
    fn store<C: Num>(c: C) -> Self {
        Bool8((c.to_f64() != 0.0) as u8)
    }
}

/// Runs `$body` with `$E` bound to the storage type of dtype `$dt`
/// (`$other` for an unsupported dtype).
#[macro_export]
macro_rules! dispatch_elem {
    ($dt:expr, $E:ident => $body:expr, _ => $other:expr) => {{
        use $crate::types::dtype as __d;
        match $dt {
            __d::F32 => {
                type $E = f32;
                $body
            }
            __d::F64 => {
                type $E = f64;
                $body
            }
            __d::F16 => {
                type $E = half::f16;
                $body
            }
            __d::BF16 => {
                type $E = half::bf16;
                $body
            }
            __d::I64 => {
                type $E = i64;
                $body
            }
            __d::I32 => {
                type $E = i32;
                $body
            }
            __d::I16 => {
                type $E = i16;
                $body
            }
            __d::I8 => {
                type $E = i8;
                $body
            }
            __d::U8 => {
                type $E = u8;
                $body
            }
            __d::U16 => {
                type $E = u16;
                $body
            }
            __d::U32 => {
                type $E = u32;
                $body
            }
            __d::U64 => {
                type $E = u64;
                $body
            }
            __d::BOOL => {
                type $E = $crate::view::Bool8;
                $body
            }
            _ => $other,
        }
    }};
}

fn gather_typed<E: Elem, C: Num>(v: &TView, shape: &[i64], strides: &[i64]) -> Vec<C> {
    let n: usize = shape.iter().map(|&s| s.max(0) as usize).product();
    let mut out = vec![C::default(); n];
    let p = v.ptr as *const E;
    for_each_row(shape, strides, |first, base, len, stride| {
        let dst = &mut out[first..first + len];
        if stride == 0 {
            // SAFETY: the offset stays inside the view the framework described.
            let x: C = unsafe { p.offset(base).read_unaligned() }.load();
            dst.fill(x);
        } else {
            for (j, d) in dst.iter_mut().enumerate() {
                // SAFETY: as above, for each element of the row.
                *d = unsafe { p.offset(base + j as isize * stride).read_unaligned() }.load();
            }
        }
    });
    out
}

/// The elements of `v` broadcast to `shape`, in row-major order, as `C`.
/// Borrowed when `v` already is contiguous `C` of that shape.
pub fn read_bcast<'a, C: Num>(v: &'a TView, shape: &[i64]) -> Cow<'a, [C]> {
    if v.dtype == C::DTYPE && v.shape() == shape && v.is_contiguous() {
        // SAFETY: contiguous elements of type C, `numel` of them.
        return Cow::Borrowed(unsafe { std::slice::from_raw_parts(v.ptr as *const C, v.numel()) });
    }
    let strides = v
        .broadcast_strides(shape)
        .expect("shapes checked before launch");
    Cow::Owned(
        dispatch_elem!(v.dtype, E => gather_typed::<E, C>(v, shape, &strides), _ => vec![C::default(); shape.iter().product::<i64>() as usize]),
    )
}

/// The elements of `v` in row-major order as `C`.
pub fn read<C: Num>(v: &TView) -> Cow<'_, [C]> {
    read_bcast(v, v.shape())
}

/// The elements of `v` in row-major order as a fresh vector of `C`.
pub fn read_owned<C: Num>(v: &TView) -> Vec<C> {
    read::<C>(v).into_owned()
}

fn scatter_typed<E: Elem, C: Num>(v: &TView, data: &[C]) {
    let p = v.ptr as *mut E;
    for_each_row(v.shape(), v.strides(), |first, base, len, stride| {
        for (j, &x) in data[first..first + len].iter().enumerate() {
            // SAFETY: offsets stay inside the view the framework described.
            unsafe {
                p.offset(base + j as isize * stride)
                    .write_unaligned(E::store(x))
            };
        }
    });
}

/// Writes `data` (row-major, `v.numel()` elements) into `v`, converting.
pub fn write<C: Num>(v: &TView, data: &[C]) {
    debug_assert_eq!(data.len(), v.numel());
    if v.dtype == C::DTYPE && v.is_contiguous() {
        // SAFETY: contiguous elements of type C; `data` may not overlap the
        // destination (callers compute into separate buffers).
        unsafe { std::ptr::copy(data.as_ptr(), v.ptr as *mut C, data.len()) };
        return;
    }
    dispatch_elem!(v.dtype, E => scatter_typed::<E, C>(v, data), _ => ())
}

/// Copies `src` into `dst` element by element (broadcasting src, any
/// dtypes), staging through a buffer when the two overlap.
pub fn copy(dst: &TView, src: &TView) {
    if src.dtype == dst.dtype
        && src.shape() == dst.shape()
        && src.is_contiguous()
        && dst.is_contiguous()
    {
        let bytes = dst.numel() * dst.elem_size();
        // SAFETY: both ranges are `bytes` long and valid; `copy` allows overlap.
        unsafe { std::ptr::copy(src.ptr as *const u8, dst.ptr, bytes) };
        return;
    }
    if src.dtype == dst.dtype && !src.overlaps(dst) {
        if let Some(st) = src.broadcast_strides(dst.shape()) {
            match dst.elem_size() {
                1 => copy_raw::<u8>(dst, src, &st),
                2 => copy_raw::<u16>(dst, src, &st),
                4 => copy_raw::<u32>(dst, src, &st),
                _ => copy_raw::<u64>(dst, src, &st),
            }
            return;
        }
    }
    if dtype::is_float(dst.dtype) || dtype::is_float(src.dtype) {
        if dst.dtype == dtype::F64 || src.dtype == dtype::F64 {
            let d = read_bcast::<f64>(src, dst.shape()).into_owned();
            write(dst, &d);
        } else {
            let d = read_bcast::<f32>(src, dst.shape()).into_owned();
            write(dst, &d);
        }
    } else {
        let d = read_bcast::<i64>(src, dst.shape()).into_owned();
        write(dst, &d);
    }
}

/// Same-dtype strided copy, element by element as raw bits (no overlap).
fn copy_raw<T: Copy>(dst: &TView, src: &TView, src_strides: &[i64]) {
    let (d, s) = (dst.ptr as *mut T, src.ptr as *const T);
    let nd = dst.ndim;
    let (ds, ss) = (dst.strides(), src_strides);
    if nd >= 1 && ds[nd - 1] == 1 && ss[nd - 1] == 1 {
        // rows contiguous on both sides: one copy per row
        let len = dst.shape[nd - 1] as usize;
        for_each_offset2(
            &dst.shape()[..nd - 1],
            &ds[..nd - 1],
            &ss[..nd - 1],
            |od, os| {
                // SAFETY: both rows lie inside their views, which do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(s.offset(os), d.offset(od), len) };
            },
        );
        return;
    }
    if nd >= 2 && ds[nd - 1] == 1 && ss[nd - 2] == 1 && ss[nd - 1] != 1 {
        // a transpose in the last two dims: square tiles, so both sides
        // stay in cache
        const TILE: usize = 8;
        let (rows, cols) = (dst.shape[nd - 2] as usize, dst.shape[nd - 1] as usize);
        let (drs, scs) = (ds[nd - 2] as isize, ss[nd - 1] as isize);
        for_each_offset2(
            &dst.shape()[..nd - 2],
            &ds[..nd - 2],
            &ss[..nd - 2],
            |od, os| {
                for r0 in (0..rows).step_by(TILE) {
                    for c0 in (0..cols).step_by(TILE) {
                        for c in c0..(c0 + TILE).min(cols) {
                            for r in r0..(r0 + TILE).min(rows) {
                                let (r, c) = (r as isize, c as isize);
                                // SAFETY: (r, c) lies inside both views, which do
                                // not overlap.
                                unsafe {
                                    d.offset(od + r * drs + c).write_unaligned(
                                        s.offset(os + r + c * scs).read_unaligned(),
                                    )
                                };
                            }
                        }
                    }
                }
            },
        );
        return;
    }
    for_each_offset2(dst.shape(), dst.strides(), src_strides, |od, os| {
        // SAFETY: both offsets lie inside their views, which do not overlap.
        unsafe { d.offset(od).write_unaligned(s.offset(os).read_unaligned()) };
    });
}

/// Calls `f(offset_a, offset_b)` for every element of `shape` in row-major
/// order, with its offsets under two sets of strides.
#[inline]
pub fn for_each_offset2(shape: &[i64], sa: &[i64], sb: &[i64], mut f: impl FnMut(isize, isize)) {
    if shape.iter().any(|&s| s <= 0) {
        return;
    }
    let nd = shape.len();
    if nd == 0 {
        f(0, 0);
        return;
    }
    let inner = shape[nd - 1] as usize;
    let (ia, ib) = (sa[nd - 1] as isize, sb[nd - 1] as isize);
    let mut idx = [0i64; MAX_DIMS];
    let (mut ba, mut bb) = (0isize, 0isize);
    loop {
        let (mut oa, mut ob) = (ba, bb);
        for _ in 0..inner {
            f(oa, ob);
            oa += ia;
            ob += ib;
        }
        let mut d = nd - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            ba += sa[d] as isize;
            bb += sb[d] as isize;
            if idx[d] < shape[d] {
                break;
            }
            ba -= sa[d] as isize * shape[d] as isize;
            bb -= sb[d] as isize * shape[d] as isize;
            idx[d] = 0;
        }
    }
}

/// Runs `f` on a contiguous `C` buffer for `out` and stores it: the buffer
/// is `out`'s own memory when `out` is contiguous `C` and overlaps none of
/// `inputs`, else a temporary written back afterwards. `f` must write every
/// element; the buffer starts zeroed only when it is a temporary.
pub fn with_out<C: Num>(out: &TView, inputs: &[&TView], f: impl FnOnce(&mut [C])) {
    let n = out.numel();
    if out.dtype == C::DTYPE && out.is_contiguous() && !inputs.iter().any(|i| i.overlaps(out)) {
        // SAFETY: out is contiguous C memory of n elements that no input shares.
        let buf = unsafe { std::slice::from_raw_parts_mut(out.ptr as *mut C, n) };
        f(buf);
    } else {
        let mut buf = vec![C::default(); n];
        f(&mut buf);
        write(out, &buf);
    }
}

/// A view with `perm` applied to its dimensions.
pub fn permuted(v: &TView, perm: &[usize]) -> TView {
    let shape: Vec<i64> = perm.iter().map(|&p| v.shape[p]).collect();
    let strides: Vec<i64> = perm.iter().map(|&p| v.strides[p]).collect();
    TView::new(v.ptr, v.dtype, &shape, &strides)
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A view of a vector's memory with the given shape and strides.
    pub(crate) fn view_of<T>(v: &mut [T], dt: i32, shape: &[i64], strides: &[i64]) -> TView {
        TView::new(v.as_mut_ptr() as *mut u8, dt, shape, strides)
    }
    /// A contiguous f32 view of a vector.
    pub(crate) fn f32v(v: &mut [f32], shape: &[i64]) -> TView {
        TView::contiguous(v.as_mut_ptr() as *mut u8, dtype::F32, shape)
    }
    /// Asserts a kernel's f32 result `a` matches its CPU reference `b` under
    /// the tolerance policy (docs/tolerance.md), for a result that sums at
    /// most `reduction_len` terms per element.
    #[track_caller]
    pub(crate) fn close(a: &[f32], b: &[f32], reduction_len: usize) {
        dipu_diopi::tolerance::assert_close(a, b, "float32", reduction_len, "kernel vs reference");
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn offsets_follow_strides() {
        let mut seen = vec![];
        for_each_offset(&[2, 3], &[1, 2], |i, o| seen.push((i, o)));
        assert_eq!(seen, vec![(0, 0), (1, 2), (2, 4), (3, 1), (4, 3), (5, 5)]);
        let mut zero = vec![];
        for_each_offset(&[], &[], |i, o| zero.push((i, o)));
        assert_eq!(zero, vec![(0, 0)]);
        let mut none = 0;
        for_each_offset(&[3, 0], &[1, 1], |_, _| none += 1);
        assert_eq!(none, 0);
    }

    #[test]
    fn broadcast_read_and_strided_write() {
        let mut row = vec![1.0f32, 2.0, 3.0];
        let r = f32v(&mut row, &[3]);
        let b = read_bcast::<f32>(&r, &[2, 3]);
        assert_eq!(&*b, &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        // write into a transposed f16 view
        let mut mem = vec![f16::ZERO; 6];
        let t = view_of(&mut mem, dtype::F16, &[2, 3], &[1, 2]);
        write(&t, &b);
        let got: Vec<f32> = mem.iter().map(|h| h.to_f32()).collect();
        assert_eq!(got, vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
        assert!(r.broadcast_strides(&[2, 4]).is_none());
        assert_eq!(broadcast_shapes(&[2, 1], &[3]), Some(vec![2, 3]));
    }

    #[test]
    fn overlap_detection() {
        let mut m = vec![0f32; 8];
        let a = f32v(&mut m[..4], &[4]);
        let mut m2 = m.clone();
        let b = f32v(&mut m2, &[8]);
        assert!(!a.overlaps(&b));
        let whole = f32v(&mut m, &[8]);
        let a = TView::new(whole.ptr, dtype::F32, &[4], &[2]);
        assert!(a.overlaps(&whole));
        assert!(whole.same_layout(&whole));
    }

    #[test]
    fn same_dtype_strided_copy_transposes_and_broadcasts() {
        // a 2x3 int16 transposed into a contiguous 3x2, then a row broadcast
        let mut src: Vec<i16> = (0..6).collect();
        let sv = view_of(&mut src, dtype::I16, &[2, 3], &[3, 1]);
        let mut dst = vec![0i16; 6];
        let dv = view_of(&mut dst, dtype::I16, &[3, 2], &[2, 1]);
        copy(&dv, &sv.transposed(0, 1));
        assert_eq!(dst, vec![0, 3, 1, 4, 2, 5]);
        let row = view_of(&mut src[..2], dtype::I16, &[2], &[1]);
        copy(&dv, &row);
        assert_eq!(dst, vec![0, 1, 0, 1, 0, 1]);
        // a 0-dim bf16
        let mut one = vec![half::bf16::from_f32(1.5)];
        let ov = view_of(&mut one, dtype::BF16, &[], &[]);
        let mut many = vec![half::bf16::ZERO; 3];
        let mv = view_of(&mut many, dtype::BF16, &[3], &[1]);
        copy(&mv, &ov);
        assert!(many.iter().all(|v| v.to_f32() == 1.5));
    }

    #[test]
    fn copy_overlapping_strided() {
        // shift a buffer by one element in place: dst = m[1..], src = m[..3]
        let mut m = vec![1.0f32, 2.0, 3.0, 4.0];
        let src = TView::new(m.as_mut_ptr() as *mut u8, dtype::F32, &[3], &[1]);
        // SAFETY: test pointer arithmetic inside the vector.
        let dst = TView::new(
            unsafe { m.as_mut_ptr().add(1) } as *mut u8,
            dtype::F32,
            &[3],
            &[1],
        );
        copy(&dst, &src);
        assert_eq!(m, vec![1.0, 1.0, 2.0, 3.0]);
        // int64 -> bool cast through a strided view
        let mut ints = vec![0i64, 5, 0, -1];
        let iv = view_of(&mut ints, dtype::I64, &[2], &[2]);
        let mut bools = vec![9u8; 2];
        let bv = view_of(&mut bools, dtype::BOOL, &[2], &[1]);
        copy(&bv, &iv);
        assert_eq!(bools, vec![0, 0]);
        let iv = view_of(&mut ints, dtype::I64, &[2], &[1]);
        copy(&bv, &iv);
        assert_eq!(bools, vec![0, 1]);
    }
}
