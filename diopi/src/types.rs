//! Rust mirrors of DIOPI 1.0's C types (`include/diopi/diopirt.h`) and of
//! dipu-rs's tensor descriptor (`include/diopi/dipu_diopi.h`).
//!
//! C enums are `i32` newtypes with associated constants, never Rust
//! enums: a kernel library may return a value this build does not know.

use std::ffi::c_void;

/// Declares an `i32` newtype with named constants.
macro_rules! c_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $var:ident = $val:expr,)* }) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub i32);
        impl $name {
            $($(#[$vdoc])* pub const $var: $name = $name($val);)*
        }
    };
}

c_enum! {
    /// `diopiDtype_t`.
    Dtype {
        /// `diopi_dtype_int8`.
        INT8 = 0,
        /// `diopi_dtype_uint8`.
        UINT8 = 1,
        /// `diopi_dtype_int16`.
        INT16 = 2,
        /// `diopi_dtype_uint16`.
        UINT16 = 3,
        /// `diopi_dtype_int32`.
        INT32 = 4,
        /// `diopi_dtype_uint32`.
        UINT32 = 5,
        /// `diopi_dtype_int64`.
        INT64 = 6,
        /// `diopi_dtype_uint64`.
        UINT64 = 7,
        /// `diopi_dtype_float16`.
        FLOAT16 = 8,
        /// `diopi_dtype_float32`.
        FLOAT32 = 9,
        /// `diopi_dtype_float64`.
        FLOAT64 = 10,
        /// `diopi_dtype_bool`.
        BOOL = 11,
        /// `diopi_dtype_bfloat16`.
        BFLOAT16 = 12,
        /// `diopi_dtype_tfloat32`.
        TFLOAT32 = 13,
        /// `diopi_dtype_complex32`.
        COMPLEX32 = 14,
        /// `diopi_dtype_complex64`.
        COMPLEX64 = 15,
        /// `diopi_dtype_complex128`.
        COMPLEX128 = 16,
        /// `diopi_dtype_unsupported`.
        UNSUPPORTED = 255,
    }
}

impl Dtype {
    /// Bytes of one element; `None` for an unknown value or `UNSUPPORTED`.
    pub fn size(self) -> Option<usize> {
        Some(match self.0 {
            0 | 1 | 11 => 1,
            2 | 3 | 8 | 12 => 2,
            4 | 5 | 9 | 13 | 14 => 4,
            6 | 7 | 10 | 15 => 8,
            16 => 16,
            _ => return None,
        })
    }

    /// DIOPI's name without the prefix ("float32"), or "unknown".
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 17] = [
            "int8",
            "uint8",
            "int16",
            "uint16",
            "int32",
            "uint32",
            "int64",
            "uint64",
            "float16",
            "float32",
            "float64",
            "bool",
            "bfloat16",
            "tfloat32",
            "complex32",
            "complex64",
            "complex128",
        ];
        match self.0 {
            0..=16 => NAMES[self.0 as usize],
            255 => "unsupported",
            _ => "unknown",
        }
    }

    /// Whether `diopiScalar_t::fval` holds a value of this type.
    pub fn is_floating(self) -> bool {
        matches!(self.0, 8 | 9 | 10 | 12 | 13)
    }
}

c_enum! {
    /// `diopiError_t`.
    DiopiError {
        /// `diopiSuccess`.
        SUCCESS = 0,
        /// `diopiErrorOccurred`.
        ERROR_OCCURRED = 1,
        /// `diopiNotInited`.
        NOT_INITED = 2,
        /// `diopi5DNotSupported`.
        FIVE_D_NOT_SUPPORTED = 12,
        /// `diopiNoImplement`.
        NO_IMPLEMENT = 13,
        /// `diopiForceFallbackToCPU`.
        FORCE_FALLBACK_TO_CPU = 14,
        /// `diopiDtypeNotSupported`.
        DTYPE_NOT_SUPPORTED = 1000,
    }
}

impl DiopiError {
    /// Whether this is `diopiSuccess`.
    pub fn is_success(self) -> bool {
        self == DiopiError::SUCCESS
    }

