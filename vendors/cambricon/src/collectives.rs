//! Collectives on CNCL: communicators from a 136-byte clique id, the
//! collective operations, groups, and the translation of our data types
//! and operators (CNCL has no fp64 and no average; `Min` and `Max` swap).

use std::ffi::{c_char, c_int};

use dipu_deviceapi::{CommHandle, DataType, Error, ReduceOp, Result, StreamHandle};
use dipu_vendorkit::{Buffers, Collective, Translation};

use crate::cncl::*;
use crate::CambriconVendor;

/// Bytes of a clique id as the trait carries it: the 128 data bytes, then
/// the 64-bit hash in native byte order.
pub(crate) const CLIQUE_ID_BYTES: usize = std::mem::size_of::<CnclCliqueId>();

/// CNCL's type for ours; `None` for `F64`, which CNCL lacks.
pub(crate) fn cncl_type(dtype: DataType) -> Option<cnclDataType_t> {
    Some(match dtype {
        DataType::F16 => cnclHalf,
        DataType::BF16 => cnclBfloat16,
        DataType::F32 => cnclFloat,
        DataType::I8 => cnclInt8,
        DataType::U8 => cnclUint8,
        DataType::I16 => cnclInt16,
        DataType::I32 => cnclInt32,
        DataType::I64 => cnclInt64,
        DataType::U32 => cnclUint32,
        DataType::U64 => cnclUint64,
        _ => return None,
    })
}

/// CNCL's operator for ours; `None` for `Avg`, which CNCL lacks.
pub(crate) fn cncl_op(op: ReduceOp) -> Option<cnclReduceOp_t> {
    Some(match op {
        ReduceOp::Sum => cnclSum,
        ReduceOp::Prod => cnclProd,
        ReduceOp::Min => cnclMin,
        ReduceOp::Max => cnclMax,
        _ => return None,
    })
}

/// How CNCL names our types and operators.
const CNCL: Translation<cnclDataType_t, cnclReduceOp_t> = Translation {
    dtype: cncl_type,
    op: cncl_op,
    bytes: cnclUint8,
    no_type: "CNCL has no 64-bit float type, so it cannot reduce it",
    no_op: "CNCL has no such operator",
};

fn comm_ptr(comm: CommHandle) -> Result<cnclComm_t> {
    if comm.as_raw() == 0 {
        return Err(Error::invalid_argument("null CNCL communicator"));
    }
    Ok(comm.as_raw() as usize as cnclComm_t)
}

impl CambriconVendor {
    /// CNCL, or `Unsupported` saying why it is missing.
    fn cncl(&self) -> Result<&Cncl> {
        self.cncl.as_ref().ok_or_else(|| {
            Error::unsupported(
                "cambricon",
                &format!("collectives: CNCL is unavailable ({})", self.cncl_absent),
            )
        })
    }

    /// `cnclGetCliqueId`, as all 136 bytes (data and hash).
    pub(crate) fn unique_id(&self) -> Result<Vec<u8>> {
        let cncl = self.cncl()?;
        let mut id = CnclCliqueId {
            data: [0; CNCL_CLIQUE_ID_BYTES_SIZE],
            hash: 0,
        };
        // SAFETY: a valid out-pointer to a whole cnclCliqueId.
        let code = unsafe { (cncl.cnclGetCliqueId()?)(&mut id) };
        cncl.check(code, || "cnclGetCliqueId".into())?;
        let mut bytes: Vec<u8> = id.data.iter().map(|&c| c as u8).collect();
        bytes.extend_from_slice(&id.hash.to_ne_bytes());
        Ok(bytes)
    }

    /// `cnclInitComms` for one communicator: this rank on the current device.
    pub(crate) fn init_rank(
        &self,
        world_size: i32,
        unique_id: &[u8],
        rank: i32,
    ) -> Result<CommHandle> {
        let cncl = self.cncl()?;
        if unique_id.len() != CLIQUE_ID_BYTES {
            return Err(Error::invalid_argument(format!(
                "a CNCL clique id has {CLIQUE_ID_BYTES} bytes (128 of data and an 8-byte hash), \
                 not {}",
                unique_id.len()
            )));
        }
        let mut id = CnclCliqueId {
            data: [0; CNCL_CLIQUE_ID_BYTES_SIZE],
            hash: 0,
        };
        for (out, &b) in id.data.iter_mut().zip(unique_id) {
            *out = b as c_char;
        }
        let mut hash = [0u8; 8];
        hash.copy_from_slice(&unique_id[CNCL_CLIQUE_ID_BYTES_SIZE..]);
        id.hash = u64::from_ne_bytes(hash);
        let device: c_int = self.current()?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: one out-slot, one device and one rank; the id outlives the call.
        let code =
            // SAFETY: the caller's contract on buffers, comm and stream.
            unsafe { (cncl.cnclInitComms()?)(&mut comm, 1, &device, &rank, world_size, &id) };
        cncl.check(code, || {
            format!("cnclInitComms(world size {world_size}, rank {rank}, device {device})")
        })?;
        Ok(CommHandle::from_raw(comm as usize as u64))
    }

