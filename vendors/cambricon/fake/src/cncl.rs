//! The fake CNCL: ranks as processes (or threads), meeting in shared
//! memory named by the clique id ([`dipu_fakekit::collective`]). A clique
//! forms when all its ranks have joined with the same 136-byte id (the
//! hash must match the data, and each rank may join once), from whatever
//! process: the id is the bytes `cnclGetCliqueId` made, sent to the other
//! ranks as torch_mlu sends it. Each operation is a meeting where every
//! rank posts what it brings and reads the others' posts.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dipu_fakekit::collective::{Key, Member, META};
use parking_lot::Mutex;

use crate::common::{copy_bytes, export, fnv64, put, Handles};
use crate::queue::Queue;
use crate::reduce::{combine, size_of};

const SUCCESS: c_int = 0;
const ERR_INTERNAL: c_int = 0x01;
const IN_PROGRESS: c_int = 0x06;
const ERR_ARGUMENTS: c_int = 0x07;
const ASYNC_ERROR: c_int = 0x16;
const ID_DATA: usize = 128;
/// How long a rank waits for its peers before the operation fails.
const TIMEOUT: Duration = Duration::from_secs(60);

/// `cnclCliqueId`: 128 bytes of data and their 64-bit hash.
#[repr(C)]
pub struct CliqueId {
    data: [c_char; ID_DATA],
    hash: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    Reduce,
}

#[derive(Clone, Copy)]
struct Part {
    kind: Kind,
    send: usize,
    recv: usize,
    count: usize,
    dtype: i32,
    op: i32,
    root: usize,
}

impl Part {
    /// The words every rank must agree on.
    fn meta(&self) -> [u64; META] {
        [
            self.kind as u64,
            self.count as u64,
            self.dtype as u64,
            self.op as u64,
            self.root as u64,
            0,
        ]
    }
}

struct Comm {
    member: Member,
    rank: usize,
    device: i32,
    seq: AtomicU64,
    pending: AtomicU64,
    async_err: AtomicI32,
    /// Messages so far per (sender, receiver), as this rank counts them:
    /// the n-th send from a rank to a peer meets the peer's n-th receive.
    messages: Mutex<HashMap<(usize, usize), u64>>,
}

struct Registry {
    used: Mutex<HashSet<(u64, c_int)>>,
    comms: Handles<Comm>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        used: Mutex::new(HashSet::new()),
        comms: Handles::new(1 << 38),
    })
}

/// One point-to-point operation of a group.
struct P2p {
    send: bool,
    ptr: usize,
    bytes: usize,
    peer: usize,
}

/// A thread's open group: its depth and the sends and receives it holds.
type Group = (u32, Vec<(Arc<Queue>, Arc<Comm>, P2p)>);

thread_local! {
    static GROUP: RefCell<Group> = const { RefCell::new((0, Vec::new())) };
}

fn after(code: c_int) -> c_int {
    code
}

fn bytes_of<'a>(ptr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: a rank's device buffer of at least `len` bytes, kept alive by
    // its rank until its queue passes the operation (this task).
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

/// Reduces `inputs` (equal lengths) into `out` with CNCL operator `op`.
fn fold(dtype: i32, op: i32, inputs: &[&[u8]], out: &mut [u8]) {
    out.copy_from_slice(inputs[0]);
    for x in &inputs[1..] {
        combine(dtype, op, out, x);
    }
}

/// Runs rank `me`'s side of collective `seq`: posts what it brings, reads
/// every rank's post, checks they agree, and writes its result once every
/// rank has read its post; `false` on a failure.
fn collective(comm: &Comm, seq: u64, part: Part) -> bool {
    let m = &comm.member;
    let n = m.nranks;
    let Some(size) = size_of(part.dtype) else {
        return false;
    };
    let block = part.count * size;
    let brings = match part.kind {
        Kind::ReduceScatter => bytes_of(part.send, block * n),
        Kind::Broadcast if part.root != comm.rank => &[],
        _ => bytes_of(part.send, block),
    };
    let limit = Some(TIMEOUT);
    let Ok(posted) = m.post((0, seq), comm.rank, part.meta(), brings) else {
        return false;
    };
    let Ok(parts) = m.gather((0, seq), n, limit) else {
        return false;
    };
    let agree = parts.iter().all(|p| p.meta() == part.meta());
    let result: Option<Vec<u8>> = if !agree {
        None
    } else {
        match part.kind {
            Kind::AllReduce => {
                let reducer =
                    |inputs: &[&[u8]], out: &mut [u8]| fold(part.dtype, part.op, inputs, out);
                match m.all_reduce_shares((2, seq), &parts, size, reducer, limit) {
                    Ok(out) => Some(out),
                    Err(_) => return false,
                }
            }
            Kind::Reduce => (comm.rank == part.root).then(|| {
                let inputs: Vec<&[u8]> = parts.iter().map(|p| &p.data()[..block]).collect();
                let mut acc = vec![0u8; block];
                fold(part.dtype, part.op, &inputs, &mut acc);
                acc
            }),
            Kind::Broadcast => Some(parts[part.root].data()[..block].to_vec()),
            Kind::AllGather => Some(
                parts
                    .iter()
                    .flat_map(|p| p.data()[..block].to_vec())
                    .collect(),
            ),
            Kind::ReduceScatter => {
                let at = comm.rank * block;
                let inputs: Vec<&[u8]> = parts.iter().map(|p| &p.data()[at..at + block]).collect();
                let mut acc = vec![0u8; block];
                fold(part.dtype, part.op, &inputs, &mut acc);
                Some(acc)
            }
        }
    };
    if m.finish(posted, n, limit).is_err() {
        return false;
    }
    if let Some(r) = &result {
        copy_bytes(part.recv, r.as_ptr() as usize, r.len());
    }
    agree
}

