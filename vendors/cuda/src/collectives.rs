//! Collectives on NCCL: communicators, the collective operations, groups,
//! and the translation of our data types and operators (never cast: our
//! `Min` is 2 and `Max` 3, NCCL's `ncclMax` is 2 and `ncclMin` 3).

use std::ffi::c_char;
use std::time::{Duration, Instant};

use dipu_deviceapi::{CommHandle, DataType, Error, ErrorKind, ReduceOp, Result, StreamHandle};
use dipu_vendorkit::{Buffers, Collective, Translation};

use crate::memory::cuda_stream;
use crate::nccl::*;
use crate::CudaVendor;

/// NCCL's type for ours; `None` for `I16`, which NCCL lacks.
pub(crate) fn nccl_type(dtype: DataType) -> Option<ncclDataType_t> {
    Some(match dtype {
        DataType::F16 => ncclFloat16,
        DataType::BF16 => ncclBfloat16,
        DataType::F32 => ncclFloat32,
        DataType::F64 => ncclFloat64,
        DataType::I8 => ncclInt8,
        DataType::U8 => ncclUint8,
        DataType::I32 => ncclInt32,
        DataType::I64 => ncclInt64,
        DataType::U32 => ncclUint32,
        DataType::U64 => ncclUint64,
        _ => return None,
    })
}

/// NCCL's operator for ours.
pub(crate) fn nccl_op(op: ReduceOp) -> Option<ncclRedOp_t> {
    Some(match op {
        ReduceOp::Sum => ncclSum,
        ReduceOp::Prod => ncclProd,
        ReduceOp::Min => ncclMin,
        ReduceOp::Max => ncclMax,
        ReduceOp::Avg => ncclAvg,
        _ => return None,
    })
}

/// How NCCL names our types and operators.
const NCCL: Translation<ncclDataType_t, ncclRedOp_t> = Translation {
    dtype: nccl_type,
    op: nccl_op,
    bytes: ncclUint8,
    no_type: "NCCL has no such type (ncclDataType_t has no 16-bit integer), so it cannot reduce it",
    no_op: "NCCL has no such operator",
};

/// The process group's timeout variable, also the deadline of
/// communicator creation.
const ENV_COMM_TIMEOUT: &str = "DIPU_COMM_TIMEOUT";

/// `DIPU_COMM_TIMEOUT` seconds (default 600, c10d's).
fn comm_init_timeout() -> Duration {
    std::env::var(ENV_COMM_TIMEOUT)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::from_secs(600), Duration::from_secs_f64)
}

fn comm_ptr(comm: CommHandle) -> Result<ncclComm_t> {
    if comm.as_raw() == 0 {
        return Err(Error::invalid_argument("null NCCL communicator"));
    }
    Ok(comm.as_raw() as usize as ncclComm_t)
}

impl CudaVendor {
    /// NCCL, or `Unsupported` saying why it is missing.
    fn nccl(&self) -> Result<&Nccl> {
        self.nccl.as_ref().ok_or_else(|| {
            Error::unsupported(
                "cuda",
                &format!("collectives: NCCL is unavailable ({})", self.nccl_absent),
            )
        })
    }

    /// `ncclGetUniqueId`, as its 128 bytes.
    pub(crate) fn unique_id(&self) -> Result<Vec<u8>> {
        let nccl = self.nccl()?;
        let mut id = NcclUniqueId {
            internal: [0; NCCL_UNIQUE_ID_BYTES],
        };
        // SAFETY: a valid out-pointer to a whole ncclUniqueId.
        let code = unsafe { (nccl.ncclGetUniqueId()?)(&mut id) };
        nccl.check(code, || "ncclGetUniqueId".into())?;
        Ok(id.internal.iter().map(|&c| c as u8).collect())
    }

    /// A communicator on the current device: `ncclCommInitRankConfig`
    /// non-blocking with a deadline (else, before NCCL 2.14, the blocking
    /// `ncclCommInitRank`); the id goes by value.
    pub(crate) fn init_rank(
        &self,
        world_size: i32,
        unique_id: &[u8],
        rank: i32,
    ) -> Result<CommHandle> {
        let nccl = self.nccl()?;
        if unique_id.len() != NCCL_UNIQUE_ID_BYTES {
            return Err(Error::invalid_argument(format!(
                "an NCCL unique id has {NCCL_UNIQUE_ID_BYTES} bytes, not {}",
                unique_id.len()
            )));
        }
        let mut id = NcclUniqueId {
            internal: [0; NCCL_UNIQUE_ID_BYTES],
        };
        for (out, &b) in id.internal.iter_mut().zip(unique_id) {
            *out = b as c_char;
        }
        let mut comm = std::ptr::null_mut();
        let Ok(init_config) = nccl.ncclCommInitRankConfig() else {
            // NCCL before 2.14: blocking, with no way to give up.
            // SAFETY: a valid out-pointer; the id is passed by value.
            let code = unsafe { (nccl.ncclCommInitRank()?)(&mut comm, world_size, id, rank) };
            nccl.check(code, || {
                format!("ncclCommInitRank(world size {world_size}, rank {rank})")
            })?;
            return Ok(CommHandle::from_raw(comm as usize as u64));
        };
        let mut config = NcclConfig::non_blocking();
        // SAFETY: a valid out-pointer and config; the id is passed by value.
        let code = unsafe { init_config(&mut comm, world_size, id, rank, &mut config) };
        if code != ncclInProgress {
            nccl.check(code, || {
                format!(
                    "ncclCommInitRankConfig(world size {world_size}, rank {rank}, non-blocking)"
                )
            })?;
        }
        self.await_comm(nccl, comm, world_size, rank)?;
        Ok(CommHandle::from_raw(comm as usize as u64))
    }

