//! The fake NCCL (`libnccl.so.2`): communicators whose ranks are processes
//! (or threads) meeting in shared memory named by the unique id
//! ([`dipu_fakekit::collective`]), collectives and send/receive queued on
//! CUDA streams, groups, non-blocking initialisation, asynchronous errors
//! and abort. Each behaviour cites the sentence of NCCL's documentation it
//! models.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use dipu_fakekit::collective::{Failure, Key, Member, Posted, View, META};
use dipu_fakekit::handles::Table;
use dipu_fakekit::{thread, trace};
use parking_lot::Mutex;

use crate::errors::*;
use crate::exports::exports;
use crate::reduce::{reduce, size_of};
use crate::state::{current_device, fake, Addr};
use crate::types::*;

/// `NCCL_API_MAGIC`: the `magic` of an initialised `ncclConfig_t`.
const API_MAGIC: u32 = 0xcafe_beef;

/// One rank's communicator.
struct Rank {
    comm: Member,
    rank: usize,
    /// Collectives launched so far (every rank launches them in one order).
    seq: AtomicU64,
    /// Sends and receives so far: (src, dst, is a receive) -> count (a
    /// sender's count of sends to a peer matches that peer's count of
    /// receives from it).
    p2p: Mutex<HashMap<(usize, usize, bool), u64>>,
    /// The asynchronous error.
    error: AtomicI32,
    /// Set while a call uses it: a second thread at once is refused.
    busy: AtomicBool,
}

static RANKS: Table<Rank> = Table::new(0xCC_0000_0000);
/// `ncclGetLastError`'s text: process-wide and never cleared, as NCCL's.
static LAST: Mutex<[u8; 512]> = Mutex::new([0; 512]);
static IDS: AtomicU64 = AtomicU64::new(0);

fn set_last(text: &str) {
    let mut last = LAST.lock();
    let n = text.len().min(last.len() - 1);
    last[..n].copy_from_slice(&text.as_bytes()[..n]);
    last[n] = 0;
}

/// What one rank does in one operation.
#[derive(Debug, Clone, Copy)]
enum Op {
    AllReduce(i32),
    Broadcast(usize),
    Reduce(i32, usize),
    AllGather,
    ReduceScatter(i32),
    Send,
    Recv,
}

/// An operation of a rank, ready to run on its stream.
struct Launch {
    rank: Arc<Rank>,
    key: Key,
    /// The rank of each party (a collective's party i is rank i; a
    /// send/receive's are the sender and the receiver).
    posters: Vec<usize>,
    parties: usize,
    index: usize,
    op: Op,
    send: usize,
    recv: usize,
    /// Bytes per rank's share (`count` elements).
    bytes: usize,
    dtype: i32,
    stream: usize,
}

thread_local! {
    /// `ncclGroupStart` depth and the operations collected meanwhile.
    static GROUP: RefCell<(u32, Vec<Launch>)> = const { RefCell::new((0, Vec::new())) };
}

fn guard(name: &str, args: impl FnOnce() -> String) -> Result<(), ncclResult_t> {
    trace::call(name, args);
    if thread::forked() {
        set_last(&format!("{name}: CUDA failure: initialization error (the process forked after CUDA was initialised)"));
        return Err(ncclUnhandledCudaError);
    }
    if let Some(code) = fake().cfg.faults.fail(name) {
        // An injected failure leaves the last error text as it was.
        return Err(code);
    }
    Ok(())
}

fn run(
    name: &str,
    args: impl FnOnce() -> String,
    body: impl FnOnce() -> Result<(), ncclResult_t>,
) -> ncclResult_t {
    match guard(name, args).and_then(|()| body()) {
        Ok(()) => ncclSuccess,
        Err(code) => code,
    }
}

fn invalid(text: String) -> ncclResult_t {
    set_last(&text);
    ncclInvalidArgument
}

/// # Safety
/// `comm` is null or a handle this library gave out.
fn rank_of(comm: ncclComm_t) -> Result<Arc<Rank>, ncclResult_t> {
    RANKS
        .get(comm as usize)
        .ok_or_else(|| invalid(format!("{comm:p} is not a live communicator")))
}

/// The bytes at `at` (a caller's buffer, alive until its operation ran).
fn bytes(at: usize, len: usize) -> &'static [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: a rank's send buffer of `len` bytes, kept alive (by NCCL's
    // contract) until its operation completes, which is after this read.
    unsafe { std::slice::from_raw_parts(at as *const u8, len) }
}

