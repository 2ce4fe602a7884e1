//! Vendor-neutral machinery of the fake vendor libraries (`libcudart`,
//! `libcuda`, `libnccl`, `libascendcl`/`libhccl` and
//! `libcnrt`/`libcncl`/`libcndrv`), which let a vendor crate run its
//! whole path in CI without hardware. A fake is a `cdylib` exporting the
//! real library's C functions over host memory; this crate gives it:
//!
//! - [`config`]: the shared environment (`DIPU_FAKE_TRACE`, `DIPU_FAKE_FAULTS`,
//!   `DIPU_FAKE_LATENCY_US`, `DIPU_FAKE_DEVICES`, `DIPU_FAKE_MEMORY`) and the
//!   fault specification;
//! - [`trace`]: the call trace tests assert sequences on;
//! - [`stream`]: streams as worker threads with a latency, and events with
//!   record generations;
//! - [`host`]: the one host-callback thread shared by every stream;
//! - [`thread`]: the per-thread current device and the fork detector;
//! - [`handles`]: opaque, never-null handles for objects;
//! - [`vmem`]: virtual memory over `memfd` and `mmap` with per-device access;
//! - [`reduce`]: the float32 reduction fast path;
//! - [`ranks`]: a test harness running ranks as processes;
//! - [`collective`]: communicators whose ranks are processes (or threads),
//!   meeting in shared memory named by the unique id.
//!
//! See `README.md` for how a new vendor fake is built on it.

pub mod collective;
pub mod config;
pub mod handles;
pub mod host;
mod names;
pub mod ranks;
pub mod reduce;
mod shm;
pub mod stream;
pub mod thread;
pub mod trace;
pub mod vmem;
