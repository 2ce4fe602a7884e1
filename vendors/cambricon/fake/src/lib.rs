//! Fake `libcnrt.so`, `libcncl.so` and `libcndrv.so` over host memory, for
//! testing the Cambricon vendor without an MLU. One shared library exports
//! all three APIs; tests and CI link it under the three names (symlinks, so
//! the dynamic linker loads it once and the three share one state, as CNCL
//! and CNDrv share CNRT's on a real machine).
//!
//! Every modelled behaviour cites, in `docs/cambricon.md`, the sentence of
//! Cambricon's documentation it follows. Configuration, faults and the call
//! trace are `dipu-fakekit`'s (`DIPU_FAKE_DEVICES`, `DIPU_FAKE_MEMORY`,
//! `DIPU_FAKE_LATENCY_US`, `DIPU_FAKE_TRACE`, `DIPU_FAKE_FAULTS` with
//! `oom@N` and `fail:NAME[@N]=CODE`).
//!
//! The prototypes are those of `include/dipu_cambricon_api.h`, the
//! project's own header written from Cambricon's published API.

pub mod cncl;
pub mod cndrv;
mod common;
mod queue;
mod reduce;
pub mod rt;
