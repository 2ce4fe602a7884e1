//! HCCL with ranks as threads of one process. A root info names a clique;
//! `HcclCommInitRootInfo` waits until every rank joined. Each collective
//! takes the next sequence number of its communicator when it is issued,
//! and runs as a task on the rank's stream: every rank deposits its
//! buffers, waits for all the others (first barrier), computes its result
//! from all of them into a private buffer, waits again (second barrier: no
//! rank writes a buffer another may still read), then writes its result.
//! Sends and receives meet in per-pair queues ([`crate::p2p`]).
//!
//! Modelled from HCCL's header: `HcclBroadcast(void *buf, ...)` has one
//! buffer (in place only); `HcclReduceOp` has sum, prod, max and min (no
//! average); there is no abort call. A rank that waits longer than 60 s
//! for the others fails its communicator with `HCCL_E_TIMEOUT`, which
//! `HcclGetCommAsyncError` then reports, and its stream moves on.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::entry::{fail, out, Fail, R};
use crate::reduce::{combine, size_of, Op};
use crate::state;
use crate::streams::resolve;

/// `HCCL_ROOT_INFO_BYTES`.
pub(crate) const ROOT_INFO_BYTES: usize = 4108;
const MAGIC: &[u8; 8] = b"FAKEHCCL";

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

#[derive(Default)]
struct Slot {
    deposits: Vec<Option<Deposit>>,
    past_second: usize,
    left: usize,
}

pub(crate) struct Message {
    pub(crate) ptr: usize,
    pub(crate) bytes: usize,
    pub(crate) taken: Arc<(Mutex<bool>, Condvar)>,
}

#[derive(Default)]
pub(crate) struct CliqueState {
    joined: usize,
    slots: HashMap<u64, Slot>,
    pub(crate) pairs: HashMap<(u32, u32), VecDeque<Message>>,
    failed: bool,
}

pub(crate) struct Clique {
    pub(crate) size: usize,
    pub(crate) state: Mutex<CliqueState>,
    pub(crate) changed: Condvar,
}

impl Clique {
    /// Waits until `done` holds; `Err` after the timeout or when another
    /// rank timed out (the clique is then failed for everyone).
    pub(crate) fn wait(
        &self,
        guard: &mut MutexGuard<'_, CliqueState>,
        done: impl Fn(&CliqueState) -> bool,
    ) -> R {
        let deadline = Instant::now() + timeout();
        while !done(guard) {
            if guard.failed {
                return fail(E_TIMEOUT, "another rank of the communicator timed out");
            }
            if self.changed.wait_until(guard, deadline).timed_out() && !done(guard) {
                guard.failed = true;
                self.changed.notify_all();
                return fail(
                    E_TIMEOUT,
                    format!("the other ranks did not arrive within {:?}", timeout()),
                );
            }
        }
        Ok(())
    }
}