/// What party `l` brings to its meeting: a snapshot of what the others
/// read from its send buffer.
fn brings(l: &Launch) -> &'static [u8] {
    let nranks = l.rank.comm.nranks;
    match l.op {
        Op::AllReduce(_) | Op::Reduce(..) | Op::AllGather | Op::Send => bytes(l.send, l.bytes),
        Op::ReduceScatter(_) => bytes(l.send, l.bytes * nranks),
        Op::Broadcast(root) if root == l.index => bytes(l.send, l.bytes),
        Op::Broadcast(_) | Op::Recv => &[],
    }
}

/// Runs the launches of one stream: every party posts first (so a rank
/// may send to itself in a group), then each reads what the others
/// posted, writes its result, and removes its post once every party has
/// read it. "ncclRemoteError: A call failed possibly due to a network
/// error or a remote process exiting prematurely.": a peer whose process
/// exited fails the operation (and aborts the communicator) instead of
/// hanging.
fn execute(launches: Vec<Launch>) {
    let fail = |l: &Launch, f: Failure| {
        set_last(&format!("NCCL operation of rank {}: {f}", l.rank.rank));
        l.rank.error.store(ncclRemoteError, Ordering::Release);
    };
    let mut posted: Vec<Option<Posted>> = Vec::new();
    for l in &launches {
        let mut meta = [0; META];
        meta[0] = l.bytes as u64;
        match l.rank.comm.post(l.key, l.index, meta, brings(l)) {
            Ok(p) => posted.push(Some(p)),
            Err(f) => {
                fail(l, f);
                posted.push(None);
            }
        }
    }
    for (l, p) in launches.iter().zip(&posted) {
        if p.is_none() {
            continue;
        }
        let result = l
            .rank
            .comm
            .gather_from(l.key, &l.posters, None)
            .and_then(|views| match l.op {
                Op::AllReduce(op) => all_reduce(l, op, &views).map(Some),
                _ => Ok(compute(l, &views)),
            });
        match result {
            Ok(Some(out)) => {
                // SAFETY: the caller's receive buffer holds the result's size.
                unsafe { Addr(l.recv).copy_from(Addr(out.as_ptr() as usize), out.len()) };
            }
            Ok(None) => {}
            Err(f) => fail(l, f),
        }
    }
    for (l, p) in launches.iter().zip(posted) {
        if let Some(p) = p {
            if let Err(f) = l.rank.comm.finish(p, l.parties, None) {
                fail(l, f);
            }
        }
    }
}

/// An all-reduce as NCCL's guide describes it (a reduce-scatter, then
/// an all-gather: [`Member::all_reduce_shares`]), so each rank reduces
/// only its share of the elements.
fn all_reduce(l: &Launch, op: i32, posted: &[View]) -> Result<Vec<u8>, Failure> {
    let w = size_of(l.dtype).unwrap_or(1);
    let reducer = |inputs: &[&[u8]], out: &mut [u8]| reduce(inputs, out, l.dtype, op);
    l.rank
        .comm
        .all_reduce_shares((2, l.key.1), posted, w, reducer, None)
}

/// This party's result, from what every party posted (an all-reduce's is
/// [`all_reduce`]'s).
fn compute(l: &Launch, posted: &[View]) -> Option<Vec<u8>> {
    let n = l.bytes;
    let sends = |offset: usize| -> Vec<&[u8]> {
        posted
            .iter()
            .map(|p| &p.data()[offset..offset + n])
            .collect()
    };
    let mut out = vec![0u8; n];
    match l.op {
        Op::AllReduce(op) => reduce(&sends(0), &mut out, l.dtype, op),
        Op::Reduce(op, root) => {
            if l.index != root {
                return None;
            }
            reduce(&sends(0), &mut out, l.dtype, op);
        }
        Op::ReduceScatter(op) => reduce(&sends(l.index * n), &mut out, l.dtype, op),
        Op::Broadcast(root) => out.copy_from_slice(&posted[root].data()[..n]),
        Op::AllGather => {
            out = posted.iter().flat_map(|p| p.data()[..n].to_vec()).collect();
        }
        Op::Send => return None,
        Op::Recv => {
            let sent = posted[0].data();
            let len = sent.len().min(n);
            out[..len].copy_from_slice(&sent[..len]);
            out.truncate(len);
        }
    }
    Some(out)
}

