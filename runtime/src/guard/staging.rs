//! Host buffers the guards of freed blocks are copied back into, on the
//! block's stream: pinned (page-locked) memory from the vendor, so that
//! the copy is asynchronous (CUDA, "API synchronization behavior": a copy
//! from device memory to pageable host memory returns only once it has
//! completed, which on a busy stream is a wait for all its work). Kept
//! for reuse in a pool per guarded allocator; pageable when the vendor
//! has no pinned memory to give.

use std::ptr::NonNull;

use dipu_stream::DeviceContext;
use parking_lot::Mutex;

/// One host buffer of both guards (front, then back).
pub(super) enum HostCopy {
    /// From the vendor's `malloc_host`, `len` bytes.
    Pinned { ptr: NonNull<u8>, len: usize },
    /// Ordinary memory (no pinned memory, or no guards).
    Pageable(Vec<u8>),
}

// SAFETY: a pinned buffer is plain host memory owned by this value alone
// (nothing else keeps its pointer once the copy into it is done); it moves
// between threads with the allocator state that holds it.
unsafe impl Send for HostCopy {}

impl HostCopy {
    /// Where the copy writes.
    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            HostCopy::Pinned { ptr, .. } => ptr.as_ptr(),
            HostCopy::Pageable(v) => v.as_mut_ptr(),
        }
    }

    /// The bytes, once the copy into them is done.
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: `ptr` is a live allocation of `len` bytes owned by
            // this value, written by the completed copy (or still holding
            // what the vendor gave: read only after the copy).
            HostCopy::Pinned { ptr, len } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
            HostCopy::Pageable(v) => v,
        }
    }
}

/// The free pinned buffers of one guarded allocator, all of one size.
#[derive(Default)]
pub(super) struct Staging {
    free: Mutex<Vec<HostCopy>>,
}

impl Staging {
    /// A buffer of `len` bytes: a free pinned one, a new pinned one, or
    /// (no pinned memory) a pageable one.
    pub(super) fn take(&self, ctx: &DeviceContext, len: usize) -> HostCopy {
        if len == 0 {
            return HostCopy::Pageable(Vec::new());
        }
        if let Some(b) = self.free.lock().pop() {
            return b;
        }
        match ctx
            .api()
            .malloc_host(len)
            .map(|p| NonNull::new(p.cast::<u8>()))
        {
            Ok(Some(ptr)) => HostCopy::Pinned { ptr, len },
            _ => HostCopy::Pageable(vec![0; len]),
        }
    }

    /// Takes `b` back for reuse; its copy must be done.
    pub(super) fn put(&self, b: HostCopy) {
        if matches!(b, HostCopy::Pinned { .. }) {
            self.free.lock().push(b);
        }
    }

    /// Frees `b` to the vendor; its copy must be done.
    pub(super) fn release(ctx: &DeviceContext, b: HostCopy) {
        if let HostCopy::Pinned { ptr, .. } = b {
            // SAFETY: `ptr` came from this vendor's `malloc_host` and is
            // owned by `b` alone, no copy into it is pending.
            if let Err(e) = unsafe { ctx.api().free_host(ptr.as_ptr().cast()) } {
                tracing::warn!("dipu memcheck: freeing a pinned guard buffer: {e}");
            }
        }
    }

    /// Frees every free buffer to the vendor.
    pub(super) fn release_all(&self, ctx: &DeviceContext) {
        for b in self.free.lock().drain(..) {
            Staging::release(ctx, b);
        }
    }
}
