//! The embedded dipu-rs vendor: a simulated accelerator on host memory.
//!
//! [`HostVendor`] implements [`DeviceApi`](dipu_deviceapi::DeviceApi) faithfully enough that bugs in the
//! layers above show up in tests: device memory is real host memory counted
//! against a per-device capacity (so out-of-memory is real), every stream is
//! a worker thread that runs its work asynchronously and in order, events
//! complete when their stream reaches them, and every free, copy and fill is
//! checked against a registry of live allocations. Extra methods simulate
//! kernels ([`HostVendor::enqueue_kernel`], [`HostVendor::enqueue_fill`],
//! [`HostVendor::enqueue_expect`]) and inject failures
//! ([`HostVendor::set_fault`]).
//!
//! Configuration (see [`HostConfig`]): `DIPU_HOST_DEVICES` (default 2),
//! `DIPU_HOST_MEMORY` (default `4G` per device),
//! `DIPU_HOST_FAIL_MALLOC_AT`, `DIPU_HOST_FAIL_MALLOC_AFTER_BYTES`,
//! `DIPU_HOST_COMM_TIMEOUT` (seconds, default 1800), `DIPU_HOST_SCHEDULE`
//! (how threads wait for the device and stream workers for work: `auto`,
//! `spin`, `yield` or `block`, as CUDA's scheduling flags; see
//! [`Schedule`]), `DIPU_HOST_ACCESSIBLE_MEMORY` (`1`, the default, reports
//! the `HOST_ACCESSIBLE_MEMORY` capability; `0` hides it, so the layers
//! above treat the memory as a discrete device's), `DIPU_HOST_COLLECTIVES`
//! (`1`, the default; `0` hides the collectives as a vendor without a
//! collective library: no `COLLECTIVES` capability, every collective call
//! `Unsupported`).
//!
//! Synchronous copies and memsets on an idle default stream run on the
//! calling thread, in stream order.
//!
//! # Collectives
//!
//! The vendor reports `Capabilities::COLLECTIVES` with NCCL's semantics:
//! ranks may be threads of one process (one vendor with a device per rank,
//! or a vendor per rank) or processes of one machine. Each communicator is
//! one POSIX shared-memory segment, named after its unique id.
//!
//! - The unique id has 128 bytes: magic `DIPUHC`, version, 16 random bytes
//!   and the creator's pid; pass it to every rank unchanged.
//! - `comm_init_rank` does not wait for the other ranks (a wrong id or a
//!   missing rank never hangs there); the first operation waits until all
//!   joined. A world size of 1 to [`MAX_WORLD`] (64) ranks; ranks that
//!   disagree on it, or a rank that joins twice, get an error. Once all
//!   joined the segment's name is removed from `/dev/shm`, so nothing is
//!   left even if processes die; an abort removes it at once.
//! - Every operation is queued on the stream and returns at once; ranks
//!   must issue them in the same order (a disagreement is detected and
//!   reported as "collective mismatch: rank 1 is in ... while rank 0 is in
//!   ..."). Buffers must be device memory of the communicator's device and
//!   the stream must be on it too. Results are the same bit for bit on
//!   every rank (reductions run in rank order; `f16`/`bf16` accumulate in
//!   `f32`; integers wrap).
//! - `ReduceOp::Avg` is `Unsupported` (the process group emulates it as
//!   a sum then a division).
//! - `group_start`/`group_end` (per thread) fuse the operations issued in
//!   between into one op per stream that progresses them all together.
//! - A failure at run time (a peer process exited, a peer gave up or
//!   aborted, a mismatch, `DIPU_HOST_COMM_TIMEOUT` without progress) ends
//!   the operation, is kept as the communicator's `comm_async_error`, and is
//!   published to the other ranks; it is not the stream's sticky error.
//!   Later operations on the communicator fail at once. `comm_abort` ends
//!   this rank's waiting operations and every other rank's promptly; a
//!   vendor dropped with live communicators aborts them.
//! - `comm_destroy` lets queued operations finish.
//!
//! ```
//! use dipu_deviceapi::{CopyKind, DeviceApi};
//! use dipu_vendor_host::{HostConfig, HostVendor};
//!
//! let host = HostVendor::new(HostConfig::default()).unwrap();
//! let dev = host.malloc(4).unwrap();
//! let mut out = [0u8; 4];
//! // SAFETY: `dev` is 4 live device bytes and `out` 4 host bytes.
//! unsafe {
//!     host.memset(dev, 7, 4).unwrap();
//!     host.memcpy(out.as_mut_ptr().cast(), dev, 4, CopyKind::DeviceToHost).unwrap();
//!     host.free(dev).unwrap();
//! }
//! assert_eq!(out, [7; 4]);
//! ```

