//! What the process group does for a vendor that lacks it: averaging as a
//! sum then a division, done on the host through pinned memory on the
//! communication stream (no device kernels are needed, at the price of two
//! copies), and flattening lists of buffers with device copies.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, DataType, Error, ErrorKind, Result};
use half::{bf16, f16};

use super::comms::Comm;
use super::Inner;

/// Queues, on `comm`'s stream, the division of `count` elements of `dtype`
/// at device address `ptr` by `divisor` (integers truncate).
pub(crate) fn divide_on_host(
    group: &Inner,
    comm: &Comm,
    ptr: *mut c_void,
    count: usize,
    dtype: DataType,
    divisor: i32,
) -> Result<()> {
    let bytes = count * dtype.size_in_bytes();
    if bytes == 0 {
        return Ok(());
    }
    let divide = divider(dtype).ok_or_else(|| {
        Error::new(
            ErrorKind::Unsupported,
            format!("averaging {dtype:?}: the vendor lacks Avg and there is no host division for {dtype:?}"),
        )
    })?;
    let staging = group.runtime.allocate_host(bytes)?;
    let host = staging.as_ptr() as usize;
    let stream = comm.stream.raw();
    // SAFETY: `ptr` is `bytes` of live device memory (the caller's buffer
    // contract); `staging` is `bytes` of pinned memory that is reused only
    // after the event recorded below, so it outlives the copies and the
    // callback queued here.
    unsafe {
        group.api.memcpy_async(
            host as *mut c_void,
            ptr,
            bytes,
            CopyKind::DeviceToHost,
            stream,
        )?;
        group.api.launch_host_func(
            stream,
            Box::new(move || divide(host as *mut u8, count, divisor)),
        )?;
        group.api.memcpy_async(
            ptr,
            host as *const c_void,
            bytes,
            CopyKind::HostToDevice,
            stream,
        )?;
    }
    staging.record_event(comm.stream)
}

/// A division in place of `count` elements at a host address by a divisor.
pub(crate) type Divide = fn(*mut u8, usize, i32);

/// The division for `dtype` elements, if there is one.
pub(crate) fn divider(dtype: DataType) -> Option<Divide> {
    macro_rules! each {
        ($t:ty, |$x:ident, $n:ident| $e:expr) => {{
            let divide: Divide = |at, count, $n| {
                // SAFETY: `at` is the pinned staging buffer of `count`
                // elements of this type, exclusively ours while the stream
                // runs this callback; pinned allocations are aligned for
                // every type.
                let data = unsafe { std::slice::from_raw_parts_mut(at.cast::<$t>(), count) };
                for $x in data.iter_mut() {
                    *$x = $e;
                }
            };
            Some(divide)
        }};
    }
    match dtype {
        DataType::F32 => each!(f32, |x, n| *x / n as f32),
        DataType::F64 => each!(f64, |x, n| *x / f64::from(n)),
        DataType::F16 => each!(f16, |x, n| f16::from_f32(x.to_f32() / n as f32)),
        DataType::BF16 => each!(bf16, |x, n| bf16::from_f32(x.to_f32() / n as f32)),
        DataType::I8 => each!(i8, |x, n| (i32::from(*x) / n) as i8),
        DataType::U8 => each!(u8, |x, n| (i32::from(*x) / n) as u8),
        DataType::I16 => each!(i16, |x, n| (i32::from(*x) / n) as i16),
        DataType::I32 => each!(i32, |x, n| x.wrapping_div(n)),
        DataType::I64 => each!(i64, |x, n| x.wrapping_div(i64::from(n))),
        DataType::U32 => each!(u32, |x, n| *x / n as u32),
        DataType::U64 => each!(u64, |x, n| *x / n as u64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn divide_slice(at: *mut u8, count: usize, dtype: DataType, divisor: i32) {
        divider(dtype).expect("every DataType divides")(at, count, divisor);
    }

    #[test]
    fn every_type_has_a_division() {
        for dtype in DataType::ALL {
            assert!(divider(dtype).is_some(), "{dtype:?}");
        }
    }

    #[test]
    fn division_per_type() {
        let mut f = [3.0f32, -6.0, 1.5];
        divide_slice(f.as_mut_ptr().cast(), 3, DataType::F32, 3);
        assert_eq!(f, [1.0, -2.0, 0.5]);
        let mut i = [7i32, -7, 9];
        divide_slice(i.as_mut_ptr().cast(), 3, DataType::I32, 2);
        assert_eq!(
            i,
            [3, -3, 4],
            "integers truncate toward zero, like NCCL's average"
        );
        let mut h = [f16::from_f32(5.0), f16::from_f32(-1.0)];
        divide_slice(h.as_mut_ptr().cast(), 2, DataType::F16, 4);
        assert_eq!(h, [f16::from_f32(1.25), f16::from_f32(-0.25)]);
        let mut b = [bf16::from_f32(6.0)];
        divide_slice(b.as_mut_ptr().cast(), 1, DataType::BF16, 4);
        assert_eq!(b, [bf16::from_f32(1.5)]);
        let mut u = [255u8, 10];
        divide_slice(u.as_mut_ptr(), 2, DataType::U8, 4);
        assert_eq!(u, [63, 2]);
    }
}
