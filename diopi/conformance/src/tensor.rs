//! Host tensors: the logical values of a test tensor, and the layouts
//! (contiguous, transposed, sliced) its device storage can take.

use super::dtype::Dtype;

/// A tensor's values in row-major order, already rounded to its dtype.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HostTensor {
    /// Element type.
    pub(crate) dtype: Dtype,
    /// Sizes; empty for a 0-dim tensor.
    pub(crate) shape: Vec<i64>,
    /// `numel` values, row-major.
    pub(crate) data: Vec<f64>,
}

/// Number of elements of `shape` (1 for a 0-dim shape).
pub(crate) fn numel(shape: &[i64]) -> usize {
    shape.iter().map(|&s| s.max(0) as usize).product()
}

/// Row-major strides of `shape`, in elements.
pub(crate) fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1].max(1);
    }
    strides
}

impl HostTensor {
    /// A tensor of `dtype` holding `data` (rounded to `dtype`).
    pub(crate) fn new(dtype: Dtype, shape: &[i64], data: Vec<f64>) -> HostTensor {
        debug_assert_eq!(numel(shape), data.len(), "shape {shape:?}");
        let data = data.into_iter().map(|v| dtype.round(v)).collect();
        HostTensor {
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// A tensor of `dtype` filled with `v`.
    pub(crate) fn full(dtype: Dtype, shape: &[i64], v: f64) -> HostTensor {
        HostTensor::new(dtype, shape, vec![v; numel(shape)])
    }

    /// Element count.
    pub(crate) fn numel(&self) -> usize {
        self.data.len()
    }

    /// Number of dimensions.
    pub(crate) fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Size of dimension `d`.
    pub(crate) fn size(&self, d: usize) -> usize {
        self.shape[d] as usize
    }

    /// The same values converted to `dtype`.
    pub(crate) fn to(&self, dtype: Dtype) -> HostTensor {
        HostTensor::new(dtype, &self.shape, self.data.clone())
    }

    /// A short description: `float32[2, 3]`.
    pub(crate) fn describe(&self) -> String {
        format!("{}{:?}", self.dtype.name(), self.shape)
    }
}

/// How a tensor's elements sit in its device storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Row-major, offset 0, no gaps.
    Contiguous,
    /// The last two dimensions swapped in storage (a transposed view);
    /// for fewer than two dimensions, same as `Sliced`.
    Transposed,
    /// Every other element of a storage twice as long along the last
    /// dimension, starting at offset 1 (a sliced view `x[..., 1::2]`).
    Sliced,
    /// Dimension 0 broadcast: stride 0, the storage holds one slice (an
    /// expanded view; the values must repeat along dimension 0).
    Expanded,
}

/// A tensor placed in a storage: strides, offset and the storage's size,
/// all in elements.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Placement {
    /// Strides of the view.
    pub(crate) strides: Vec<i64>,
    /// Element offset of element 0.
    pub(crate) offset: i64,
    /// Storage length in elements.
    pub(crate) storage_len: usize,
}

impl Placement {
    /// Where `shape` goes under `layout`. Layouts that make no sense for the
    /// shape (0-dim, empty) fall back to contiguous.
    pub(crate) fn new(shape: &[i64], layout: Layout) -> Placement {
        let n = numel(shape);
        let contiguous = Placement {
            strides: contiguous_strides(shape),
            offset: 0,
            storage_len: n,
        };
        if shape.is_empty() || n == 0 {
            return contiguous;
        }
        let nd = shape.len();
        match layout {
            Layout::Contiguous => contiguous,
            Layout::Transposed if nd >= 2 => {
                let mut swapped = shape.to_vec();
                swapped.swap(nd - 1, nd - 2);
                let mut strides = contiguous_strides(&swapped);
                strides.swap(nd - 1, nd - 2);
                Placement {
                    strides,
                    offset: 0,
                    storage_len: n,
                }
            }
            Layout::Expanded => {
                let mut strides = contiguous_strides(shape);
                strides[0] = 0;
                Placement {
                    strides,
                    offset: 0,
                    storage_len: numel(&shape[1..]),
                }
            }
            Layout::Transposed | Layout::Sliced => {
                let mut wide = shape.to_vec();
                wide[nd - 1] *= 2;
                let mut strides = contiguous_strides(&wide);
                strides[nd - 1] = 2;
                Placement {
                    strides,
                    offset: 1,
                    storage_len: numel(&wide) + 1,
                }
            }
        }
    }

    /// Storage element index of each logical element, row-major.
    pub(crate) fn positions(&self, shape: &[i64]) -> Vec<usize> {
        let n = numel(shape);
        let mut out = Vec::with_capacity(n);
        let mut idx = vec![0i64; shape.len()];
        for _ in 0..n {
            let off: i64 = idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
            out.push((self.offset + off) as usize);
            for d in (0..shape.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_layouts() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(numel(&[]), 1);
        assert_eq!(numel(&[0, 3]), 0);
        let t = Placement::new(&[2, 3], Layout::Transposed);
        assert_eq!(t.strides, vec![1, 2]);
        assert_eq!(t.positions(&[2, 3]), vec![0, 2, 4, 1, 3, 5]);
        let s = Placement::new(&[2, 2], Layout::Sliced);
        assert_eq!(s.strides, vec![4, 2]);
        assert_eq!(s.positions(&[2, 2]), vec![1, 3, 5, 7]);
        assert_eq!(s.storage_len, 9);
        let e = Placement::new(&[3, 2], Layout::Expanded);
        assert_eq!((e.strides.clone(), e.storage_len), (vec![0, 1], 2));
        assert_eq!(e.positions(&[3, 2]), vec![0, 1, 0, 1, 0, 1]);
        let z = Placement::new(&[], Layout::Sliced);
        assert_eq!(z.positions(&[]), vec![0]);
    }
}
