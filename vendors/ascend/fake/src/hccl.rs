//! HCCL with ranks as processes (or threads), meeting in shared memory
//! named by the root info ([`dipu_fakekit::collective`]). The CANN guide
//! says of `HcclGetRootInfo`'s output: "此信息需广播至集群内所有rank用来进行
//! HCCL初始化" (this information must be broadcast to every rank of the
//! cluster to initialise HCCL): the root info made in one process is valid
//! in every other. `HcclCommInitRootInfo` waits until every rank joined.
//! Each collective takes the next sequence number of its communicator when
//! it is issued, and runs as a task on the rank's stream: every rank posts
//! what it brings (its send buffer, with the call's count, type, operator
//! and root), reads every rank's post, checks they agree, computes its
//! result, and writes it once every rank has read its post. Sends and
//! receives are messages per pair ([`crate::p2p`]).
//!
//! Modelled from HCCL's header: `HcclBroadcast(void *buf, ...)` has one
//! buffer (in place only); `HcclReduceOp` has sum, prod, max and min (no
//! average); there is no abort call. A rank that waits longer than 60 s
//! for the others fails its communicator with `HCCL_E_TIMEOUT`, which
//! `HcclGetCommAsyncError` then reports, and its stream moves on; the
//! communicator then fails for every rank. A peer whose process exited
//! fails it the same way at once (the fake sees the process gone; real
//! HCCL's wait would run into its timeout).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dipu_fakekit::collective::{Failure, Member, View, META};
use parking_lot::Mutex;

use crate::entry::{fail, out, Fail, R};
use crate::reduce::{combine, size_of, Op};
use crate::state;
use crate::streams::resolve;

/// `HCCL_ROOT_INFO_BYTES`.
pub(crate) const ROOT_INFO_BYTES: usize = 4108;
const MAGIC: &[u8; 8] = b"FAKEHCCL";
/// The bytes of a root info that name its communicator (magic, counter,
/// process, time).
const ID_BYTES: usize = 28;

pub(crate) const E_PARA: i32 = 1;
pub(crate) const E_PTR: i32 = 2;
pub(crate) const E_INTERNAL: i32 = 4;
pub(crate) const E_NOT_SUPPORT: i32 = 5;
pub(crate) const E_TIMEOUT: i32 = 9;
pub(crate) const E_RUNTIME: i32 = 15;

/// An ACL failure inside an HCCL call becomes `HCCL_E_RUNTIME`.
pub(crate) fn from_acl(f: Fail) -> Fail {
    if f.code >= 100 {
        Fail {
            code: E_RUNTIME,
            message: f.message,
        }
    } else {
        f
    }
}

/// How long a rank waits for the others.
pub(crate) fn timeout() -> Duration {
    Duration::from_secs(60)
}

/// What a rank brings to a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Deposit {
    what: u8,
    send: usize,
    recv: usize,
    count: u64,
    dtype: i32,
    op: i32,
    root: u32,
}

impl Deposit {
    /// The words every rank must agree on.
    fn meta(&self) -> [u64; META] {
        [
            u64::from(self.what),
            self.count,
            self.dtype as u64,
            self.op as u64,
            u64::from(self.root),
            0,
        ]
    }
}

/// A wait that ended without the other ranks, as HCCL reports it.
pub(crate) fn failure(f: Failure) -> Fail {
    let message = match f {
        Failure::TimedOut => format!("the other ranks did not arrive within {:?}", timeout()),
        Failure::Aborted => "another rank of the communicator timed out".to_string(),
        other => other.to_string(),
    };
    Fail {
        code: if f == Failure::System {
            E_INTERNAL
        } else {
            E_TIMEOUT
        },
        message,
    }
}

/// A communicator: one rank of a clique.
pub(crate) struct Comm {
    pub(crate) member: Member,
    pub(crate) rank: u32,
    next: AtomicU64,
    pub(crate) error: AtomicI32,
    /// Messages so far per (sender, receiver): a sender counts its sends
    /// to a peer, a receiver its receives from one; the n-th of each meet.
    pub(crate) messages: Mutex<HashMap<(u32, u32), u64>>,
}

impl Comm {
    /// A wait's failure: an own timeout fails the clique for every rank.
    pub(crate) fn failed(&self, f: Failure) -> Fail {
        if f == Failure::TimedOut {
            self.member.abort();
        }
        failure(f)
    }
}

fn comms() -> &'static Mutex<HashMap<usize, Arc<Comm>>> {
    static COMMS: OnceLock<Mutex<HashMap<usize, Arc<Comm>>>> = OnceLock::new();
    COMMS.get_or_init(Default::default)
}

