//! Collectives on HCCL: communicators, the operations, groups, and the
//! translation of our data types and operators (never cast).
//!
//! HCCL's differences absorbed here: `HcclBroadcast` is in place only (the
//! root copies `send` into `recv` first when they differ); there is no
//! average (`Avg` is `Unsupported`, which the process group emulates as a
//! sum and a division); groups may be missing (then sends and receives
//! between `group_start` and `group_end` go out together as one
//! `HcclBatchSendRecv` per communicator and stream); and there is no abort
//! (see [`AscendVendor::end_comm`]).

use std::cell::RefCell;
use std::collections::HashSet;

use dipu_deviceapi::{
    CommHandle, CopyKind, DataType, Error, ErrorKind, ReduceOp, Result, StreamHandle,
};
use dipu_vendorkit::{Buffers, Collective, Translation};
use parking_lot::Mutex;

use crate::hccl::*;
use crate::streams::acl_stream;
use crate::AscendVendor;

/// HCCL's type for ours.
pub(crate) fn hccl_type(dtype: DataType) -> Option<HcclDataType> {
    Some(match dtype {
        DataType::F16 => HCCL_DATA_TYPE_FP16,
        DataType::BF16 => HCCL_DATA_TYPE_BFP16,
        DataType::F32 => HCCL_DATA_TYPE_FP32,
        DataType::F64 => HCCL_DATA_TYPE_FP64,
        DataType::I8 => HCCL_DATA_TYPE_INT8,
        DataType::U8 => HCCL_DATA_TYPE_UINT8,
        DataType::I16 => HCCL_DATA_TYPE_INT16,
        DataType::I32 => HCCL_DATA_TYPE_INT32,
        DataType::I64 => HCCL_DATA_TYPE_INT64,
        DataType::U32 => HCCL_DATA_TYPE_UINT32,
        DataType::U64 => HCCL_DATA_TYPE_UINT64,
        _ => return None,
    })
}

/// HCCL's operator for ours; `None` for `Avg`, which HCCL lacks.
pub(crate) fn hccl_op(op: ReduceOp) -> Option<HcclReduceOp> {
    Some(match op {
        ReduceOp::Sum => HCCL_REDUCE_SUM,
        ReduceOp::Prod => HCCL_REDUCE_PROD,
        ReduceOp::Min => HCCL_REDUCE_MIN,
        ReduceOp::Max => HCCL_REDUCE_MAX,
        _ => return None,
    })
}

/// How HCCL names our types and operators.
const HCCL: Translation<HcclDataType, HcclReduceOp> = Translation {
    dtype: hccl_type,
    op: hccl_op,
    bytes: HCCL_DATA_TYPE_UINT8,
    no_type: "HCCL has no such type",
    no_op: "HCCL has no such operator (no average: sum, then divide)",
};

/// Type and count (as HCCL takes it) for an operation that only moves
/// data: a type HCCL lacks travels as bytes.
fn moved(dtype: DataType, count: usize) -> Result<(HcclDataType, u64)> {
    let (t, n) = HCCL.moved(dtype, count)?;
    Ok((t, n as u64))
}

/// Sends and receives held back until `group_end`, without HCCL groups.
struct Batch {
    comm: usize,
    stream: StreamHandle,
    items: Vec<HcclSendRecvItem>,
}

thread_local! {
    /// The open group of this thread (`None`: no group open); nested
    /// starts count.
    static GROUP: RefCell<Option<(u32, Vec<Batch>)>> = const { RefCell::new(None) };
}

/// Communicators aborted (marked failed, never destroyed), by address.
pub(crate) type Aborted = Mutex<HashSet<usize>>;

/// Each live communicator's rank, by address.
pub(crate) type Ranks = Mutex<std::collections::HashMap<usize, i32>>;

impl AscendVendor {
    /// HCCL, or `Unsupported` saying why it is missing.
    fn hccl(&self) -> Result<&Hccl> {
        self.hccl.as_ref().ok_or_else(|| {
            Error::unsupported(
                "ascend",
                &format!("collectives: HCCL is unavailable ({})", self.hccl_absent),
            )
        })
    }

    /// The communicator, refused when null or aborted.
    fn comm_ptr(&self, comm: CommHandle) -> Result<HcclComm> {
        if comm.as_raw() == 0 {
            return Err(Error::invalid_argument("null HCCL communicator"));
        }
        if self.aborted.lock().contains(&(comm.as_raw() as usize)) {
            return Err(Error::new(
                ErrorKind::VendorError,
                format!("the HCCL communicator {comm:?} was aborted"),
            ));
        }
        Ok(comm.as_raw() as usize as HcclComm)
    }

