//! One collective operation and its buffers, as a vendor's collective
//! dispatch receives them from [`device_api!`](crate::device_api).

use std::ffi::c_void;

use dipu_deviceapi::{DataType, ReduceOp};

/// One collective operation and its own arguments.
#[derive(Debug, Clone, Copy)]
pub enum Collective {
    /// All-reduce.
    AllReduce(ReduceOp),
    /// Broadcast from a root.
    Broadcast(i32),
    /// All-gather (`count` is the per-rank send count).
    AllGather,
    /// Reduce-scatter (`count` is the per-rank receive count).
    ReduceScatter(ReduceOp),
    /// Reduce to a root.
    Reduce(ReduceOp, i32),
    /// Send (of `send`) to a peer.
    Send(i32),
    /// Receive (into `recv`) from a peer.
    Recv(i32),
}

/// The buffers of a collective: `count` elements of `dtype`.
#[derive(Debug, Clone, Copy)]
pub struct Buffers {
    /// The data sent (null for a receive).
    pub send: *const c_void,
    /// Where the result goes (null for a send).
    pub recv: *mut c_void,
    /// How many elements.
    pub count: usize,
    /// Their type.
    pub dtype: DataType,
}
