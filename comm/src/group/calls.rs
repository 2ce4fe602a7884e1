//! A communicator's collective calls, on its stream: the vendor's, with
//! the communicator's handle, or the host-staged ones. Roots and peers are
//! ranks of the communicator.

use std::ffi::c_void;

use dipu_deviceapi::{DataType, Error, ReduceOp, Result};

use super::comms::{Backend, Comm};
use super::staged::DeviceOp;

/// A root or peer as an index.
fn index(what: &str, rank: i32) -> Result<usize> {
    usize::try_from(rank)
        .map_err(|_| Error::invalid_argument(format!("{what} {rank} is not a rank")))
}

impl Comm {
    /// Runs the vendor `call` with the handle and stream, or queues the
    /// host-staged `op`.
    fn call(
        &self,
        vendor: impl FnOnce(dipu_deviceapi::CommHandle) -> Result<()>,
        staged: impl FnOnce() -> Result<DeviceOp>,
    ) -> Result<()> {
        match &self.backend {
            Backend::Vendor(handle) => vendor(*handle),
            Backend::Staged(comm) => comm.issue(staged()?),
        }
    }

    /// All-reduce of `count` elements from `send` into `recv`.
    ///
    /// # Safety
    /// `send` and `recv` are live device memory of the communicator's
    /// device, `count` elements each, until the stream has passed the call.
    pub(crate) unsafe fn all_reduce(
        &self,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<()> {
        let s = self.stream.raw();
        self.call(
            // SAFETY: the caller's promise; the handle is this vendor's.
            |c| unsafe { self.api.all_reduce(send, recv, count, dtype, op, c, s) },
            || {
                Ok(DeviceOp::AllReduce {
                    send: send as usize,
                    recv: recv as usize,
                    count,
                    dtype,
                    op,
                })
            },
        )
    }

    /// Reduce of `count` elements from `send` into `root`'s `recv`.
    ///
    /// # Safety
    /// As for [`Comm::all_reduce`].
    pub(crate) unsafe fn reduce(
        &self,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        dtype: DataType,
        (op, root): (ReduceOp, i32),
    ) -> Result<()> {
        let s = self.stream.raw();
        self.call(
            // SAFETY: the caller's promise; the handle is this vendor's.
            |c| unsafe { self.api.reduce(send, recv, count, dtype, op, root, c, s) },
            || {
                Ok(DeviceOp::Reduce {
                    send: send as usize,
                    recv: recv as usize,
                    count,
                    dtype,
                    op,
                    root: index("root", root)?,
                })
            },
        )
    }

    /// Broadcast of `root`'s `count` elements at `send` into every `recv`.
    ///
    /// # Safety
    /// As for [`Comm::all_reduce`].
    pub(crate) unsafe fn broadcast(
        &self,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        dtype: DataType,
        root: i32,
    ) -> Result<()> {
        let s = self.stream.raw();
        self.call(
            // SAFETY: the caller's promise; the handle is this vendor's.
            |c| unsafe { self.api.broadcast(send, recv, count, dtype, root, c, s) },
            || {
                Ok(DeviceOp::Broadcast {
                    send: send as usize,
                    recv: recv as usize,
                    count,
                    dtype,
                    root: index("root", root)?,
                })
            },
        )
    }

    /// All-gather of `count` elements per rank into `recv` (ranks x count).
    ///
    /// # Safety
    /// As for [`Comm::all_reduce`], `recv` holding ranks x `count`.
    pub(crate) unsafe fn all_gather(
        &self,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        dtype: DataType,
    ) -> Result<()> {
        let s = self.stream.raw();
        self.call(
            // SAFETY: the caller's promise; the handle is this vendor's.
            |c| unsafe { self.api.all_gather(send, recv, count, dtype, c, s) },
            || {
                Ok(DeviceOp::AllGather {
                    send: send as usize,
                    recv: recv as usize,
                    count,
                    dtype,
                })
            },
        )
    }

    /// Reduce-scatter of `send` (ranks x count) into `count` at `recv`.
    ///
    /// # Safety
    /// As for [`Comm::all_reduce`], `send` holding ranks x `count`.
    pub(crate) unsafe fn reduce_scatter(
        &self,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<()> {
        let s = self.stream.raw();
        self.call(
            // SAFETY: the caller's promise; the handle is this vendor's.
            |c| unsafe { self.api.reduce_scatter(send, recv, count, dtype, op, c, s) },
            || {
                Ok(DeviceOp::ReduceScatter {
                    send: send as usize,
                    recv: recv as usize,
                    count,
                    dtype,
                    op,
                })
            },
        )
    }

    /// Sends `count` elements at `buf` to `peer` (`recv`: receives them).
    ///
    /// # Safety
    /// As for [`Comm::all_reduce`].
    pub(crate) unsafe fn point_to_point(
        &self,
        recv: bool,
        buf: *mut c_void,
        (count, dtype): (usize, DataType),
        peer: i32,
    ) -> Result<()> {
        let s = self.stream.raw();
        self.call(
            // SAFETY: the caller's promise; the handle is this vendor's.
            |c| unsafe {
                if recv {
                    self.api.recv(buf, count, dtype, peer, c, s)
                } else {
                    self.api.send(buf, count, dtype, peer, c, s)
                }
            },
            || {
                let (buf, peer) = (buf as usize, index("peer", peer)?);
                Ok(if recv {
                    DeviceOp::Recv {
                        buf,
                        count,
                        dtype,
                        peer,
                    }
                } else {
                    DeviceOp::Send {
                        buf,
                        count,
                        dtype,
                        peer,
                    }
                })
            },
        )
    }

    /// Starts a group (the vendor's, per thread; host-staged: this
    /// communicator's, per thread).
    pub(crate) fn group_start(&self) -> Result<()> {
        match &self.backend {
            Backend::Vendor(_) => self.api.group_start(),
            Backend::Staged(comm) => {
                comm.group_start();
                Ok(())
            }
        }
    }

    /// Ends the group: its operations are launched together.
    pub(crate) fn group_end(&self) -> Result<()> {
        match &self.backend {
            Backend::Vendor(_) => self.api.group_end(),
            Backend::Staged(comm) => comm.group_end(),
        }
    }
}