/// Queues `op` of `comm` on `stream` (or collects it into the open group).
#[expect(clippy::too_many_arguments, reason = "one operation's C arguments")]
fn launch(
    name: &str,
    op: Op,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    peer: Option<c_int>,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> Result<(), ncclResult_t> {
    let rank = rank_of(comm)?;
    if rank.busy.swap(true, Ordering::AcqRel) {
        return Err(invalid(format!(
            "{name}: the communicator is in use by another thread (a communicator must not be used by two threads at once)"
        )));
    }
    let result = (|| {
        if !rank.comm.complete() {
            set_last(&format!(
                "{name}: the communicator is still being initialised"
            ));
            return Err(ncclInvalidUsage);
        }
        let w =
            size_of(dtype).ok_or_else(|| invalid(format!("{name}: invalid data type {dtype}")))?;
        if let Op::AllReduce(o) | Op::Reduce(o, _) | Op::ReduceScatter(o) = op {
            if !(0..=4).contains(&o) {
                return Err(invalid(format!("{name}: invalid reduction operator {o}")));
            }
        }
        let nranks = rank.comm.nranks;
        if let Op::Broadcast(root) | Op::Reduce(_, root) = op {
            if root >= nranks {
                return Err(invalid(format!("{name}: root {root} of {nranks} ranks")));
            }
        }
        let f = fake();
        f.queue(stream)
            .map_err(|_| invalid(format!("{name}: invalid stream {stream:p}")))?;
        let (key, posters, index) = match (op, peer) {
            (Op::Send | Op::Recv, Some(peer)) => {
                let peer = usize::try_from(peer)
                    .ok()
                    .filter(|&p| p < nranks)
                    .ok_or_else(|| invalid(format!("{name}: peer {peer} of {nranks} ranks")))?;
                let pair = if matches!(op, Op::Send) {
                    (rank.rank, peer)
                } else {
                    (peer, rank.rank)
                };
                let mut p2p = rank.p2p.lock();
                let n = p2p
                    .entry((pair.0, pair.1, matches!(op, Op::Recv)))
                    .or_insert(0);
                *n += 1;
                (
                    (1 + (pair.0 * 65536 + pair.1) as u64, *n),
                    vec![pair.0, pair.1],
                    usize::from(matches!(op, Op::Recv)),
                )
            }
            _ => (
                (0, rank.seq.fetch_add(1, Ordering::AcqRel)),
                (0..nranks).collect(),
                rank.rank,
            ),
        };
        let l = Launch {
            rank: Arc::clone(&rank),
            key,
            parties: posters.len(),
            posters,
            index,
            op,
            send: send as usize,
            recv: recv as usize,
            bytes: count * w,
            dtype,
            stream: stream as usize,
        };
        let grouped = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.0 > 0 {
                g.1.push(l);
                None
            } else {
                Some(l)
            }
        });
        if let Some(l) = grouped {
            submit(vec![l]);
        }
        Ok(())
    })();
    rank.busy.store(false, Ordering::Release);
    result
}

/// Queues `launches` (all of one stream) as one piece of stream work.
fn submit(launches: Vec<Launch>) {
    let f = fake();
    let Some(first) = launches.first() else {
        return;
    };
    if let Ok(q) = f.queue(first.stream as cudaStream_t) {
        f.submit(&q, Box::new(move || execute(launches)));
    }
}