/// The meeting of the next message from `src` to `dst`, as `comm` counts.
fn next_message(comm: &Comm, src: usize, dst: usize) -> Key {
    let mut counts = comm.messages.lock();
    let n = counts.entry((src, dst)).or_insert(0);
    *n += 1;
    (1 + (src * 65536 + dst) as u64, *n)
}

/// Runs a thread's grouped sends and receives on one queue: every send is
/// posted first, then every receive read, then the sends are awaited.
fn point_to_point(comm: &Comm, ops: &[P2p]) -> bool {
    let m = &comm.member;
    let limit = Some(TIMEOUT);
    let mut posted = Vec::new();
    for op in ops.iter().filter(|o| o.send) {
        let key = next_message(comm, comm.rank, op.peer);
        match m.post(key, 0, [0; META], bytes_of(op.ptr, op.bytes)) {
            Ok(p) => posted.push(p),
            Err(_) => return false,
        }
    }
    let mut ok = true;
    for op in ops.iter().filter(|o| !o.send) {
        let key = next_message(comm, op.peer, comm.rank);
        let Ok(msg) = m.read(key, 0, op.peer, limit) else {
            return false;
        };
        let sent = msg.data();
        ok &= sent.len() == op.bytes;
        copy_bytes(op.ptr, sent.as_ptr() as usize, sent.len().min(op.bytes));
    }
    for p in posted {
        if m.finish(p, 1, limit).is_err() {
            return false;
        }
    }
    ok
}

/// Queues `task` for `comm` on `queue`, counting it as pending and turning
/// a failure into the communicator's asynchronous error (and failing the
/// clique for its other ranks).
fn enqueue(
    comm: &Arc<Comm>,
    q: &Queue,
    task: impl FnOnce(&Comm) -> bool + Send + 'static,
) -> c_int {
    if q.device != comm.device {
        return ERR_ARGUMENTS;
    }
    comm.pending.fetch_add(1, Ordering::SeqCst);
    let me = Arc::clone(comm);
    let pushed = q.push(Box::new(move || {
        if !task(&me) {
            me.async_err.store(ASYNC_ERROR, Ordering::SeqCst);
            me.member.abort();
        }
        me.pending.fetch_sub(1, Ordering::SeqCst);
    }));
    if pushed {
        SUCCESS
    } else {
        comm.pending.fetch_sub(1, Ordering::SeqCst);
        ERR_ARGUMENTS
    }
}

fn comm_of(comm: *mut c_void) -> Option<Arc<Comm>> {
    registry().comms.get(comm as usize)
}

#[expect(clippy::too_many_arguments, reason = "a collective's own arguments")]
fn issue(
    kind: Kind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: *mut c_void,
    queue: *mut c_void,
) -> c_int {
    let Some(comm) = comm_of(comm) else {
        return ERR_ARGUMENTS;
    };
    let reduces = matches!(kind, Kind::AllReduce | Kind::Reduce | Kind::ReduceScatter);
    if size_of(dtype).is_none()
        || (reduces && !(0..=3).contains(&op))
        || send.is_null()
        || recv.is_null()
    {
        return ERR_ARGUMENTS;
    }
    if !(0..comm.member.nranks as c_int).contains(&root) {
        return ERR_ARGUMENTS;
    }
    let Some(q) = crate::rt::queue_of(queue) else {
        return ERR_ARGUMENTS;
    };
    let seq = comm.seq.fetch_add(1, Ordering::SeqCst);
    let part = Part {
        kind,
        send: send as usize,
        recv: recv as usize,
        count,
        dtype,
        op: if reduces { op } else { 0 },
        root: root as usize,
    };
    enqueue(&comm, &q, move |c| collective(c, seq, part))
}