pub(crate) fn comm(handle: *mut c_void) -> R<Arc<Comm>> {
    comms().lock().get(&(handle as usize)).cloned().map_or_else(
        || fail(E_PTR, format!("{handle:p} is not a live communicator")),
        Ok,
    )
}

/// `HcclGetRootInfo`.
pub(crate) fn root_info(info: *mut u8) -> R {
    if info.is_null() {
        return fail(E_PTR, "rootInfo is null");
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut bytes = [0u8; ROOT_INFO_BYTES];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_ne_bytes());
    bytes[16..20].copy_from_slice(&std::process::id().to_ne_bytes());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    bytes[20..ID_BYTES].copy_from_slice(&nanos.to_ne_bytes());
    // SAFETY: non-null; the prototype asks for a whole HcclRootInfo.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), info, ROOT_INFO_BYTES) };
    Ok(())
}

/// `HcclCommInitRootInfo`: binds to the current device and waits for every rank.
pub(crate) fn init(n: u32, info: *const u8, rank: u32, out_comm: *mut *mut c_void) -> R {
    state::current().map_err(from_acl)?;
    if info.is_null() || out_comm.is_null() {
        return fail(E_PTR, "rootInfo and comm must not be null");
    }
    if n == 0 || rank >= n {
        return fail(E_PARA, format!("rank {rank} of {n}"));
    }
    let mut bytes = [0u8; ID_BYTES];
    // SAFETY: non-null; a whole HcclRootInfo by the prototype.
    unsafe { std::ptr::copy_nonoverlapping(info, bytes.as_mut_ptr(), ID_BYTES) };
    if &bytes[..8] != MAGIC {
        return fail(
            E_PARA,
            "not a root info of this fake (HcclGetRootInfo makes one)",
        );
    }
    let member = Member::join("hccl", &bytes, n as usize, rank as usize)
        .or_else(|e| fail(E_PARA, format!("rank {rank} of {n}: {e}")))?;
    member.wait_complete(Some(timeout())).map_err(failure)?;
    let c = Arc::new(Comm {
        member,
        rank,
        next: AtomicU64::new(0),
        error: AtomicI32::new(0),
        messages: Mutex::new(HashMap::new()),
    });
    let handle = Arc::as_ptr(&c) as usize;
    comms().lock().insert(handle, c);
    out(out_comm, handle as *mut c_void, "comm")
}

/// `HcclCommDestroy`.
pub(crate) fn destroy(handle: *mut c_void) -> R {
    comm(handle)?;
    comms().lock().remove(&(handle as usize));
    Ok(())
}

/// `HcclGetCommAsyncError`.
pub(crate) fn async_error(handle: *mut c_void, error: *mut i32) -> R {
    let c = comm(handle)?;
    out(error, c.error.load(Ordering::Acquire), "asyncError")
}

/// `HcclGetRankSize`.
#[cfg_attr(
    feature = "old-cann",
    expect(dead_code, reason = "not exported by the old build")
)]
pub(crate) fn rank_size(handle: *mut c_void, size: *mut u32) -> R {
    let c = comm(handle)?;
    out(size, c.member.nranks as u32, "rankSize")
}

/// The collectives.
pub(crate) mod what {
    pub(crate) const ALL_REDUCE: u8 = 0;
    pub(crate) const BROADCAST: u8 = 1;
    pub(crate) const ALL_GATHER: u8 = 2;
    pub(crate) const REDUCE_SCATTER: u8 = 3;
    pub(crate) const REDUCE: u8 = 4;
}

/// Issues a collective on `stream`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn collective(
    what: u8,
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    dtype: i32,
    op: i32,
    root: u32,
    handle: *mut c_void,
    stream: *mut c_void,
) -> R {
    let c = comm(handle)?;
    let s = resolve(stream).map_err(from_acl)?;
    if size_of(dtype).is_none() {
        return fail(E_NOT_SUPPORT, format!("data type {dtype} is not supported"));
    }
    let reduces = matches!(what, what::ALL_REDUCE | what::REDUCE_SCATTER | what::REDUCE);
    if reduces && Op::from_code(op).is_none() {
        return fail(
            E_PARA,
            format!("reduce op {op} does not exist (HCCL has sum, prod, max and min)"),
        );
    }
    if (what != what::BROADCAST && send.is_null()) || recv.is_null() && count > 0 {
        return fail(E_PTR, "null buffer");
    }
    if root as usize >= c.member.nranks && matches!(what, what::BROADCAST | what::REDUCE) {
        return fail(E_PARA, format!("root {root} of {} ranks", c.member.nranks));
    }
    let deposit = Deposit {
        what,
        send: send as usize,
        recv: recv as usize,
        count,
        dtype,
        op,
        root,
    };
    let seq = c.next.fetch_add(1, Ordering::AcqRel);
    s.enqueue(Box::new(move || {
        if let Err(f) = run(&c, seq, deposit) {
            crate::entry::trace("hccl collective", f.code, &f.message);
            c.error.store(f.code, Ordering::Release);
        }
    }))
    .map_err(from_acl)
}