exports! {
    /// NCCL 2.32.3 (2.13.4, before `ncclCommInitRankConfig`, in the
    /// `old-libraries` build).
    fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
        run("ncclGetVersion", String::new, || {
            if version.is_null() {
                return Err(invalid("ncclGetVersion: null".into()));
            }
            // SAFETY: a non-null out-pointer from the caller.
            unsafe { version.write(if cfg!(feature = "old-libraries") { 21304 } else { 23203 }) };
            Ok(())
        })
    }

    /// NCCL's message for a result.
    fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
        nccl_text(result)
    }

    /// "Returns a human-readable string corresponding to the last error
    /// that occurred in NCCL. Note: The error is not cleared by calling
    /// this function." Process-wide, whatever `comm` is.
    fn ncclGetLastError(comm: ncclComm_t) -> *const c_char {
        let _ = comm;
        LAST.data_ptr().cast::<c_char>().cast_const()
    }

    /// A fresh id (process, counter, time). "ncclGetUniqueId should be
    /// called once when creating a communicator and the Id should be
    /// distributed to all ranks in the communicator before calling
    /// ncclCommInitRank.": it names the communicator's shared memory, so
    /// ranks in other processes that got it join the same one.
    fn ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t {
        run("ncclGetUniqueId", String::new, || {
            if uniqueId.is_null() {
                return Err(invalid("ncclGetUniqueId: null".into()));
            }
            let mut id = UniqueId { internal: [0; 128] };
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            let parts = [u64::from(std::process::id()), IDS.fetch_add(1, Ordering::AcqRel), nanos];
            for (i, b) in parts.iter().flat_map(|p| p.to_ne_bytes()).enumerate() {
                id.internal[i] = b as c_char;
            }
            // SAFETY: a non-null out-pointer from the caller.
            unsafe { uniqueId.write(id) };
            Ok(())
        })
    }

    /// Blocks until every rank has joined (for ever if one never does).
    fn ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int) -> ncclResult_t {
        run("ncclCommInitRank", || format!("{nranks} {rank}"), || {
            // SAFETY: the caller's out-pointer.
            unsafe { init(comm, nranks, &commId, rank, true) }
        })
    }

    /// As `ncclCommInitRank`; with `config->blocking = 0` it returns
    /// `ncclInProgress` at once and `ncclCommGetAsyncError` says when it is
    /// ready (NCCL's non-blocking communicators).
    #[cfg(not(feature = "old-libraries"))]
    fn ncclCommInitRankConfig(
        comm: *mut ncclComm_t,
        nranks: c_int,
        commId: ncclUniqueId,
        rank: c_int,
        config: *mut ncclConfig_t,
    ) -> ncclResult_t {
        run("ncclCommInitRankConfig", || format!("{nranks} {rank}"), || {
            let blocking = if config.is_null() {
                true
            } else {
                // SAFETY: the caller's initialised config.
                let c = unsafe { *config };
                if c.magic != API_MAGIC || c.size < std::mem::size_of::<Config>() {
                    return Err(invalid("ncclCommInitRankConfig: the config was not initialised with NCCL_CONFIG_INITIALIZER".into()));
                }
                c.blocking != 0
            };
            // SAFETY: the caller's out-pointer.
            unsafe { init(comm, nranks, &commId, rank, blocking) }
        })
    }

    /// Frees the communicator.
    fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
        run("ncclCommDestroy", || format!("{comm:p}"), || {
            RANKS.remove(comm as usize).map(|_| ()).ok_or_else(|| invalid(format!("ncclCommDestroy: {comm:p} is not live")))
        })
    }

    /// "Frees resources associated with communicator object and aborts any
    /// operations that might still be running on the device.": every rank
    /// still waiting on the communicator stops.
    fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
        run("ncclCommAbort", || format!("{comm:p}"), || {
            let r = RANKS.remove(comm as usize).ok_or_else(|| invalid(format!("ncclCommAbort: {comm:p} is not live")))?;
            r.comm.abort();
            Ok(())
        })
    }

    /// `ncclInProgress` while ranks are missing, `ncclRemoteError` after
    /// an abort, else the asynchronous error.
    fn ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t {
        run("ncclCommGetAsyncError", || format!("{comm:p}"), || {
            let r = rank_of(comm)?;
            let state = if r.comm.is_aborted() {
                ncclRemoteError
            } else if !r.comm.complete() {
                ncclInProgress
            } else {
                r.error.load(Ordering::Acquire)
            };
            if asyncError.is_null() {
                return Err(invalid("ncclCommGetAsyncError: null".into()));
            }
            // SAFETY: a non-null out-pointer from the caller.
            unsafe { asyncError.write(state) };
            Ok(())
        })
    }

    /// Element-wise reduction; every rank gets the result.
    fn ncclAllReduce(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclAllReduce", || format!("{count} {datatype} {op} {comm:p} {stream:p}"), || {
            launch("ncclAllReduce", Op::AllReduce(op), sendbuff, recvbuff, count, datatype, None, comm, stream)
        })
    }

    /// The root's buffer to every rank.
    fn ncclBroadcast(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclBroadcast", || format!("{count} {datatype} root={root} {comm:p} {stream:p}"), || {
            let root = usize::try_from(root).map_err(|_| invalid(format!("ncclBroadcast: root {root}")))?;
            launch("ncclBroadcast", Op::Broadcast(root), sendbuff, recvbuff, count, datatype, None, comm, stream)
        })
    }

    /// Every rank's buffer, in rank order, to every rank.
    fn ncclAllGather(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        sendcount: usize,
        datatype: ncclDataType_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclAllGather", || format!("{sendcount} {datatype} {comm:p} {stream:p}"), || {
            launch("ncclAllGather", Op::AllGather, sendbuff, recvbuff, sendcount, datatype, None, comm, stream)
        })
    }

    /// Rank r gets the reduction of every rank's r-th block.
    fn ncclReduceScatter(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        recvcount: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclReduceScatter", || format!("{recvcount} {datatype} {op} {comm:p} {stream:p}"), || {
            launch("ncclReduceScatter", Op::ReduceScatter(op), sendbuff, recvbuff, recvcount, datatype, None, comm, stream)
        })
    }

    /// The reduction, to the root only.
    fn ncclReduce(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclReduce", || format!("{count} {datatype} {op} root={root} {comm:p} {stream:p}"), || {
            let root = usize::try_from(root).map_err(|_| invalid(format!("ncclReduce: root {root}")))?;
            launch("ncclReduce", Op::Reduce(op, root), sendbuff, recvbuff, count, datatype, None, comm, stream)
        })
    }

    /// To one peer; completes with the matching `ncclRecv`.
    fn ncclSend(
        sendbuff: *const c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclSend", || format!("{count} {datatype} peer={peer} {comm:p} {stream:p}"), || {
            launch("ncclSend", Op::Send, sendbuff, std::ptr::null_mut(), count, datatype, Some(peer), comm, stream)
        })
    }

    /// From one peer; completes with the matching `ncclSend`.
    fn ncclRecv(
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        run("ncclRecv", || format!("{count} {datatype} peer={peer} {comm:p} {stream:p}"), || {
            launch("ncclRecv", Op::Recv, std::ptr::null(), recvbuff, count, datatype, Some(peer), comm, stream)
        })
    }

    /// "Start a group call. All calls to NCCL until ncclGroupEnd will be
    /// fused into a single NCCL operation."
    fn ncclGroupStart() -> ncclResult_t {
        run("ncclGroupStart", String::new, || {
            GROUP.with(|g| g.borrow_mut().0 += 1);
            Ok(())
        })
    }

    /// "End a group call. Start a fused NCCL operation consisting of all
    /// calls since ncclGroupStart.": queued as one piece of work per stream.
    fn ncclGroupEnd() -> ncclResult_t {
        run("ncclGroupEnd", String::new, || {
            let launches = GROUP.with(|g| {
                let mut g = g.borrow_mut();
                if g.0 == 0 {
                    return Err(ncclInvalidUsage);
                }
                g.0 -= 1;
                Ok(if g.0 == 0 { std::mem::take(&mut g.1) } else { Vec::new() })
            });
            let launches = launches.inspect_err(|_| set_last("ncclGroupEnd without ncclGroupStart"))?;
            let mut by_stream: Vec<(usize, Vec<Launch>)> = Vec::new();
            for l in launches {
                match by_stream.iter_mut().find(|(s, _)| *s == l.stream) {
                    Some((_, v)) => v.push(l),
                    None => by_stream.push((l.stream, vec![l])),
                }
            }
            for (_, ls) in by_stream {
                submit(ls);
            }
            Ok(())
        })
    }
}