fn p2p(
    send: bool,
    buf: *mut c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm: *mut c_void,
    queue: *mut c_void,
) -> c_int {
    let Some(comm) = comm_of(comm) else {
        return ERR_ARGUMENTS;
    };
    let Some(size) = size_of(dtype) else {
        return ERR_ARGUMENTS;
    };
    if buf.is_null()
        || !(0..comm.member.nranks as c_int).contains(&peer)
        || peer as usize == comm.rank
    {
        return ERR_ARGUMENTS;
    }
    let Some(q) = crate::rt::queue_of(queue) else {
        return ERR_ARGUMENTS;
    };
    let op = P2p {
        send,
        ptr: buf as usize,
        bytes: count * size,
        peer: peer as usize,
    };
    let grouped = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.0 > 0 {
            g.1.push((Arc::clone(&q), Arc::clone(&comm), op));
            None
        } else {
            Some(op)
        }
    });
    match grouped {
        None => SUCCESS,
        Some(op) => enqueue(&comm, &q, move |c| point_to_point(c, &[op])),
    }
}

static MESSAGES: &[(c_int, &str)] = &[
    (SUCCESS, "CNCL_RET_SUCCESS: success\0"),
    (
        ERR_INTERNAL,
        "CNCL_RET_ERR_INTERNAL: internal error (injected by the fake, or a peer left)\0",
    ),
    (
        IN_PROGRESS,
        "CNCL_RET_ASYNC_IN_PROGRESS: operation in progress\0",
    ),
    (ERR_ARGUMENTS, "CNCL_RET_ERR_ARGUMENTS: invalid argument\0"),
    (
        ASYNC_ERROR,
        "CNCL_RET_ASYNC_ERROR: the communicator failed asynchronously\0",
    ),
];

/// `cnclGetErrorStr` of the fake CNCL.
#[no_mangle]
pub extern "C" fn cnclGetErrorStr(ret: c_int) -> *const c_char {
    let text = MESSAGES
        .iter()
        .find(|(c, _)| *c == ret)
        .map_or("unknown CNCL result\0", |(_, m)| m);
    text.as_ptr().cast()
}

