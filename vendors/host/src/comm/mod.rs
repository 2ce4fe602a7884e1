//! Collectives between ranks that are threads of one process or processes
//! of one machine, over one POSIX shared-memory segment per communicator.
//!
//! - `id`: the 128-byte unique id and the segment name it gives.
//! - `layout`, `segment`: the segment's header, counters and slots.
//! - `state`: one rank's communicator (joining, errors, abort).
//! - `coll`, `p2p`: operations as non-blocking state machines.
//! - `direct`: large collectives reading the peers' buffers directly
//!   (`local`: ranks of this process; `cma`: other processes).
//! - `engine`: polls them on a stream's worker, with backoff and checks.
//! - `group`: `group_start`/`group_end`.
//! - `reduce`, `buffers`, `desc`: kernels, data moves, descriptions.

mod buffers;
mod cma;
mod coll;
mod desc;
mod direct;
mod engine;
mod group;
mod id;
mod layout;
mod local;
mod nt;
mod p2p;
mod reduce;
mod segment;
mod state;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dipu_deviceapi::{CommHandle, DataType, Error, ReduceOp, Result, StreamHandle};
use parking_lot::Mutex;

pub(crate) use desc::Kind;
pub(crate) use id::UNIQUE_ID_SIZE;
pub use layout::MAX_WORLD;

use coll::{Collective, Spec};
use desc::Reduction;
use engine::Task;
use id::UniqueId;
use p2p::PointToPoint;
use state::{CommState, Reason};

use crate::HostVendor;

/// A fresh unique id (`comm_get_unique_id`).
pub(crate) fn new_unique_id() -> Result<Vec<u8>> {
    UniqueId::generate().map(UniqueId::to_bytes)
}

/// Aborted handles whose error `comm_async_error` still reports.
const TOMBSTONES: usize = 1024;

/// The vendor's communicators by handle.
#[derive(Debug, Default)]
pub(crate) struct Comms {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Arc<CommState>>>,
    aborted: Mutex<VecDeque<(u64, Error)>>,
}

impl Comms {
    fn get(&self, comm: CommHandle) -> Result<Arc<CommState>> {
        self.live
            .lock()
            .get(&comm.as_raw())
            .cloned()
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                "unknown communicator {comm:?} (never created by this vendor, destroyed or aborted)"
            ))
            })
    }

    /// Aborts every live communicator (the vendor is going away).
    pub(crate) fn abort_all(&self) {
        for (_, comm) in self.live.lock().drain() {
            let e = Error::new(
                dipu_deviceapi::ErrorKind::VendorError,
                format!(
                    "rank {} dropped its host vendor without destroying the communicator",
                    comm.rank
                ),
            );
            comm.abort(Reason::VendorDropped, e);
        }
    }
}

/// A root or peer argument as an index, checked against the world size.
fn rank_arg(what: &str, rank: i32, world: usize) -> Result<usize> {
    usize::try_from(rank)
        .ok()
        .filter(|r| *r < world)
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{what} {rank} is not a rank of this communicator of {world} ranks"
            ))
        })
}

/// A collective's arguments as the trait passes them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) kind: Kind,
    pub(crate) send: *const std::ffi::c_void,
    pub(crate) recv: *mut std::ffi::c_void,
    pub(crate) count: usize,
    pub(crate) dtype: DataType,
    pub(crate) op: Option<ReduceOp>,
    pub(crate) root: i32,
}

impl HostVendor {
    /// `comm_init_rank`: joins without waiting for the other ranks.
    pub(crate) fn comm_init(&self, world: i32, unique_id: &[u8], rank: i32) -> Result<CommHandle> {
        let call = format!("comm_init_rank(world {world}, rank {rank})");
        let max = MAX_WORLD as i32;
        if !(1..=max).contains(&world) {
            return Err(Error::invalid_argument(format!(
                "{call}: the host vendor supports 1 to {max} ranks, not {world}"
            )));
        }
        if !(0..world).contains(&rank) {
            return Err(Error::invalid_argument(format!(
                "{call}: rank {rank} is out of range for world size {world}"
            )));
        }
        let id = UniqueId::parse(unique_id).map_err(|e| e.context(&call))?;
        let state = CommState::join(
            &id,
            world as usize,
            rank as usize,
            self.device(),
            Arc::clone(&self.memory),
            self.config.comm_timeout,
        )?;
        let raw = self.comms.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.comms.live.lock().insert(raw, Arc::new(state));
        Ok(CommHandle::from_raw(raw))
    }

