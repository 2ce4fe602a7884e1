//! The shared-memory transport: the host vendor's own collectives, which
//! already join ranks that are threads of one process or processes of one
//! machine over POSIX shared memory (reading peers' buffers directly when
//! they are large). Each communicator gets a private one-device host
//! vendor, used only through the `DeviceApi` trait: the staged data is
//! copied into that vendor's memory, the collective runs on its stream,
//! and the result is copied back. Its collectives are always on, whatever
//! `DIPU_HOST_COLLECTIVES` says.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{
    CommHandle, DataType, DeviceApi, Error, ErrorKind, ReduceOp, Result, StreamHandle,
};
use dipu_vendor_host::{HostConfig, HostVendor};

use super::batch::{HostOp, Layout};
use super::rendezvous::{wait_all, Setup};
use super::shared::Shared;
use super::Transport;
use crate::group::emulate::divider;

/// The private vendor's memory: room for the largest batch.
const CAPACITY: u64 = 16 << 30;
/// Scratch memory is at least this large, so that it comes from the
/// vendor's shareable memory file (which peers map and read directly).
const MIN_SCRATCH: usize = 1 << 20;

/// One rank of a shared-memory communicator.
pub(crate) struct Shm {
    host: Arc<HostVendor>,
    comm: CommHandle,
    stream: StreamHandle,
    /// The vendor's device memory the collectives run on, and its size.
    scratch: (usize, usize),
    rank: usize,
    size: i32,
}

/// Joins the shared-memory communicator: the lowest rank publishes the
/// host vendor's unique id, the others wait for it.
pub(crate) fn connect(
    setup: &Setup,
    shared: &Shared,
    deadline: Instant,
) -> Result<Box<dyn Transport>> {
    let config = HostConfig {
        devices: 1,
        memory_per_device: CAPACITY,
        comm_timeout: setup.timeout.saturating_mul(2).max(Duration::from_secs(1)),
        collectives: true,
        ..HostConfig::default()
    };
    let host = Arc::new(HostVendor::new(config)?);
    let key = format!("{}/shm", setup.prefix);
    let id = if setup.rank == 0 {
        let id = host.comm_get_unique_id()?;
        setup.store.set(&key, &id)?;
        id
    } else {
        let mut ids = wait_all(
            setup,
            shared,
            std::slice::from_ref(&key),
            deadline,
            "rank 0's shared-memory id",
        )?;
        ids.pop().unwrap_or_default()
    };
    let comm = host.comm_init_rank(setup.size as i32, &id, setup.rank as i32)?;
    let stream = match host.stream_create(0) {
        Ok(stream) => stream,
        Err(e) => {
            // SAFETY: the handle was just made by this vendor.
            let _ = unsafe { host.comm_destroy(comm) };
            return Err(e);
        }
    };
    let aborted = Arc::clone(&host);
    shared.set_aborter(Box::new(move || {
        // SAFETY: the handle is this vendor's; aborting it while an
        // operation runs is what comm_abort is for, and the vendor keeps
        // the handle's error after it (a later destroy is harmless).
        let _ = unsafe { aborted.comm_abort(comm) };
    }));
    Ok(Box::new(Shm {
        host,
        comm,
        stream,
        scratch: (0, 0),
        rank: setup.rank,
        size: setup.size as i32,
    }))
}

impl Shm {
    /// Scratch memory of at least `bytes`.
    fn scratch(&mut self, bytes: usize) -> Result<usize> {
        if self.scratch.1 < bytes {
            let size = bytes.max(MIN_SCRATCH).next_power_of_two();
            let fresh = self.host.malloc(size)? as usize;
            self.free_scratch();
            self.scratch = (fresh, size);
        }
        Ok(self.scratch.0)
    }

    fn free_scratch(&mut self) {
        if self.scratch.0 != 0 {
            // SAFETY: the scratch came from this vendor's malloc, and no
            // operation uses it: the stream was synchronised after the last.
            let _ = unsafe { self.host.free(self.scratch.0 as *mut c_void) };
            self.scratch = (0, 0);
        }
    }