    /// `cnclFreeComm` (`abort: false`) or `cnclAbortComm`.
    ///
    /// # Safety
    /// `comm` is a live communicator, not used after this.
    pub(crate) unsafe fn end_comm(&self, comm: CommHandle, abort: bool) -> Result<()> {
        let cncl = self.cncl()?;
        let ptr = comm_ptr(comm)?;
        let (f, call) = if abort {
            (cncl.cnclAbortComm()?, "cnclAbortComm")
        } else {
            (cncl.cnclFreeComm()?, "cnclFreeComm")
        };
        // SAFETY: a live communicator by the caller's contract.
        let code = unsafe { f(ptr) };
        cncl.check(code, || format!("{call}({comm:?})"))
    }

    /// `cnclGetCommAsyncError`, which *returns* the state: success and
    /// "in progress" are healthy, anything else is the error. (DIPU's
    /// camb vendor reads it inverted.)
    ///
    /// # Safety
    /// `comm` is a live communicator.
    pub(crate) unsafe fn async_error(&self, comm: CommHandle) -> Result<()> {
        let cncl = self.cncl()?;
        // SAFETY: a live communicator.
        let state = unsafe { (cncl.cnclGetCommAsyncError()?)(comm_ptr(comm)?) };
        if state == CNCL_RET_SUCCESS || state == CNCL_RET_ASYNC_IN_PROGRESS {
            return Ok(());
        }
        cncl.check(state, || {
            format!("the communicator {comm:?} failed asynchronously")
        })
    }

    /// `cnclGroupStart` or `cnclGroupEnd`.
    pub(crate) fn group(&self, start: bool) -> Result<()> {
        let cncl = self.cncl()?;
        let f = if start {
            cncl.cnclGroupStart()?
        } else {
            cncl.cnclGroupEnd()?
        };
        // SAFETY: no arguments; CNCL tracks groups per thread.
        let code = unsafe { f() };
        cncl.check(code, || {
            if start {
                "cnclGroupStart"
            } else {
                "cnclGroupEnd"
            }
            .into()
        })
    }

    /// Issues one collective on `stream`.
    ///
    /// # Safety
    /// The buffers are live device memory of the sizes the operation needs
    /// until `stream` passes it; `comm` is live.
    pub(crate) unsafe fn collective(
        &self,
        what: Collective,
        b: Buffers,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let cncl = self.cncl()?;
        let c = comm_ptr(comm)?;
        let q = self.queue(stream)?;
        let name = format!("{what:?}");
        let code = match what {
            Collective::AllReduce(op) => {
                let (t, o) = CNCL.reduced(b.dtype, op, "all_reduce")?;
                // SAFETY: the caller's contract on buffers, comm and stream.
                unsafe { (cncl.cnclAllReduce()?)(b.send, b.recv, b.count, t, o, c, q) }
            }
            Collective::Broadcast(root) => {
                let (t, n) = CNCL.moved(b.dtype, b.count)?;
                if b.send == b.recv.cast_const() {
                    // cnclBroadcast is out of place; cnclBcast is in place.
                    // SAFETY: the caller's contract on buffers, comm and stream.
                    unsafe { (cncl.cnclBcast()?)(b.recv, n, t, root, c, q) }
                } else {
                    // SAFETY: the caller's contract on buffers, comm and stream.
                    unsafe { (cncl.cnclBroadcast()?)(b.send, b.recv, n, t, root, c, q) }
                }
            }
            Collective::AllGather => {
                let (t, n) = CNCL.moved(b.dtype, b.count)?;
                // SAFETY: the caller's contract on buffers, comm and stream.
                unsafe { (cncl.cnclAllGather()?)(b.send, b.recv, n, t, c, q) }
            }
            Collective::ReduceScatter(op) => {
                let (t, o) = CNCL.reduced(b.dtype, op, "reduce_scatter")?;
                // SAFETY: the caller's contract on buffers, comm and stream.
                unsafe { (cncl.cnclReduceScatter()?)(b.send, b.recv, b.count, t, o, c, q) }
            }
            Collective::Reduce(op, root) => {
                let (t, o) = CNCL.reduced(b.dtype, op, "reduce")?;
                // SAFETY: the caller's contract on buffers, comm and stream.
                unsafe { (cncl.cnclReduce()?)(b.send, b.recv, b.count, t, o, root, c, q) }
            }
            Collective::Send(peer) => {
                let (t, n) = CNCL.moved(b.dtype, b.count)?;
                // SAFETY: the caller's contract on buffers, comm and stream.
                unsafe { (cncl.cnclSend()?)(b.send.cast_mut(), n, t, peer, c, q) }
            }
            Collective::Recv(peer) => {
                let (t, n) = CNCL.moved(b.dtype, b.count)?;
                // SAFETY: the caller's contract on buffers, comm and stream.
                unsafe { (cncl.cnclRecv()?)(b.recv, n, t, peer, c, q) }
            }
        };
        cncl.check(code, || {
            format!("{name} of {} {:?} on {comm:?}", b.count, b.dtype)
        })
    }
}
