//! Tensor descriptors: checking and reading one a framework filled
//! ([`TensorInfo`]), and owning one built from Rust ([`OwnedTensor`]).

use std::ffi::c_void;

use dipu_runtime::{CopyKind, Error, Result, Runtime};

use crate::types::{ConstTensorHandle, Dtype, TensorDesc, TensorHandle, HOST_DEVICE, TENSOR_MAGIC};

/// Row-major (contiguous) strides of `shape`, in elements.
pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// Elements of a tensor of `shape` (1 for a 0-dim tensor); `None` when
/// a size is negative or the product overflows.
pub fn numel_of(shape: &[i64]) -> Option<i64> {
    shape
        .iter()
        .try_fold(1i64, |n, &s| if s < 0 { None } else { n.checked_mul(s) })
}

/// Elements spanned from element 0 to the last element (inclusive) of a
/// tensor of `shape` and `strides`: `1 + Σ (size_i - 1)·stride_i`, 0 for
/// an empty tensor. `None` for a negative stride or an overflow.
pub fn span_of(shape: &[i64], strides: &[i64]) -> Option<i64> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape
        .iter()
        .zip(strides)
        .try_fold(1i64, |acc, (&size, &stride)| {
            if stride < 0 || size < 0 {
                return None;
            }
            acc.checked_add((size - 1).checked_mul(stride)?)
        })
}

/// What a descriptor says, checked and copied out of it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The element type.
    pub dtype: Dtype,
    /// [`HOST_DEVICE`] (-1) for host memory, else the dipu device.
    pub device: i32,
    /// Sizes (empty for a 0-dim tensor).
    pub shape: Vec<i64>,
    /// Strides in elements.
    pub strides: Vec<i64>,
    /// Base of the storage.
    pub storage: *mut c_void,
    /// Element 0's distance from `storage`, in elements.
    pub storage_offset: i64,
    /// Bytes of the whole storage.
    pub storage_nbytes: usize,
}

impl TensorInfo {
    /// Reads and checks the descriptor `handle` points at: NULL, a wrong
    /// magic, an unknown dtype, a negative ndim or size, missing shape or
    /// stride arrays, or a tensor reaching past its storage are
    /// `InvalidArgument` errors.
    ///
    /// # Safety
    /// `handle` must be NULL or point at a readable `struct diopiTensor`
    /// whose shape and stride arrays hold `ndim` readable entries.
    pub unsafe fn read(handle: ConstTensorHandle) -> Result<TensorInfo> {
        // SAFETY: forwarded caller's contract.
        let d = unsafe { desc(handle) }?;
        let dtype_size = d.dtype.size().ok_or_else(|| {
            Error::invalid_argument(format!("tensor {handle:p}: unknown dtype {}", d.dtype.0))
        })?;
        if d.ndim < 0 {
            return Err(Error::invalid_argument(format!(
                "tensor {handle:p}: ndim {} is negative",
                d.ndim
            )));
        }
        if d.device < HOST_DEVICE {
            return Err(Error::invalid_argument(format!(
                "tensor {handle:p}: device {} (-1 is host memory, 0.. a device)",
                d.device
            )));
        }
        let n = d.ndim as usize;
        if n > 0 && (d.shape.is_null() || d.strides.is_null()) {
            return Err(Error::invalid_argument(format!(
                "tensor {handle:p}: {n} dimensions but a NULL shape or strides array"
            )));
        }
        let (shape, strides) = if n == 0 {
            (Vec::new(), Vec::new())
        } else {
            // SAFETY: not NULL (checked); `ndim` readable entries by the caller's contract.
            unsafe {
                (
                    std::slice::from_raw_parts(d.shape, n).to_vec(),
                    std::slice::from_raw_parts(d.strides, n).to_vec(),
                )
            }
        };
        let span = span_of(&shape, &strides).ok_or_else(|| {
            Error::invalid_argument(format!(
                "tensor {handle:p}: shape {shape:?} and strides {strides:?} are not valid \
                 (negative or overflowing)"
            ))
        })?;
        if span > 0 {
            let end = d
                .storage_offset
                .checked_add(span)
                .and_then(|e| e.checked_mul(dtype_size as i64));
            match end {
                Some(end) if d.storage_offset >= 0 && end as u128 <= d.storage_nbytes as u128 => {}
                _ => {
                    return Err(Error::invalid_argument(format!(
                        "tensor {handle:p}: shape {shape:?}, strides {strides:?} and storage \
                         offset {} of {} reach past its storage of {} bytes",
                        d.storage_offset,
                        d.dtype.name(),
                        d.storage_nbytes
                    )))
                }
            }
            if d.storage.is_null() {
                return Err(Error::invalid_argument(format!(
                    "tensor {handle:p} has elements but a NULL storage"
                )));
            }
        }
        Ok(TensorInfo {
            dtype: d.dtype,
            device: d.device,
            shape,
            strides,
            storage: d.storage,
            storage_offset: d.storage_offset,
            storage_nbytes: d.storage_nbytes,
        })
    }