pub(crate) fn bytes_of(ptr: usize, len: usize) -> &'static [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: a rank's buffer of `len` bytes, kept alive by its caller
    // until its stream passes the collective (this task).
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

/// Reduces `inputs` (equal lengths) into `out` with `op`.
fn fold(dtype: i32, op: Op, inputs: &[&[u8]], out: &mut [u8]) {
    out.copy_from_slice(inputs[0]);
    for x in &inputs[1..] {
        combine(dtype, op, out, x);
    }
}

/// Runs one collective of rank `c` on its stream thread.
fn run(c: &Comm, seq: u64, mine: Deposit) -> R {
    let n = c.member.nranks;
    let me = c.rank as usize;
    let elem = size_of(mine.dtype).unwrap_or(1);
    let len = mine.count as usize * elem;
    let brings = match mine.what {
        what::REDUCE_SCATTER => bytes_of(mine.send, len * n),
        what::BROADCAST if mine.root as usize == me => bytes_of(mine.recv, len),
        what::BROADCAST => &[],
        _ => bytes_of(mine.send, len),
    };
    let limit = Some(timeout());
    let posted = c
        .member
        .post((0, seq), me, mine.meta(), brings)
        .map_err(|f| c.failed(f))?;
    let all: Vec<View> = c
        .member
        .gather((0, seq), n, limit)
        .map_err(|f| c.failed(f))?;
    let agreed = all.iter().all(|d| d.meta() == mine.meta());
    let op = Op::from_code(mine.op).unwrap_or(Op::Sum);
    let result: Option<Vec<u8>> = if !agreed {
        None
    } else {
        match mine.what {
            what::ALL_REDUCE => {
                let reducer = |inputs: &[&[u8]], out: &mut [u8]| fold(mine.dtype, op, inputs, out);
                Some(
                    c.member
                        .all_reduce_shares((2, seq), &all, elem, reducer, limit)
                        .map_err(|f| c.failed(f))?,
                )
            }
            what::REDUCE => (mine.root as usize == me).then(|| {
                let inputs: Vec<&[u8]> = all.iter().map(|d| &d.data()[..len]).collect();
                let mut acc = vec![0u8; len];
                fold(mine.dtype, op, &inputs, &mut acc);
                acc
            }),
            what::REDUCE_SCATTER => {
                let at = me * len;
                let inputs: Vec<&[u8]> = all.iter().map(|d| &d.data()[at..at + len]).collect();
                let mut acc = vec![0u8; len];
                fold(mine.dtype, op, &inputs, &mut acc);
                Some(acc)
            }
            what::ALL_GATHER => Some(all.iter().flat_map(|d| d.data()[..len].to_vec()).collect()),
            // In place: the root's buffer goes to everyone else's.
            _ => (mine.root as usize != me).then(|| all[mine.root as usize].data()[..len].to_vec()),
        }
    };
    c.member.finish(posted, n, limit).map_err(|f| c.failed(f))?;
    if !agreed {
        return fail(
            E_PARA,
            "the ranks called different collectives or with different counts, types or roots",
        );
    }
    if let Some(out) = result {
        // SAFETY: this rank's receive buffer, of the collective's size.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), mine.recv as *mut u8, out.len()) };
    }
    Ok(())
}

/// `HcclGetErrorString`.
#[cfg_attr(
    feature = "old-cann",
    expect(dead_code, reason = "not exported by the old build")
)]
pub(crate) fn error_string(code: i32) -> &'static std::ffi::CStr {
    match code {
        0 => c"success",
        E_PARA => c"parameter error",
        E_PTR => c"empty pointer",
        E_INTERNAL => c"internal error",
        E_NOT_SUPPORT => c"not supported",
        E_TIMEOUT => c"timeout",
        E_RUNTIME => c"runtime error",
        _ => c"unknown HCCL error",
    }
}
