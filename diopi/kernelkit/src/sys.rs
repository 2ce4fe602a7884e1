//! The diopirt functions (`include/diopi/diopirt.h`) every kernel library
//! calls. They are undefined here and resolved when the runtime loads the
//! library.

use crate::types::{ConstTensorHandle, ContextHandle, DiopiSize, StreamHandle, TensorHandle};
use std::ffi::c_void;

#[allow(missing_docs)]
extern "C" {
    pub fn diopiGetTensorData(th: TensorHandle, pptr: *mut *mut c_void) -> i32;
    pub fn diopiGetTensorDataConst(th: ConstTensorHandle, pptr: *mut *const c_void) -> i32;
    pub fn diopiGetTensorShape(th: ConstTensorHandle, size: *mut DiopiSize) -> i32;
    pub fn diopiGetTensorStride(th: ConstTensorHandle, stride: *mut DiopiSize) -> i32;
    pub fn diopiGetTensorDtype(th: ConstTensorHandle, dtype: *mut i32) -> i32;
    pub fn diopiGetTensorDevice(th: ConstTensorHandle, device: *mut i32) -> i32;
    pub fn diopiGetStream(ctx: ContextHandle, stream: *mut StreamHandle) -> i32;
    pub fn diopiRequireTensor(
        ctx: ContextHandle,
        out: *mut TensorHandle,
        size: *const DiopiSize,
        stride: *const DiopiSize,
        dtype: i32,
        device: i32,
    ) -> i32;
}