    /// DIOPI's name of the code ("diopiNoImplement"), or "unknown".
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "diopiSuccess",
            1 => "diopiErrorOccurred",
            2 => "diopiNotInited",
            3..=11 => "diopiNoRegistered...Function",
            12 => "diopi5DNotSupported",
            13 => "diopiNoImplement",
            14 => "diopiForceFallbackToCPU",
            1000 => "diopiDtypeNotSupported",
            _ => "unknown diopiError_t",
        }
    }
}

c_enum! {
    /// `diopiDevice_t`: where a tensor's memory is.
    DiopiDevice {
        /// `diopi_host`.
        HOST = 0,
        /// `diopi_device`.
        DEVICE = 1,
    }
}

c_enum! {
    /// `diopiMemoryFormat_t`.
    MemoryFormat {
        /// `Contiguous`.
        CONTIGUOUS = 0,
        /// `ChannelsLast`.
        CHANNELS_LAST = 1,
        /// `ChannelsLast3d`.
        CHANNELS_LAST_3D = 2,
        /// `Preserve`.
        PRESERVE = 3,
        /// `ChannelsLast1d`.
        CHANNELS_LAST_1D = 4,
    }
}

c_enum! {
    /// `diopiReduction_t`.
    Reduction {
        /// `ReductionNone`.
        NONE = 0,
        /// `ReductionMean`.
        MEAN = 1,
        /// `ReductionSum`.
        SUM = 2,
    }
}

c_enum! {
    /// `diopiRoundMode_t`.
    RoundMode {
        /// `RoundModeNone`.
        NONE = 0,
        /// `RoundModeTrunc`.
        TRUNC = 1,
        /// `RoundModeFloor`.
        FLOOR = 2,
    }
}

/// `diopiSize_t`: a borrowed list of int64, passed **by value** (16 bytes,
/// two registers). The empty list is `{NULL, 0}`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DiopiSize {
    /// The first element (NULL when `len` is 0).
    pub data: *const i64,
    /// Number of elements.
    pub len: i64,
}

impl DiopiSize {
    /// The empty list.
    pub const EMPTY: DiopiSize = DiopiSize {
        data: std::ptr::null(),
        len: 0,
    };

    /// A list borrowing `v` (which must outlive every use of the value).
    pub fn from_slice(v: &[i64]) -> DiopiSize {
        DiopiSize {
            data: if v.is_empty() {
                std::ptr::null()
            } else {
                v.as_ptr()
            },
            len: v.len() as i64,
        }
    }

    /// The elements (empty for a NULL `data` or a `len` of 0 or less).
    ///
    /// # Safety
    /// `data` must point at `len` readable elements that outlive `'a`.
    pub unsafe fn as_slice<'a>(self) -> &'a [i64] {
        if self.data.is_null() || self.len <= 0 {
            return &[];
        }
        // SAFETY: not NULL, `len` readable elements by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.data, self.len as usize) }
    }
}

/// The value of a [`DiopiScalar`]: `fval` for floating stypes, else `ival`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ScalarValue {
    /// The value of a floating scalar.
    pub fval: f64,
    /// The value of an integer or bool scalar.
    pub ival: i64,
}

/// `diopiScalar_t`: `{int32 stype; 4 bytes of padding; union}`, 16 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DiopiScalar {
    /// The scalar's type; selects the union member.
    pub stype: Dtype,
    /// The value.
    pub value: ScalarValue,
}

impl DiopiScalar {
    /// A float64 scalar.
    pub fn float(v: f64) -> DiopiScalar {
        DiopiScalar {
            stype: Dtype::FLOAT64,
            value: ScalarValue { fval: v },
        }
    }

    /// An int64 scalar.
    pub fn int(v: i64) -> DiopiScalar {
        DiopiScalar {
            stype: Dtype::INT64,
            value: ScalarValue { ival: v },
        }
    }

    /// The value as f64 (an integer converted).
    pub fn as_f64(&self) -> f64 {
        // SAFETY: both members are plain 8-byte values; stype picks the one written.
        unsafe {
            if self.stype.is_floating() {
                self.value.fval
            } else {
                self.value.ival as f64
            }
        }
    }
}