    /// Elements (1 for a 0-dim tensor).
    pub fn numel(&self) -> i64 {
        numel_of(&self.shape).unwrap_or(0)
    }

    /// Bytes of one element.
    pub fn elem_size(&self) -> usize {
        self.dtype.size().unwrap_or(0)
    }

    /// Address of element 0.
    pub fn data(&self) -> *mut c_void {
        self.storage
            .cast::<u8>()
            .wrapping_add(self.storage_offset as usize * self.elem_size())
            .cast()
    }

    /// Whether the strides are row-major for the shape (sizes 1 and 0 aside).
    pub fn is_contiguous(&self) -> bool {
        let expected = contiguous_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&expected))
            .all(|(&size, (&s, &e))| size <= 1 || s == e)
    }

    /// Bytes from element 0 to the end of the last element.
    pub fn span_bytes(&self) -> usize {
        span_of(&self.shape, &self.strides).unwrap_or(0) as usize * self.elem_size()
    }

    /// The bytes from element 0 to the end of the last element (strides as
    /// they are: element `i` is at `Σ index·stride` elements), copied to
    /// the host. Device memory is copied with the runtime's synchronous
    /// copy, so synchronize the stream the kernel ran on first.
    pub fn read_bytes(&self, rt: &Runtime) -> Result<Vec<u8>> {
        let n = self.span_bytes();
        let mut out = vec![0u8; n];
        if n == 0 {
            return Ok(out);
        }
        if self.device == HOST_DEVICE {
            // SAFETY: `read` checked that the span lies inside the storage,
            // which the descriptor's owner keeps valid.
            unsafe { std::ptr::copy_nonoverlapping(self.data().cast::<u8>(), out.as_mut_ptr(), n) };
        } else {
            // SAFETY: the destination is our buffer of `n` bytes; the
            // runtime checks the device side lies inside a live allocation.
            unsafe {
                rt.memcpy(
                    out.as_mut_ptr().cast(),
                    self.data(),
                    n,
                    CopyKind::DeviceToHost,
                )?
            };
        }
        Ok(out)
    }

    /// The elements in row-major order, each `elem_size()` bytes, gathered
    /// through the strides (copied to the host as [`TensorInfo::read_bytes`]).
    pub fn read_elements(&self, rt: &Runtime) -> Result<Vec<u8>> {
        let raw = self.read_bytes(rt)?;
        let es = self.elem_size();
        let numel = self.numel() as usize;
        let mut out = Vec::with_capacity(numel * es);
        let mut index = vec![0i64; self.shape.len()];
        for _ in 0..numel {
            let off: i64 = index.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
            let at = off as usize * es;
            out.extend_from_slice(&raw[at..at + es]);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(out)
    }
}

/// The descriptor `handle` points at, its magic checked.
///
/// # Safety
/// `handle` must be NULL or point at a readable `struct diopiTensor`.
pub(crate) unsafe fn desc<'a>(handle: ConstTensorHandle) -> Result<&'a TensorDesc> {
    if handle.is_null() {
        return Err(Error::invalid_argument("the tensor handle is NULL"));
    }
    // SAFETY: not NULL; readable by the caller's contract.
    let d = unsafe { &*handle };
    if d.magic != TENSOR_MAGIC {
        return Err(Error::invalid_argument(format!(
            "{handle:p} is not a dipu-rs tensor descriptor (magic {:#010x}, expected \
             DIPU_DIOPI_TENSOR_MAGIC {TENSOR_MAGIC:#010x})",
            d.magic
        )));
    }
    Ok(d)
}

/// A descriptor owning its shape and stride arrays (not the memory it
/// describes): what [`OwnedTensor::new`] builds from Rust and
/// `dipu_diopi_tensor_create` from C. Its handle stays valid while it lives
/// (the value may move: the descriptor is boxed).
#[derive(Debug)]
pub struct OwnedTensor {
    desc: Box<TensorDesc>,
    shape: Box<[i64]>,
    strides: Box<[i64]>,
}

// SAFETY: the raw pointers inside point at the tensor's own boxed arrays
// (immutable) and at memory the creator manages; nothing is thread-bound.
unsafe impl Send for OwnedTensor {}
// SAFETY: as for Send; `&OwnedTensor` gives no way to mutate.
unsafe impl Sync for OwnedTensor {}

