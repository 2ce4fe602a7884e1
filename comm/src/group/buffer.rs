//! [`Buffer`]: the device memory a collective reads or writes.

use std::ffi::c_void;

use dipu_deviceapi::{DataType, Error, Result};
use dipu_runtime::DeviceBuffer;

/// `count` elements of `dtype` in device memory of `device`: what c10d
/// calls a tensor, reduced to what a collective needs.
///
/// A buffer made from a [`DeviceBuffer`] (or with
/// [`Buffer::with_allocation`]) names the runtime allocation it lies in;
/// the process group then `record_stream`s that allocation onto its
/// communication stream, so freeing it while a collective still uses it is
/// safe, as in PyTorch.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    ptr: *mut c_void,
    count: usize,
    dtype: DataType,
    device: i32,
    allocation: Option<*mut c_void>,
}

// SAFETY: a `Buffer` is a device address and plain values; it grants no
// access to host memory. Whoever made it with `from_raw` promised the memory
// stays valid for the collectives it is given to, whatever the thread.
unsafe impl Send for Buffer {}
// SAFETY: as above; it has no interior mutability.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// A buffer over `count` elements of `dtype` at `ptr` on `device`.
    ///
    /// # Safety
    /// `ptr` is device memory of the runtime's vendor on `device`, valid for
    /// `count * dtype.size_in_bytes()` bytes until every operation given
    /// this buffer has completed (or, with [`Buffer::with_allocation`], lies
    /// in that live runtime allocation).
    pub unsafe fn from_raw(ptr: *mut c_void, count: usize, dtype: DataType, device: i32) -> Buffer {
        Buffer {
            ptr,
            count,
            dtype,
            device,
            allocation: None,
        }
    }

    /// The whole of `buffer` as elements of `dtype`; its length must be a
    /// multiple of the element size.
    pub fn from_device_buffer(buffer: &DeviceBuffer, dtype: DataType) -> Result<Buffer> {
        let size = dtype.size_in_bytes();
        if buffer.len() % size != 0 {
            return Err(Error::invalid_argument(format!(
                "a device buffer of {} bytes is not a whole number of {dtype:?} elements ({size} bytes each)",
                buffer.len()
            )));
        }
        Ok(Buffer {
            ptr: buffer.as_ptr(),
            count: buffer.len() / size,
            dtype,
            device: buffer.device(),
            allocation: Some(buffer.as_ptr()),
        })
    }

    /// The same buffer, naming `base` as the runtime allocation it lies in.
    ///
    /// # Safety
    /// `base` is the address a runtime allocator returned for a live
    /// allocation that contains this buffer.
    pub unsafe fn with_allocation(mut self, base: *mut c_void) -> Buffer {
        self.allocation = Some(base);
        self
    }

    /// `count` elements starting at element `offset`.
    pub fn slice(&self, offset: usize, count: usize) -> Result<Buffer> {
        let end = offset.checked_add(count);
        if end.is_none_or(|end| end > self.count) {
            return Err(Error::invalid_argument(format!(
                "elements {offset}..{offset}+{count} are outside a buffer of {} elements",
                self.count
            )));
        }
        Ok(Buffer {
            ptr: self
                .ptr
                .wrapping_byte_add(offset * self.dtype.size_in_bytes()),
            count,
            ..*self
        })
    }

    /// The device address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The number of elements.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The device the memory is on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The runtime allocation the buffer lies in, if known.
    pub fn allocation(&self) -> Option<*mut c_void> {
        self.allocation
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.count * self.dtype.size_in_bytes()
    }

    /// Words for messages, e.g. `1024 x F32`.
    pub(crate) fn describe(&self) -> String {
        format!("{} x {:?}", self.count, self.dtype)
    }
}