impl std::fmt::Debug for DiopiScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DiopiScalar({}: {})", self.stype.name(), self.as_f64())
    }
}

/// `DIPU_DIOPI_TENSOR_MAGIC`: the bytes "DIPT" read little-endian.
pub const TENSOR_MAGIC: u32 = 0x5450_4944;

/// The `device` of a host-memory descriptor (`DIPU_DIOPI_HOST_DEVICE`).
pub const HOST_DEVICE: i32 = -1;

/// `struct diopiTensor`: the tensor descriptor a `diopiTensorHandle_t`
/// points at (layout in `include/diopi/dipu_diopi.h`, 56 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorDesc {
    /// [`TENSOR_MAGIC`]; anything else is rejected.
    pub magic: u32,
    /// The element type.
    pub dtype: Dtype,
    /// [`HOST_DEVICE`] (-1) for host memory, else the dipu device.
    pub device: i32,
    /// Number of dimensions (0 for a 0-dim tensor).
    pub ndim: i32,
    /// Base of the storage.
    pub storage: *mut c_void,
    /// Element 0's distance from `storage`, in elements.
    pub storage_offset: i64,
    /// Bytes of the whole storage.
    pub storage_nbytes: usize,
    /// `ndim` sizes.
    pub shape: *const i64,
    /// `ndim` strides, in elements.
    pub strides: *const i64,
}

/// `diopiTensorHandle_t`.
pub type TensorHandle = *mut TensorDesc;
/// `diopiConstTensorHandle_t`.
pub type ConstTensorHandle = *const TensorDesc;

/// `struct diopiGenerator`: the object a `diopiGeneratorHandle_t` points
/// at, one per device, naming that device's default Philox generator.
#[derive(Debug)]
pub struct DiopiGenerator {
    pub(crate) magic: u64,
    pub(crate) device: i32,
}

impl DiopiGenerator {
    /// The device whose default generator this is.
    pub fn device(&self) -> i32 {
        self.device
    }
}

/// `diopiGeneratorHandle_t`.
pub type GeneratorHandle = *mut DiopiGenerator;
/// `diopiStreamHandle_t`: a vendor's raw stream (NULL: the default stream).
pub type StreamHandleRaw = *mut c_void;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn layouts_match_the_c_headers() {
        assert_eq!(size_of::<DiopiSize>(), 16);
        assert_eq!(size_of::<DiopiScalar>(), 16);
        assert_eq!(offset_of!(DiopiScalar, value), 8);
        assert_eq!(size_of::<TensorDesc>(), 56);
        assert_eq!(align_of::<TensorDesc>(), 8);
        assert_eq!(offset_of!(TensorDesc, dtype), 4);
        assert_eq!(offset_of!(TensorDesc, device), 8);
        assert_eq!(offset_of!(TensorDesc, ndim), 12);
        assert_eq!(offset_of!(TensorDesc, storage), 16);
        assert_eq!(offset_of!(TensorDesc, storage_offset), 24);
        assert_eq!(offset_of!(TensorDesc, storage_nbytes), 32);
        assert_eq!(offset_of!(TensorDesc, shape), 40);
        assert_eq!(offset_of!(TensorDesc, strides), 48);
        assert_eq!(&TENSOR_MAGIC.to_le_bytes(), b"DIPT");
    }

    #[test]
    fn dtype_sizes_and_names() {
        assert_eq!(Dtype::FLOAT32.size(), Some(4));
        assert_eq!(Dtype::BFLOAT16.size(), Some(2));
        assert_eq!(Dtype::COMPLEX128.size(), Some(16));
        assert_eq!(Dtype::UNSUPPORTED.size(), None);
        assert_eq!(Dtype(99).size(), None);
        assert_eq!(Dtype::BOOL.name(), "bool");
        assert_eq!(DiopiScalar::int(3).as_f64(), 3.0);
        assert_eq!(DiopiScalar::float(2.5).as_f64(), 2.5);
    }
}