impl OwnedTensor {
    /// A descriptor of `shape` with `strides` (None: contiguous) and
    /// `dtype` at element `storage_offset` of the storage `storage` of
    /// `storage_nbytes` bytes on `device` ([`HOST_DEVICE`] for host
    /// memory). Checked as [`TensorInfo::read`] checks: the tensor must
    /// lie inside its storage. The memory is the caller's to keep alive.
    pub fn new(
        dtype: Dtype,
        device: i32,
        storage: *mut c_void,
        storage_nbytes: usize,
        storage_offset: i64,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<OwnedTensor> {
        let strides = match strides {
            Some(s) if s.len() != shape.len() => {
                return Err(Error::invalid_argument(format!(
                    "shape {shape:?} and strides {s:?} differ in length"
                )))
            }
            Some(s) => s.to_vec(),
            None => contiguous_strides(shape),
        };
        let ndim = i32::try_from(shape.len())
            .map_err(|_| Error::invalid_argument("too many dimensions"))?;
        let shape: Box<[i64]> = shape.into();
        let strides: Box<[i64]> = strides.into();
        let desc = Box::new(TensorDesc {
            magic: TENSOR_MAGIC,
            dtype,
            device,
            ndim,
            storage,
            storage_offset,
            storage_nbytes,
            shape: shape.as_ptr(),
            strides: strides.as_ptr(),
        });
        let t = OwnedTensor {
            desc,
            shape,
            strides,
        };
        // SAFETY: our own descriptor, arrays of `ndim` entries.
        unsafe { TensorInfo::read(t.const_handle()) }?;
        Ok(t)
    }

    /// A copy of the descriptor `handle` points at, owning copies of its
    /// arrays (checked as [`TensorInfo::read`] does).
    ///
    /// # Safety
    /// As for [`TensorInfo::read`].
    pub unsafe fn copy_of(handle: ConstTensorHandle) -> Result<OwnedTensor> {
        // SAFETY: forwarded caller's contract.
        let info = unsafe { TensorInfo::read(handle) }?;
        OwnedTensor::new(
            info.dtype,
            info.device,
            info.storage,
            info.storage_nbytes,
            info.storage_offset,
            &info.shape,
            Some(&info.strides),
        )
    }

    /// A contiguous descriptor of a whole host slice (`bytes` must hold
    /// `numel(shape)` elements of `dtype`); the slice must outlive every use.
    pub fn host(dtype: Dtype, bytes: &mut [u8], shape: &[i64]) -> Result<OwnedTensor> {
        OwnedTensor::new(
            dtype,
            HOST_DEVICE,
            bytes.as_mut_ptr().cast(),
            bytes.len(),
            0,
            shape,
            None,
        )
    }

    /// The `diopiTensorHandle_t` to pass to a kernel.
    pub fn handle(&self) -> TensorHandle {
        std::ptr::from_ref::<TensorDesc>(&self.desc).cast_mut()
    }

    /// The `diopiConstTensorHandle_t` to pass to a kernel.
    pub fn const_handle(&self) -> ConstTensorHandle {
        &*self.desc
    }

    /// The descriptor.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }

    /// The sizes.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// The descriptor's contents, checked.
    pub fn info(&self) -> TensorInfo {
        // SAFETY: our own descriptor, checked when made.
        unsafe { TensorInfo::read(self.const_handle()) }.expect("checked when made")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_spans_and_bounds() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<i64>::new());
        assert_eq!(span_of(&[2, 3], &[1, 2]), Some(6));
        assert_eq!(span_of(&[0, 3], &[3, 1]), Some(0));
        assert_eq!(span_of(&[], &[]), Some(1));
        assert_eq!(numel_of(&[]), Some(1));
        let mut buf = vec![0u8; 24];
        let t = OwnedTensor::host(Dtype::FLOAT32, &mut buf, &[2, 3]).unwrap();
        assert_eq!(t.info().numel(), 6);
        assert!(t.info().is_contiguous());
        let err = OwnedTensor::host(Dtype::FLOAT32, &mut buf, &[2, 4]).unwrap_err();
        assert!(err.message().contains("reach past its storage"), "{err}");
        let err = OwnedTensor::host(Dtype(77), &mut buf, &[2]).unwrap_err();
        assert!(err.message().contains("unknown dtype 77"), "{err}");
    }

    #[test]
    fn bad_magic_is_refused() {
        let mut buf = vec![0u8; 8];
        let t = OwnedTensor::host(Dtype::INT32, &mut buf, &[2]).unwrap();
        let mut d = *t.desc();
        d.magic = 0xdead_beef;
        // SAFETY: a readable local descriptor.
        let err = unsafe { TensorInfo::read(&d) }.unwrap_err();
        assert!(
            err.message().contains("not a dipu-rs tensor descriptor"),
            "{err}"
        );
        // SAFETY: NULL is allowed.
        assert!(unsafe { TensorInfo::read(std::ptr::null()) }.is_err());
    }

    #[test]
    fn strided_elements_are_gathered() {
        // A 2x2 transpose of [[0,1],[2,3]] read as bytes.
        let mut buf: Vec<u8> = vec![0, 1, 2, 3];
        let t = OwnedTensor::new(
            Dtype::UINT8,
            HOST_DEVICE,
            buf.as_mut_ptr().cast(),
            4,
            0,
            &[2, 2],
            Some(&[1, 2]),
        )
        .unwrap();
        assert!(!t.info().is_contiguous());
        let rt = dipu_runtime::get().unwrap();
        assert_eq!(t.info().read_elements(&rt).unwrap(), vec![0, 2, 1, 3]);
    }
}