/// Joins the communicator of `id` as `rank` of `nranks` on the current
/// device (in whatever process the other ranks are); waits for the others
/// if `blocking`, else returns `ncclInProgress`.
///
/// # Safety
/// `comm` is null or valid for a write.
unsafe fn init(
    comm: *mut ncclComm_t,
    nranks: c_int,
    id: &ncclUniqueId,
    rank: c_int,
    blocking: bool,
) -> Result<(), ncclResult_t> {
    if comm.is_null() || nranks < 1 || rank < 0 || rank >= nranks {
        return Err(invalid(format!(
            "ncclCommInitRank: rank {rank} of {nranks}"
        )));
    }
    let _ = current_device();
    let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
    let member = Member::join("nccl", &bytes, nranks as usize, rank as usize)
        .map_err(|e| invalid(format!("ncclCommInitRank: {e}")))?;
    let r = Arc::new(Rank {
        comm: member,
        rank: rank as usize,
        seq: AtomicU64::new(0),
        p2p: Mutex::new(HashMap::new()),
        error: AtomicI32::new(ncclSuccess),
        busy: AtomicBool::new(false),
    });
    let shared = Arc::clone(&r);
    let handle = RANKS.insert(r);
    // SAFETY: non-null, valid by the caller's contract.
    unsafe { comm.write(handle as ncclComm_t) };
    if blocking {
        shared
            .comm
            .wait_complete(None)
            .map_err(|_| ncclRemoteError)?;
        Ok(())
    } else if shared.comm.complete() {
        Ok(())
    } else {
        Err(ncclInProgress)
    }
}