/// A communicator: one rank of a clique.
pub(crate) struct Comm {
    pub(crate) clique: Arc<Clique>,
    pub(crate) rank: u32,
    next: AtomicU64,
    pub(crate) error: AtomicI32,
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
    let mut bytes = [0u8; 20];
    // SAFETY: non-null; a whole HcclRootInfo by the prototype.
    unsafe { std::ptr::copy_nonoverlapping(info, bytes.as_mut_ptr(), 20) };
    if &bytes[..8] != MAGIC || bytes[16..20] != std::process::id().to_ne_bytes() {
        return fail(
            E_PARA,
            "not a root info of this fake in this process (ranks are threads of one process)",
        );
    }
    let id = u64::from_ne_bytes(bytes[8..16].try_into().unwrap_or_default());
    static CLIQUES: OnceLock<Mutex<HashMap<u64, Arc<Clique>>>> = OnceLock::new();
    let clique = {
        let mut cliques = CLIQUES.get_or_init(Default::default).lock();
        let c = cliques.entry(id).or_insert_with(|| {
            Arc::new(Clique {
                size: n as usize,
                state: Mutex::default(),
                changed: Condvar::new(),
            })
        });
        if c.size != n as usize {
            return fail(
                E_PARA,
                format!("rank {rank} says {n} ranks, another said {}", c.size),
            );
        }
        let c = Arc::clone(c);
        if c.state.lock().joined + 1 == n as usize {
            cliques.remove(&id);
        }
        c
    };
    {
        let mut s = clique.state.lock();
        s.joined += 1;
        clique.changed.notify_all();
        clique.wait(&mut s, |s| s.joined >= n as usize)?;
    }
    let c = Arc::new(Comm {
        clique,
        rank,
        next: AtomicU64::new(0),
        error: AtomicI32::new(0),
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
    out(size, c.clique.size as u32, "rankSize")
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
    if root as usize >= c.clique.size && matches!(what, what::BROADCAST | what::REDUCE) {
        return fail(E_PARA, format!("root {root} of {} ranks", c.clique.size));
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

fn bytes_of(ptr: usize, len: usize) -> &'static [u8] {
    // SAFETY: a rank's buffer of `len` bytes, kept alive by its caller
    // until its stream passes the collective; its rank is blocked in the
    // collective's barriers while others read it.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

/// Runs one collective of rank `c` on its stream thread.
fn run(c: &Comm, seq: u64, mine: Deposit) -> R {
    let n = c.clique.size;
    let me = c.rank as usize;
    let all = {
        let mut s = c.clique.state.lock();
        let slot = s.slots.entry(seq).or_default();
        slot.deposits.resize(n, None);
        slot.deposits[me] = Some(mine);
        c.clique.changed.notify_all();
        c.clique.wait(&mut s, |s| {
            s.slots
                .get(&seq)
                .is_some_and(|slot| slot.deposits.iter().all(Option::is_some))
        })?;
        s.slots[&seq]
            .deposits
            .iter()
            .flatten()
            .copied()
            .collect::<Vec<_>>()
    };
    let agreed = all.iter().all(|d| {
        d.what == mine.what
            && d.count == mine.count
            && d.dtype == mine.dtype
            && d.op == mine.op
            && d.root == mine.root
    });
    let elem = size_of(mine.dtype).unwrap_or(1);
    let len = mine.count as usize * elem;
    let result: Option<Vec<u8>> = if !agreed {
        None
    } else {
        match mine.what {
            what::ALL_REDUCE | what::REDUCE => {
                let op = Op::from_code(mine.op).unwrap_or(Op::Sum);
                let mut acc = bytes_of(all[0].send, len).to_vec();
                for d in &all[1..] {
                    combine(mine.dtype, op, &mut acc, bytes_of(d.send, len));
                }
                (mine.what == what::ALL_REDUCE || mine.root as usize == me).then_some(acc)
            }
            what::REDUCE_SCATTER => {
                let op = Op::from_code(mine.op).unwrap_or(Op::Sum);
                let mut acc = bytes_of(all[0].send + me * len, len).to_vec();
                for d in &all[1..] {
                    combine(mine.dtype, op, &mut acc, bytes_of(d.send + me * len, len));
                }
                Some(acc)
            }
            what::ALL_GATHER => Some(
                all.iter()
                    .flat_map(|d| bytes_of(d.send, len).iter().copied())
                    .collect(),
            ),
            // In place: the root's buffer goes to everyone else's.
            _ => (mine.root as usize != me)
                .then(|| bytes_of(all[mine.root as usize].recv, len).to_vec()),
        }
    };
    {
        let mut s = c.clique.state.lock();
        if let Some(slot) = s.slots.get_mut(&seq) {
            slot.past_second += 1;
        }
        c.clique.changed.notify_all();
        c.clique.wait(&mut s, |s| {
            s.slots.get(&seq).is_none_or(|slot| slot.past_second >= n)
        })?;
        let gone = s.slots.get_mut(&seq).is_some_and(|slot| {
            slot.left += 1;
            slot.left >= n
        });
        if gone {
            s.slots.remove(&seq);
        }
    }
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