    /// Queues `op` on the vendor's stream, `Avg` as a sum.
    fn issue(&self, s: usize, op: HostOp) -> Result<()> {
        let p = |at: usize| (s + at) as *mut c_void;
        let sum = |op: ReduceOp| {
            if op == ReduceOp::Avg {
                ReduceOp::Sum
            } else {
                op
            }
        };
        let (c, st) = (self.comm, self.stream);
        // SAFETY: every pointer lies in the scratch memory (the layout's
        // regions fit in `layout.bytes`, which the scratch holds), live
        // until the stream is synchronised; the handles are this vendor's.
        unsafe {
            match op {
                HostOp::AllReduce {
                    at,
                    count,
                    dtype,
                    op,
                } => self
                    .host
                    .all_reduce(p(at), p(at), count, dtype, sum(op), c, st),
                HostOp::Reduce {
                    at,
                    count,
                    dtype,
                    op,
                    root,
                } => self
                    .host
                    .reduce(p(at), p(at), count, dtype, sum(op), root as i32, c, st),
                HostOp::Broadcast { at, bytes, root } => {
                    self.host
                        .broadcast(p(at), p(at), bytes, DataType::U8, root as i32, c, st)
                }
                HostOp::AllGather { send, recv, bytes } => {
                    self.host
                        .all_gather(p(send), p(recv), bytes, DataType::U8, c, st)
                }
                HostOp::ReduceScatter {
                    send,
                    recv,
                    count,
                    dtype,
                    op,
                } => self
                    .host
                    .reduce_scatter(p(send), p(recv), count, dtype, sum(op), c, st),
                HostOp::Send { at, bytes, peer } => {
                    self.host
                        .send(p(at), bytes, DataType::U8, peer as i32, c, st)
                }
                HostOp::Recv { at, bytes, peer } => {
                    self.host
                        .recv(p(at), bytes, DataType::U8, peer as i32, c, st)
                }
            }
        }
    }

    /// Divides the results of averages by the number of ranks.
    fn average(&self, s: usize, op: HostOp, ranks: i32) -> Result<()> {
        let (at, count, dtype) = match op {
            HostOp::AllReduce {
                at,
                count,
                dtype,
                op: ReduceOp::Avg,
            } => (at, count, dtype),
            HostOp::Reduce {
                at,
                count,
                dtype,
                op: ReduceOp::Avg,
                root,
            } if root == self.rank => (at, count, dtype),
            HostOp::ReduceScatter {
                recv,
                count,
                dtype,
                op: ReduceOp::Avg,
                ..
            } => (recv, count, dtype),
            _ => return Ok(()),
        };
        let divide = divider(dtype).ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("no host division for {dtype:?}"),
            )
        })?;
        divide((s + at) as *mut u8, count, ranks);
        Ok(())
    }
}

impl Transport for Shm {
    fn run(&mut self, layout: &Layout, base: usize) -> Result<()> {
        let s = self.scratch(layout.bytes)?;
        let copy = |from: usize, to: usize, bytes: usize| {
            // SAFETY: the staging buffer (`base`, the worker's alone while
            // it runs) and the scratch (this vendor's host memory, idle
            // between batches) both hold `layout.bytes`, which every move
            // lies in; they never overlap.
            unsafe { std::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, bytes) }
        };
        for m in &layout.downs {
            copy(base + m.offset, s + m.offset, m.bytes);
        }
        let grouped = layout.ops.len() > 1;
        if grouped {
            self.host.group_start()?;
        }
        let issued = layout.ops.iter().try_for_each(|op| self.issue(s, *op));
        let ended = if grouped {
            self.host.group_end()
        } else {
            Ok(())
        };
        issued.and(ended)?;
        // SAFETY: the stream and the communicator are this vendor's.
        unsafe {
            self.host.stream_synchronize(self.stream)?;
            self.host.comm_async_error(self.comm)?;
        }
        for op in &layout.ops {
            self.average(s, *op, self.size)?;
        }
        for m in &layout.ups {
            copy(s + m.offset, base + m.offset, m.bytes);
        }
        Ok(())
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: the handles are this vendor's and nothing runs on them
        // (the worker drops the transport between batches).
        unsafe {
            let _ = self.host.stream_synchronize(self.stream);
            let _ = self.host.comm_destroy(self.comm);
            let _ = self.host.stream_destroy(self.stream);
        }
        self.free_scratch();
    }
}
