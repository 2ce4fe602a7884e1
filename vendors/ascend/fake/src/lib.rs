//! A fake ACL runtime and HCCL over host memory, for testing the dipu-rs
//! Ascend vendor on machines without an NPU. One file exports both
//! libraries' functions; tests link it as `lib64/libascendcl.so` and
//! `lib64/libhccl.so` (two names of one file, so the dynamic linker loads it
//! once and HCCL shares ACL's streams).
//!
//! Every function is written against the prototypes of the real CANN
//! headers, in the vendor's bindings' words ([`SIGNATURES`]): the vendor's
//! tests compare each with its binding (words and Rust type) and compile
//! each against both header versions. Each behaviour the vendor must absorb
//! is modelled, with the sentence of Huawei's documentation it comes from
//! next to the code (see `docs/ascend.md` for the list): `aclrtGetDevice`
//! failing before `aclrtSetDevice`, streams that must be synchronised before
//! they are destroyed, `aclrtMalloc(0)` and `aclrtFree(NULL)` failing,
//! `aclrtFree` not waiting, the byte-count limits, asynchronous
//! host-to-host copies failing, peer access, events that need
//! `ACL_EVENT_SYNC` to be waited on and are capped per device, both host
//! callback models (never mixed on one stream, never calling ACL),
//! per-thread error messages, virtual memory (whole-chunk mappings,
//! `aclrtUnmapMem` without a size), and HCCL with ranks as processes (or threads), an
//! in-place broadcast, no average and no abort.
//!
//! The `old-cann` feature (the `dipu-fake-ascend-old` package) leaves out
//! what the torch-npu 2.1.0 headers lack. Faults, latency, devices, memory
//! and a call trace come from the environment (the `config` module).
//!
//! The vendor-neutral parts come from `dipu-fakekit` (the shared settings
//! and faults, the call trace, stream worker threads, events with record
//! generations, the host-callback thread, the fork check); ACL's virtual
//! memory is fakekit's `vmem` with ACL's rules on top, HCCL's cliques are
//! fakekit's `collective` (see `docs/ascend.md`).

mod acl;
mod callbacks;
mod config;
mod entry;
mod events;
mod hccl;
mod memory;
mod p2p;
mod reduce;
mod state;
mod streams;
mod types;
mod vmm;

/// The shared machinery, for tests (`dipu_fakekit::ranks`: ranks as processes).
pub use dipu_fakekit;
pub use types::{Signature, FIELDS, STRUCTS};

/// Every exported function, as declared, for the vendor's tests (the new
/// build's: the `old-cann` build exports all but the optional ones).
pub const SIGNATURES: [&[Signature]; 3] = [acl::ACL, acl::HCCL, acl::OTHERS];