    /// `HcclGetRootInfo`, as its 4108 bytes.
    pub(crate) fn unique_id(&self) -> Result<Vec<u8>> {
        let hccl = self.hccl()?;
        self.bind()?;
        let mut id = HcclRootInfoBytes {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        };
        // SAFETY: a valid out-pointer to a whole HcclRootInfo.
        let code = unsafe { (hccl.HcclGetRootInfo()?)(&mut id) };
        hccl.check(code, || "HcclGetRootInfo".into())?;
        Ok(id.internal.iter().map(|&c| c as u8).collect())
    }

    /// `HcclCommInitRootInfo`, which binds to the current device.
    pub(crate) fn init_rank(
        &self,
        world_size: i32,
        unique_id: &[u8],
        rank: i32,
    ) -> Result<CommHandle> {
        let hccl = self.hccl()?;
        if unique_id.len() != HCCL_ROOT_INFO_BYTES {
            return Err(Error::invalid_argument(format!(
                "an HCCL root info has {HCCL_ROOT_INFO_BYTES} bytes, not {}",
                unique_id.len()
            )));
        }
        if world_size <= 0 || !(0..world_size).contains(&rank) {
            return Err(Error::invalid_argument(format!(
                "rank {rank} of world size {world_size}"
            )));
        }
        let device = self.bind()?;
        let mut id = HcclRootInfoBytes {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        };
        for (out, &b) in id.internal.iter_mut().zip(unique_id) {
            *out = b as std::ffi::c_char;
        }
        let mut comm = std::ptr::null_mut();
        // SAFETY: a valid root info and out-pointer.
        let code = unsafe {
            (hccl.HcclCommInitRootInfo()?)(world_size as u32, &id, rank as u32, &mut comm)
        };
        hccl.check(code, || {
            format!("HcclCommInitRootInfo(world size {world_size}, rank {rank}) on device {device}")
        })?;
        self.ranks.lock().insert(comm as usize, rank);
        Ok(CommHandle::from_raw(comm as usize as u64))
    }

    /// `HcclCommDestroy`, or for an abort, which HCCL lacks: the
    /// communicator is marked failed (`comm_async_error` reports it, every
    /// later call on it is refused) and left undestroyed, since destroying
    /// it would wait for the collective that is stuck. The caller's wait
    /// ends through its own timeout (the process group polls its work's
    /// events and the communicators' errors on the host), not through HCCL.
    ///
    /// # Safety
    /// `comm` is a live communicator, not used after this.
    pub(crate) unsafe fn end_comm(&self, comm: CommHandle, abort: bool) -> Result<()> {
        let hccl = self.hccl()?;
        let ptr = self.comm_ptr(comm)?;
        if abort {
            self.aborted.lock().insert(comm.as_raw() as usize);
            tracing::warn!(target: "dipu::ascend", "HCCL has no abort: {comm:?} is marked failed and leaked");
            return Ok(());
        }
        self.bind()?;
        // SAFETY: a live communicator by the caller's contract.
        let code = unsafe { (hccl.HcclCommDestroy()?)(ptr) };
        self.ranks.lock().remove(&(ptr as usize));
        hccl.check(code, || format!("HcclCommDestroy({comm:?})"))
    }

    /// `HcclGetCommAsyncError`; an aborted communicator is an error.
    ///
    /// # Safety
    /// `comm` is a live communicator.
    pub(crate) unsafe fn async_error(&self, comm: CommHandle) -> Result<()> {
        let hccl = self.hccl()?;
        let ptr = self.comm_ptr(comm)?;
        let mut state = HCCL_SUCCESS;
        // SAFETY: a live communicator and a valid out-pointer.
        let code = unsafe { (hccl.HcclGetCommAsyncError()?)(ptr, &mut state) };
        hccl.check(code, || format!("HcclGetCommAsyncError({comm:?})"))?;
        hccl.check(state, || {
            format!("the communicator {comm:?} failed asynchronously")
        })
    }

