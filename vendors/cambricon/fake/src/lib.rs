//! Fake `libcnrt.so`, `libcncl.so` and `libcndrv.so` over host memory, for
//! testing the Cambricon vendor without an MLU. One shared library exports
//! all three APIs; tests and CI link it under the three names (symlinks, so
//! the dynamic linker loads it once and the three share one state, as CNCL
//! and CNDrv share CNRT's on a real machine).
//!
//! Every modelled behaviour cites, in `docs/cambricon.md`, the sentence of
//! Cambricon's documentation it follows. Configuration (read once):
//!
//! - `DIPU_FAKE_DEVICES`: MLUs (default 2);
//! - `DIPU_FAKE_MEMORY`: bytes of memory per MLU (default 4 GiB; only what
//!   is allocated takes host memory);
//! - `DIPU_FAKE_LATENCY_US`: microseconds every queued task takes (default 0);
//! - `DIPU_FAKE_TRACE`: a file every call is appended to, one line each;
//! - `DIPU_FAKE_FAULTS`: comma-separated `NAME@N`: the N-th call of function
//!   NAME fails (CNRT: `cnrtErrorUnknown`, CNCL: internal error, CNDrv:
//!   its generic error); `vmm=0`: devices report no virtual address management.
//!
//! The prototypes are those of `include/dipu_cambricon_api.h`, the
//! project's own header written from Cambricon's published API.

pub mod cncl;
pub mod cndrv;
mod common;
mod queue;
mod reduce;
pub mod rt;