    /// `comm_destroy`: queued operations still finish; the mapping goes
    /// with the last of them.
    pub(crate) fn comm_remove(&self, comm: CommHandle) -> Result<()> {
        if let Some(state) = self.comms.live.lock().remove(&comm.as_raw()) {
            state.ready(); // removes the name if every rank joined
            return Ok(());
        }
        let mut aborted = self.comms.aborted.lock();
        match aborted.iter().position(|(h, _)| *h == comm.as_raw()) {
            Some(at) => {
                aborted.remove(at);
                Ok(())
            }
            None => Err(self.comms.get(comm).unwrap_err().context("comm_destroy")),
        }
    }

    /// `comm_abort`: fails this rank's queued and running operations and
    /// tells the other ranks.
    pub(crate) fn comm_kill(&self, comm: CommHandle) -> Result<()> {
        // Held across the removal, so comm_async_error always finds the
        // handle in one of the two tables (lock order: aborted, then live).
        let mut aborted = self.comms.aborted.lock();
        let state = self.comms.live.lock().remove(&comm.as_raw());
        let state = state.ok_or_else(|| self.comms.get(comm).unwrap_err().context("comm_abort"))?;
        let e = Error::new(
            dipu_deviceapi::ErrorKind::VendorError,
            format!("rank {} aborted the communicator (comm_abort)", state.rank),
        );
        state.abort(Reason::Aborted, e);
        let kept = state
            .error()
            .unwrap_or_else(|| Error::invalid_argument("aborted"));
        if aborted.len() == TOMBSTONES {
            aborted.pop_front();
        }
        aborted.push_back((comm.as_raw(), kept));
        Ok(())
    }

    /// `comm_async_error`.
    pub(crate) fn comm_error(&self, comm: CommHandle) -> Result<()> {
        if let Some((_, e)) = self
            .comms
            .aborted
            .lock()
            .iter()
            .find(|(h, _)| *h == comm.as_raw())
        {
            return Err(e.clone());
        }
        self.comms.get(comm)?.error().map_or(Ok(()), Err)
    }

    /// The communicator and stream of an operation, checked.
    fn comm_target(
        &self,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<(Arc<CommState>, Arc<crate::stream::Stream>)> {
        let state = self.comms.get(comm)?;
        if let Some(e) = state.error() {
            return Err(Error::new(
                e.kind(),
                format!("the communicator failed earlier: {}", e.message()),
            ));
        }
        let stream = self.stream(stream)?;
        if stream.device() != state.device {
            return Err(Error::invalid_argument(format!(
                "{} is not on device {}, where the communicator was created",
                stream.label(),
                state.device
            )));
        }
        Ok((state, stream))
    }

    /// Queues (or, inside a group, keeps) a collective.
    pub(crate) fn comm_collective(
        &self,
        call: Call,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let words = |e: Error| {
            e.context(format!(
                "{}(count {}, {})",
                call.kind.name(),
                call.count,
                desc::dtype_name(call.dtype)
            ))
        };
        let op = call.op.map(Reduction::from_op).transpose().map_err(words)?;
        let (state, stream) = self.comm_target(comm, stream).map_err(words)?;
        let root = rank_arg("root", call.root, state.world).map_err(words)?;
        let spec = Spec {
            kind: call.kind,
            send: call.send as usize,
            recv: call.recv as usize,
            count: call.count,
            dtype: call.dtype,
            op,
            root,
        };
        match Collective::new(&state, spec).map_err(words)? {
            Some(task) => group::issue(self.id, stream, Box::new(task) as Box<dyn Task>),
            None => Ok(()),
        }
    }

    /// Queues (or keeps) a send (`send`) or receive.
    pub(crate) fn comm_p2p(
        &self,
        send: bool,
        buf: usize,
        (count, dtype): (usize, DataType),
        peer: i32,
        (comm, stream): (CommHandle, StreamHandle),
    ) -> Result<()> {
        let call = format!(
            "{}(count {count}, {}, peer {peer})",
            if send { "send" } else { "recv" },
            desc::dtype_name(dtype)
        );
        let (state, stream) = self
            .comm_target(comm, stream)
            .map_err(|e| e.context(&call))?;
        let peer = rank_arg("peer", peer, state.world).map_err(|e| e.context(&call))?;
        match PointToPoint::new(&state, send, buf, count, dtype, peer)
            .map_err(|e| e.context(&call))?
        {
            Some(task) => group::issue(self.id, stream, Box::new(task) as Box<dyn Task>),
            None => Ok(()),
        }
    }

    /// `group_start`.
    pub(crate) fn comm_group_start(&self) {
        group::start(self.id);
    }

    /// `group_end`.
    pub(crate) fn comm_group_end(&self) -> Result<()> {
        group::end(self.id)
    }
}