    /// Waits until a non-blocking `ncclCommInitRankConfig` is done; past
    /// the deadline (`DIPU_COMM_TIMEOUT`, the process group's timeout,
    /// default 600 s) the communicator is aborted and `Timeout` returned,
    /// since a rank that never joins would otherwise block for ever.
    fn await_comm(&self, nccl: &Nccl, comm: ncclComm_t, world_size: i32, rank: i32) -> Result<()> {
        let timeout = comm_init_timeout();
        let start = Instant::now();
        let get = nccl.ncclCommGetAsyncError()?;
        let mut pause = Duration::from_micros(50);
        loop {
            let mut state = ncclInProgress;
            // SAFETY: a communicator NCCL returned and a valid out-pointer.
            let code = unsafe { get(comm, &mut state) };
            let failed = if code != ncclSuccess {
                Some(nccl.error(code, "ncclCommGetAsyncError during ncclCommInitRankConfig"))
            } else if state != ncclSuccess && state != ncclInProgress {
                Some(nccl.error(
                    state,
                    &format!("ncclCommInitRankConfig(world size {world_size}, rank {rank})"),
                ))
            } else if state == ncclInProgress && start.elapsed() >= timeout {
                Some(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "ncclCommInitRankConfig(world size {world_size}, rank {rank}): not every \
                         rank joined within {:.1} s ({ENV_COMM_TIMEOUT}); the communicator was \
                         aborted",
                        timeout.as_secs_f64()
                    ),
                ))
            } else {
                None
            };
            if let Some(e) = failed {
                if let Ok(abort) = nccl.ncclCommAbort() {
                    // SAFETY: the communicator being created, aborted once.
                    let _ = unsafe { abort(comm) };
                }
                return Err(e);
            }
            if state == ncclSuccess {
                return Ok(());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// `ncclCommDestroy` (`abort: false`) or `ncclCommAbort`.
    ///
    /// # Safety
    /// `comm` is a live communicator, not used after this.
    pub(crate) unsafe fn end_comm(&self, comm: CommHandle, abort: bool) -> Result<()> {
        let nccl = self.nccl()?;
        let ptr = comm_ptr(comm)?;
        let f = if abort {
            nccl.ncclCommAbort()?
        } else {
            nccl.ncclCommDestroy()?
        };
        // SAFETY: a live communicator by the caller's contract.
        let code = unsafe { f(ptr) };
        let call = if abort {
            "ncclCommAbort"
        } else {
            "ncclCommDestroy"
        };
        nccl.check(code, || format!("{call}({comm:?})"))
    }

    /// `ncclCommGetAsyncError`: `Ok` when healthy or still in progress.
    ///
    /// # Safety
    /// `comm` is a live communicator.
    pub(crate) unsafe fn async_error(&self, comm: CommHandle) -> Result<()> {
        let nccl = self.nccl()?;
        let mut state = ncclSuccess;
        // SAFETY: a live communicator and a valid out-pointer.
        let code = unsafe { (nccl.ncclCommGetAsyncError()?)(comm_ptr(comm)?, &mut state) };
        nccl.check(code, || format!("ncclCommGetAsyncError({comm:?})"))?;
        if state == ncclInProgress {
            return Ok(());
        }
        nccl.check(state, || {
            format!("the communicator {comm:?} failed asynchronously")
        })
    }

    /// `ncclGroupStart` or `ncclGroupEnd`.
    pub(crate) fn group(&self, start: bool) -> Result<()> {
        let nccl = self.nccl()?;
        let f = if start {
            nccl.ncclGroupStart()?
        } else {
            nccl.ncclGroupEnd()?
        };
        // SAFETY: no arguments; NCCL tracks groups per thread.
        let code = unsafe { f() };
        nccl.check(code, || {
            if start {
                "ncclGroupStart"
            } else {
                "ncclGroupEnd"
            }
            .into()
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
        let nccl = self.nccl()?;
        let (c, s) = (comm_ptr(comm)?, cuda_stream(stream));
        // Every call below relies on the caller's contract; types and
        // operators are translated, and counts are in elements of them.
        let code = match op {
            Collective::AllReduce(o) => {
                let (t, o) = NCCL.reduced(b.dtype, o, "all_reduce")?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclAllReduce()?)(b.send, b.recv, b.count, t, o, c, s) }
            }
            Collective::ReduceScatter(o) => {
                let (t, o) = NCCL.reduced(b.dtype, o, "reduce_scatter")?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclReduceScatter()?)(b.send, b.recv, b.count, t, o, c, s) }
            }
            Collective::Reduce(o, root) => {
                let (t, o) = NCCL.reduced(b.dtype, o, "reduce")?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclReduce()?)(b.send, b.recv, b.count, t, o, root, c, s) }
            }
            Collective::Broadcast(root) => {
                let (t, n) = NCCL.moved(b.dtype, b.count)?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclBroadcast()?)(b.send, b.recv, n, t, root, c, s) }
            }
            Collective::AllGather => {
                let (t, n) = NCCL.moved(b.dtype, b.count)?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclAllGather()?)(b.send, b.recv, n, t, c, s) }
            }
            Collective::Send(peer) => {
                let (t, n) = NCCL.moved(b.dtype, b.count)?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclSend()?)(b.send, n, t, peer, c, s) }
            }
            Collective::Recv(peer) => {
                let (t, n) = NCCL.moved(b.dtype, b.count)?;
                // SAFETY: as said above the match.
                unsafe { (nccl.ncclRecv()?)(b.recv, n, t, peer, c, s) }
            }
        };
        nccl.check(code, || {
            format!(
                "{op:?} of {} x {:?} on {comm:?}, {stream:?}",
                b.count, b.dtype
            )
        })
    }
}