mod api;
mod arena;
mod comm;
mod config;
mod device;
mod event;
mod fault;
mod memory;
mod ops;
mod stream;
mod vmm;
mod wait;

#[cfg(test)]
mod tests;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::{Error, Result, StreamHandle};

pub use comm::MAX_WORLD;
pub use config::{
    HostConfig, ENV_COLLECTIVES, ENV_COMM_TIMEOUT, ENV_DEVICES, ENV_FAIL_MALLOC_AFTER_BYTES,
    ENV_FAIL_MALLOC_AT, ENV_HOST_ACCESSIBLE, ENV_MEMORY, ENV_SCHEDULE, MAX_DEVICES,
};
pub use fault::Fault;
pub use wait::Schedule;

use event::Events;
use fault::Faults;
use memory::Memory;
use ops::{Checked, Describe};
use stream::{AsyncErrors, Op, Ran, Stream, Streams};
use vmm::Vmm;

dipu_deviceapi::export_vendor!(HostVendor::from_env());

/// A simulated accelerator on host memory (see the crate documentation).
#[derive(Debug)]
pub struct HostVendor {
    id: u64,
    config: HostConfig,
    cores: i32,
    memory: Arc<Memory>,
    streams: Streams,
    events: Events,
    vmm: Vmm,
    faults: Faults,
    errors: Arc<AsyncErrors>,
    comms: comm::Comms,
}

impl HostVendor {
    /// A vendor configured by the `DIPU_HOST_*` environment variables.
    pub fn from_env() -> Result<HostVendor> {
        HostVendor::new(HostConfig::from_env()?)
    }

    /// A vendor with `config` (rejected with `InvalidConfig` if out of range).
    pub fn new(config: HostConfig) -> Result<HostVendor> {
        config.validate()?;
        let errors = Arc::new(AsyncErrors::default());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(HostVendor {
            id: device::new_vendor_id(),
            cores: i32::try_from(cores).unwrap_or(i32::MAX),
            memory: Arc::new(Memory::new(config.devices, config.memory_per_device)),
            streams: Streams::new(config.devices, config.schedule, Arc::clone(&errors)),
            events: Events::new(),
            vmm: Vmm::default(),
            faults: Faults::from_config(config.fail_malloc_at, config.fail_malloc_after_bytes),
            errors,
            comms: comm::Comms::default(),
            config,
        })
    }

    /// The configuration the vendor was made with.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Installs an injected failure of a device malloc or a virtual-memory
    /// call (or clears them all with [`Fault::None`]); the count it watches
    /// restarts now.
    pub fn set_fault(&self, fault: Fault) {
        self.faults.set(fault);
    }

    /// Bytes in use on `device` (device mallocs and physical chunks).
    pub fn memory_used(&self, device: i32) -> Result<u64> {
        self.check_device(device)?;
        Ok(self.memory.used(device))
    }

    /// The clamped priority `stream` was created with (0 for the default).
    ///
    /// # Safety
    /// `stream` came from this vendor and is alive (as for the trait).
    pub unsafe fn stream_priority(&self, stream: StreamHandle) -> Result<i32> {
        Ok(self.stream(stream)?.priority())
    }

    /// Removes and returns the first error an operation reported while
    /// running on a stream (a device range freed or unmapped before the
    /// stream reached it, or a failed [`HostVendor::enqueue_expect`]). Until
    /// taken, the error is also returned by every synchronising call, like
    /// CUDA's sticky errors.
    pub fn take_async_error(&self) -> Option<Error> {
        self.errors.take()
    }