    /// `HcclGroupStart`/`End`, else the batching described in the module
    /// documentation.
    pub(crate) fn group(&self, start: bool) -> Result<()> {
        let hccl = self.hccl()?;
        let native = if start {
            hccl.HcclGroupStart()
        } else {
            hccl.HcclGroupEnd()
        };
        if let Ok(f) = native {
            self.bind()?;
            // SAFETY: no arguments; HCCL tracks groups per thread.
            let code = unsafe { f() };
            return hccl.check(code, || {
                if start {
                    "HcclGroupStart"
                } else {
                    "HcclGroupEnd"
                }
                .into()
            });
        }
        if start {
            GROUP.with(|g| {
                let mut g = g.borrow_mut();
                match g.as_mut() {
                    Some((depth, _)) => *depth += 1,
                    None => *g = Some((1, Vec::new())),
                }
            });
            return Ok(());
        }
        let batches = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            match g.as_mut() {
                None => Err(Error::invalid_argument("group_end without group_start")),
                Some((depth, _)) if *depth > 1 => {
                    *depth -= 1;
                    Ok(Vec::new())
                }
                Some(_) => Ok(g.take().map(|(_, b)| b).unwrap_or_default()),
            }
        })?;
        self.bind()?;
        let mut first_error = Ok(());
        for mut b in batches {
            // SAFETY: every item's buffer was promised live by the caller of
            // send/recv until the stream passes the operation.
            let code = unsafe {
                (hccl.HcclBatchSendRecv()?)(
                    b.items.as_mut_ptr(),
                    b.items.len() as u32,
                    b.comm as HcclComm,
                    acl_stream(b.stream),
                )
            };
            if first_error.is_ok() {
                first_error = hccl.check(code, || {
                    format!("HcclBatchSendRecv({} items, {:?})", b.items.len(), b.stream)
                });
            }
        }
        first_error
    }

    /// Holds a send or receive back for the open emulated group; `false`
    /// when no such group is open.
    fn batched(&self, comm: HcclComm, stream: StreamHandle, item: HcclSendRecvItem) -> bool {
        GROUP.with(|g| {
            let mut g = g.borrow_mut();
            let Some((_, batches)) = g.as_mut() else {
                return false;
            };
            match batches
                .iter_mut()
                .find(|b| b.comm == comm as usize && b.stream == stream)
            {
                Some(b) => b.items.push(item),
                None => batches.push(Batch {
                    comm: comm as usize,
                    stream,
                    items: vec![item],
                }),
            }
            true
        })
    }

    /// Launches one collective on `stream`.
    ///
    /// # Safety
    /// The buffers are live device memory of the sizes the operation
    /// needs until the stream passes it; `comm` and `stream` are live.
    pub(crate) unsafe fn collective(
        &self,
        op: Collective,
        b: Buffers,
        comm: CommHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        let hccl = self.hccl()?;
        let c = self.comm_ptr(comm)?;
        let s = acl_stream(stream);
        self.bind()?;
        let send = b.send.cast_mut();
        // Every call below relies on the caller's contract; types and
        // operators are translated, and counts are in elements of them.
        let code = match op {
            Collective::AllReduce(o) => {
                let (t, o) = HCCL.reduced(b.dtype, o, "all_reduce")?;
                // SAFETY: as said above the match.
                unsafe { (hccl.HcclAllReduce()?)(send, b.recv, b.count as u64, t, o, c, s) }
            }
            Collective::ReduceScatter(o) => {
                let (t, o) = HCCL.reduced(b.dtype, o, "reduce_scatter")?;
                // SAFETY: as said above the match.
                unsafe { (hccl.HcclReduceScatter()?)(send, b.recv, b.count as u64, t, o, c, s) }
            }
            Collective::Reduce(o, root) => {
                let (t, o) = HCCL.reduced(b.dtype, o, "reduce")?;
                // SAFETY: as said above the match.
                unsafe {
                    (hccl.HcclReduce()?)(send, b.recv, b.count as u64, t, o, root as u32, c, s)
                }
            }
            Collective::Broadcast(root) => {
                let (t, n) = moved(b.dtype, b.count)?;
                if send != b.recv && !send.is_null() {
                    // In place only: the root's data goes into `recv` first,
                    // in order on the stream.
                    let bytes = b.count * b.dtype.size_in_bytes();
                    let is_root = self.ranks.lock().get(&(c as usize)) == Some(&root);
                    if is_root {
                        // SAFETY: both buffers are live device memory.
                        unsafe {
                            self.copy(b.recv, send, bytes, CopyKind::DeviceToDevice, Some(stream))?
                        };
                    }
                }
                // SAFETY: as said above the match.
                unsafe { (hccl.HcclBroadcast()?)(b.recv, n, t, root as u32, c, s) }
            }
            Collective::AllGather => {
                let (t, n) = moved(b.dtype, b.count)?;
                // SAFETY: as said above the match.
                unsafe { (hccl.HcclAllGather()?)(send, b.recv, n, t, c, s) }
            }
            Collective::Send(peer) | Collective::Recv(peer) => {
                let (t, n) = moved(b.dtype, b.count)?;
                let is_send = matches!(op, Collective::Send(_));
                let item = HcclSendRecvItem {
                    send_recv_type: if is_send { HCCL_SEND } else { HCCL_RECV },
                    buf: if is_send { send } else { b.recv },
                    count: n,
                    data_type: t,
                    remote_rank: peer as u32,
                };
                if self.batched(c, stream, item) {
                    return Ok(());
                }
                if is_send {
                    // SAFETY: as said above the match.
                    unsafe { (hccl.HcclSend()?)(send, n, t, peer as u32, c, s) }
                } else {
                    // SAFETY: as said above the match.
                    unsafe { (hccl.HcclRecv()?)(b.recv, n, t, peer as u32, c, s) }
                }
            }
        };
        hccl.check(code, || {
            format!(
                "{op:?} of {} x {:?} on {comm:?}, {stream:?}",
                b.count, b.dtype
            )
        })
    }
}