export! { "CNCL", ERR_INTERNAL, after;
    fn cnclGetLibVersion(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) {
        if put(major, 1) && put(minor, 25) && put(patch, 0) { SUCCESS } else { ERR_ARGUMENTS }
    }
    fn cnclGetCliqueId(id: *mut CliqueId) {
        if id.is_null() { return ERR_ARGUMENTS; }
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let seed = format!("{:?}{}{}", Instant::now(), std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let mut data = [0u8; ID_DATA];
        let mut h = fnv64(seed.as_bytes());
        for chunk in data.chunks_mut(8) {
            h = fnv64(&h.to_ne_bytes());
            chunk.copy_from_slice(&h.to_ne_bytes());
        }
        let hash = fnv64(&data);
        put(id, CliqueId { data: data.map(|b| b as c_char), hash });
        SUCCESS
    }
    fn cnclInitComms(comms: *mut *mut c_void, num_comm: c_int, dev_list: *const c_int, rank_list: *const c_int, nrank: c_int, id: *const CliqueId) {
        if comms.is_null() || dev_list.is_null() || rank_list.is_null() || id.is_null() || num_comm < 1 || nrank < 1 {
            return ERR_ARGUMENTS;
        }
        // SAFETY: non-null; the prototype makes these arrays of `num_comm`
        // and the id a whole cnclCliqueId.
        let (devs, ranks, id) = unsafe {
            (std::slice::from_raw_parts(dev_list, num_comm as usize), std::slice::from_raw_parts(rank_list, num_comm as usize), &*id)
        };
        let data: Vec<u8> = id.data.iter().map(|&c| c as u8).collect();
        if fnv64(&data) != id.hash {
            return ERR_ARGUMENTS;
        }
        let devices = crate::common::config().devices;
        if ranks.iter().any(|r| !(0..nrank).contains(r)) || devs.iter().any(|d| !(0..devices).contains(d)) {
            return ERR_ARGUMENTS;
        }
        {
            let mut used = registry().used.lock();
            if ranks.iter().any(|r| used.contains(&(id.hash, *r))) {
                return ERR_ARGUMENTS;
            }
            used.extend(ranks.iter().map(|r| (id.hash, *r)));
        }
        let mut id_bytes = data;
        id_bytes.extend_from_slice(&id.hash.to_ne_bytes());
        let mut members = Vec::new();
        for &rank in ranks {
            match Member::join("cncl", &id_bytes, nrank as usize, rank as usize) {
                Ok(m) => members.push(m),
                Err(_) => return ERR_ARGUMENTS,
            }
        }
        if members.iter().any(|m| m.wait_complete(Some(TIMEOUT)).is_err()) {
            return ERR_INTERNAL;
        }
        for (i, ((&rank, &device), member)) in ranks.iter().zip(devs).zip(members).enumerate() {
            let comm = Arc::new(Comm { member, rank: rank as usize, device, seq: AtomicU64::new(0), pending: AtomicU64::new(0), async_err: AtomicI32::new(0), messages: Mutex::new(HashMap::new()) });
            let h = registry().comms.insert(comm);
            // SAFETY: `comms` has `num_comm` slots by the prototype.
            unsafe { comms.add(i).write(h as *mut c_void) };
        }
        SUCCESS
    }
    fn cnclFreeComm(comm: *mut c_void) {
        let Some(c) = comm_of(comm) else { return ERR_ARGUMENTS };
        let deadline = Instant::now() + TIMEOUT;
        while c.pending.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        registry().comms.remove(comm as usize);
        // A clique's communicators are freed together: once one is gone,
        // its peers' later operations fail at once instead of waiting.
        c.member.leave();
        SUCCESS
    }
    fn cnclAbortComm(comm: *mut c_void) {
        let Some(c) = registry().comms.remove(comm as usize) else { return ERR_ARGUMENTS };
        c.member.abort();
        SUCCESS
    }
    fn cnclGetCommAsyncError(comm: *mut c_void) {
        let Some(c) = comm_of(comm) else { return ERR_ARGUMENTS };
        match c.async_err.load(Ordering::SeqCst) {
            0 if c.pending.load(Ordering::SeqCst) > 0 => IN_PROGRESS,
            e => e,
        }
    }
    fn cnclAllReduce(send: *const c_void, recv: *mut c_void, count: usize, dtype: c_int, op: c_int, comm: *mut c_void, queue: *mut c_void) {
        issue(Kind::AllReduce, send, recv, count, dtype, op, 0, comm, queue)
    }
    fn cnclBroadcast(send: *const c_void, recv: *mut c_void, count: usize, dtype: c_int, root: c_int, comm: *mut c_void, queue: *mut c_void) {
        // Out of place: the in-place form is cnclBcast.
        if send == recv.cast_const() { return ERR_ARGUMENTS; }
        issue(Kind::Broadcast, send, recv, count, dtype, 0, root, comm, queue)
    }
    fn cnclBcast(buf: *mut c_void, count: usize, dtype: c_int, root: c_int, comm: *mut c_void, queue: *mut c_void) {
        issue(Kind::Broadcast, buf, buf, count, dtype, 0, root, comm, queue)
    }
    fn cnclAllGather(send: *const c_void, recv: *mut c_void, count: usize, dtype: c_int, comm: *mut c_void, queue: *mut c_void) {
        issue(Kind::AllGather, send, recv, count, dtype, 0, 0, comm, queue)
    }
    fn cnclReduceScatter(send: *const c_void, recv: *mut c_void, count: usize, dtype: c_int, op: c_int, comm: *mut c_void, queue: *mut c_void) {
        issue(Kind::ReduceScatter, send, recv, count, dtype, op, 0, comm, queue)
    }
    fn cnclReduce(send: *const c_void, recv: *mut c_void, count: usize, dtype: c_int, op: c_int, root: c_int, comm: *mut c_void, queue: *mut c_void) {
        issue(Kind::Reduce, send, recv, count, dtype, op, root, comm, queue)
    }
    fn cnclSend(buf: *mut c_void, count: usize, dtype: c_int, dest: c_int, comm: *mut c_void, queue: *mut c_void) {
        p2p(true, buf, count, dtype, dest, comm, queue)
    }
    fn cnclRecv(buf: *mut c_void, count: usize, dtype: c_int, source: c_int, comm: *mut c_void, queue: *mut c_void) {
        p2p(false, buf, count, dtype, source, comm, queue)
    }
    fn cnclGroupStart() {
        GROUP.with(|g| g.borrow_mut().0 += 1);
        SUCCESS
    }
    fn cnclGroupEnd() {
        let ops = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.0 == 0 { return None; }
            g.0 -= 1;
            Some(if g.0 == 0 { std::mem::take(&mut g.1) } else { Vec::new() })
        });
        let Some(ops) = ops else { return ERR_ARGUMENTS };
        // One task per (queue, communicator), holding its sends and receives.
        let mut batches: Vec<(Arc<Queue>, Arc<Comm>, Vec<P2p>)> = Vec::new();
        for (q, c, op) in ops {
            match batches.iter_mut().find(|(bq, bc, _)| Arc::ptr_eq(bq, &q) && Arc::ptr_eq(bc, &c)) {
                Some(b) => b.2.push(op),
                None => batches.push((q, c, vec![op])),
            }
        }
        let mut code = SUCCESS;
        for (q, c, ops) in batches {
            let r = enqueue(&c, &q, move |comm| point_to_point(comm, &ops));
            if r != SUCCESS { code = r; }
        }
        code
    }
}
