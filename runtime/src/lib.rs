//! One process's dipu-rs runtime and the Rust API frameworks use.
//!
//! A [`Runtime`] is the vendor (from `DIPU_VENDOR`, default the built-in
//! `host`), its [`DeviceContext`] (streams, events, current device), one
//! caching allocator per device, the pinned-host allocator and the
//! per-device random generators. The process-global runtime is made by
//! [`init`] or, from the environment, by the first [`get`]; [`shutdown`]
//! releases caches and reports leaks.
//!
//! Every call returns [`Result`]; bad input (an unknown pointer, a range
//! outside an allocation, a bad device) is an error, never a panic. Each
//! call is meant to back one function of the C ABI (`dipu-ffi`).
//!
//! ```
//! use dipu_runtime::{Algorithm, Runtime, RuntimeOptions};
//! let rt = Runtime::new(RuntimeOptions::default().with_algorithm(Algorithm::BestFit))?;
//! let stream = rt.context().stream_from_pool(0, false)?;
//! let buf = rt.allocate(4, stream)?;
//! buf.copy_from_host(&[1, 2, 3, 4], None)?;
//! let mut back = [0u8; 4];
//! buf.copy_to_host(&mut back, None)?;
//! assert_eq!(back, [1, 2, 3, 4]);
//! drop(buf);
//! assert_eq!(rt.stats(0)?.allocated_bytes.current, 0);
//! # Ok::<(), dipu_runtime::Error>(())
//! ```

mod accumulated;
mod buffer;
mod copies;
mod fork;
mod global;
mod guard;
mod history;
mod live;
mod options;
mod report;
mod runtime;
mod trace;

pub use buffer::{DeviceBuffer, HostBuffer};
pub use fork::is_in_bad_fork;
pub use global::{
    device_count_without_init, get, init, is_initialized, manual_seed_all, shutdown, with,
    with_current,
};
pub use live::LiveAllocation;
pub use options::RuntimeOptions;
pub use report::{DeviceLeak, ShutdownReport};
pub use runtime::{loader, Runtime};

/// The memory checker (`DIPU_MEM_CHECK`).
pub use dipu_memcheck as memcheck;
/// The runtime trace (`DIPU_PROFILE`).
pub use dipu_profiler as profiler;

pub use dipu_allocator::history::{Frame, FrameSource, Stacks};
pub use dipu_allocator::{
    Algorithm, AllocatorConfig, DeviceAllocator, DeviceAllocators, DeviceStats, HostAlgorithm,
    HostAllocator, Pool, PoolStats, Stat, ThreadState,
};
pub use dipu_deviceapi::{
    CopyKind, DeviceProperties, Error, ErrorKind, MemoryInfo, Result, VendorOrigin, VendorSpec,
};
pub use dipu_generator::{Generator, Generators};
pub use dipu_stream::{
    DeviceContext, DeviceGuard, Event, EventFlag, MultiStreamGuard, OptionalDeviceGuard,
    PooledEvent, Stream, StreamGuard, StreamId, StreamKind,
};

/// The runtime's version (this crate's), e.g. `"0.1.0"`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