    /// Queues a simulated kernel on `stream` that runs for `duration`.
    ///
    /// # Safety
    /// `stream` came from this vendor and is alive (as for the trait).
    pub unsafe fn enqueue_kernel(&self, stream: StreamHandle, duration: Duration) -> Result<()> {
        let op: Op = Box::new(move || {
            std::thread::sleep(duration);
            Ok(())
        });
        self.stream(stream)?.submit(op).map(drop)
    }

    /// Queues a simulated kernel on `stream` that runs for `duration` and
    /// then writes `value` into `bytes` of device memory at `ptr`.
    ///
    /// # Safety
    /// As for [`dipu_deviceapi::DeviceApi::memset_async`].
    pub unsafe fn enqueue_fill(
        &self,
        stream: StreamHandle,
        ptr: *mut c_void,
        value: u8,
        bytes: usize,
        duration: Duration,
    ) -> Result<()> {
        let stream = self.stream(stream)?;
        stream
            .submit(ops::fill(&self.memory, ptr, value, bytes, duration)?)
            .map(drop)
    }

    /// Queues a simulated kernel on `stream` that reads `bytes` of device
    /// memory at `ptr` for `duration` and expects every byte to be `value`
    /// at its start and its end; a mismatch (say, the block was reused
    /// while this stream still read it) becomes the asynchronous error.
    ///
    /// # Safety
    /// As for [`dipu_deviceapi::DeviceApi::memset_async`].
    pub unsafe fn enqueue_expect(
        &self,
        stream: StreamHandle,
        ptr: *const c_void,
        value: u8,
        bytes: usize,
        duration: Duration,
    ) -> Result<()> {
        let stream = self.stream(stream)?;
        stream
            .submit(ops::expect(&self.memory, ptr, value, bytes, duration)?)
            .map(drop)
    }

    // ---- helpers for the trait implementation -----------------------------

    fn device(&self) -> i32 {
        device::current(self.id)
    }

    fn check_device(&self, device: i32) -> Result<()> {
        if (0..self.config.devices).contains(&device) {
            Ok(())
        } else {
            Err(Error::invalid_device(device, self.config.devices))
        }
    }

    fn stream(&self, handle: StreamHandle) -> Result<Arc<Stream>> {
        self.streams.get(handle, self.device())
    }

    /// Runs `op` on the current device's default stream after the work
    /// queued there, and waits for it (on this thread when the stream is
    /// idle).
    fn run_sync<D, B>(&self, op: Option<Checked<'_, D, B>>) -> Result<()>
    where
        D: Describe,
        B: FnOnce() + Send + 'static,
    {
        if let Some(op) = op {
            let stream = self.streams.default_of(self.device())?;
            match stream.run_if_idle(op, Checked::run_here)? {
                Ran::Here(done) => done?,
                Ran::Busy(op) => {
                    let ticket = stream.submit(op.into_op()?)?;
                    stream.wait(ticket);
                }
            }
        }
        self.errors.check()
    }

    /// Checks `op` (if any) and queues it on `stream`, after checking the
    /// handle.
    fn run_async<D, B>(&self, stream: StreamHandle, op: Option<Checked<'_, D, B>>) -> Result<()>
    where
        D: Describe,
        B: FnOnce() + Send + 'static,
    {
        let op = op.map(Checked::into_op).transpose()?;
        let stream = self.stream(stream)?;
        op.map_or(Ok(()), |op| stream.submit(op).map(drop))
    }
}

impl Drop for HostVendor {
    fn drop(&mut self) {
        // Communicators never destroyed are aborted, so their queued
        // operations (and their peers) do not wait for this rank forever.
        self.comms.abort_all();
        self.streams.shutdown_all();
        device::forget(self.id);
    }
}

/// The vendor's version in words.
fn describe(host: &HostVendor) -> String {
    format!(
        "dipu host vendor {} (simulated, {})",
        env!("CARGO_PKG_VERSION"),
        host.config.describe()
    )
}
