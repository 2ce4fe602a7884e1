//! The distributed layer of dipu-rs.
//!
//! - [`store`]: the key-value stores ranks rendezvous through: a TCP store
//!   that speaks torch.distributed's TCPStore wire protocol (so a dipu-rs
//!   rank can meet PyTorch ranks, or run under torchrun), a file store for
//!   one host, and a prefix store that namespaces another store.
//! - The DICL process group: every c10d collective over the vendor's
//!   collective capability (or, for a vendor without one, staged through
//!   pinned host memory over shared memory or TCP between the ranks), each
//!   on the group's own communication streams,
//!   returning a `Work` that can be waited on, with a watchdog that turns
//!   hangs into errors.

pub mod store;

pub use store::Store;

pub mod group;

pub use group::{Buffer, Options, ProcessGroup, StagedTransport, Work};
