//! The fake CNCL: ranks as threads of one process. A clique forms when all
//! its ranks have joined with the same 136-byte id (the hash must match the
//! data, and each rank may join once); collectives meet at a rendezvous per
//! operation and read each other's buffers directly.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

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

#[derive(Default)]
struct Slot {
    parts: Vec<Option<Part>>,
    arrived: usize,
    computed: usize,
    left: usize,
}

struct Msg {
    ptr: usize,
    bytes: usize,
    done: Arc<AtomicBool>,
}

struct Clique {
    n: usize,
    joined: Mutex<usize>,
    slots: Mutex<HashMap<u64, Slot>>,
    mail: Mutex<HashMap<(usize, usize), VecDeque<Msg>>>,
    cv: Condvar,
    mail_cv: Condvar,
    broken: AtomicBool,
}

struct Comm {
    clique: Arc<Clique>,
    rank: usize,
    device: i32,
    seq: AtomicU64,
    pending: AtomicU64,
    async_err: AtomicI32,
}

struct Registry {
    cliques: Mutex<HashMap<u64, Arc<Clique>>>,
    used: Mutex<HashSet<(u64, c_int)>>,
    comms: Handles<Comm>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        cliques: Mutex::new(HashMap::new()),
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

/// Waits on `cv` until `done` holds; `false` when the clique broke or the
/// timeout passed.
fn wait_until<T>(
    clique: &Clique,
    cv: &Condvar,
    guard: &mut parking_lot::MutexGuard<'_, T>,
    done: impl Fn(&T) -> bool,
) -> bool {
    let deadline = Instant::now() + TIMEOUT;
    while !done(guard) {
        if clique.broken.load(Ordering::SeqCst) || Instant::now() > deadline {
            return false;
        }
        cv.wait_for(guard, Duration::from_millis(50));
    }
    true
}

fn bytes_of<'a>(ptr: usize, len: usize) -> &'a [u8] {
    // SAFETY: a rank's device buffer of at least `len` bytes, kept alive by
    // its rank until every rank has left this operation.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

/// Runs rank `me`'s side of collective `seq`.
fn collective(comm: &Comm, seq: u64, part: Part) -> bool {
    let c = &comm.clique;
    let n = c.n;
    let Some(size) = size_of(part.dtype) else {
        return false;
    };
    let mut slots = c.slots.lock();
    {
        let slot = slots.entry(seq).or_default();
        slot.parts.resize(n, None);
        slot.parts[comm.rank] = Some(part);
        slot.arrived += 1;
    }
    c.cv.notify_all();
    if !wait_until(c, &c.cv, &mut slots, |s| s[&seq].arrived == n) {
        return false;
    }
    let parts: Vec<Part> = slots[&seq]
        .parts
        .iter()
        .map(|p| p.expect("arrived"))
        .collect();
    drop(slots);
    let agree = parts.iter().all(|p| {
        p.kind == part.kind
            && p.count == part.count
            && p.dtype == part.dtype
            && p.op == part.op
            && p.root == part.root
    });
    let block = part.count * size;
    let result: Option<Vec<u8>> = if !agree {
        None
    } else {
        match part.kind {
            Kind::AllReduce | Kind::Reduce => {
                let mut acc = bytes_of(parts[0].send, block).to_vec();
                for p in &parts[1..] {
                    combine(part.dtype, part.op, &mut acc, bytes_of(p.send, block));
                }
                (part.kind == Kind::AllReduce || comm.rank == part.root).then_some(acc)
            }
            Kind::Broadcast => Some(bytes_of(parts[part.root].send, block).to_vec()),
            Kind::AllGather => Some(
                parts
                    .iter()
                    .flat_map(|p| bytes_of(p.send, block).to_vec())
                    .collect(),
            ),
            Kind::ReduceScatter => {
                let at = comm.rank * block;
                let mut acc = bytes_of(parts[0].send + at, block).to_vec();
                for p in &parts[1..] {
                    combine(part.dtype, part.op, &mut acc, bytes_of(p.send + at, block));
                }
                Some(acc)
            }
        }
    };
    let mut slots = c.slots.lock();
    slots.get_mut(&seq).expect("slot").computed += 1;
    c.cv.notify_all();
    if !wait_until(c, &c.cv, &mut slots, |s| s[&seq].computed == n) {
        return false;
    }
    if let Some(r) = &result {
        copy_bytes(part.recv, r.as_ptr() as usize, r.len());
    }
    let slot = slots.get_mut(&seq).expect("slot");
    slot.left += 1;
    if slot.left == n {
        slots.remove(&seq);
    }
    agree
}

/// Runs a thread's grouped sends and receives on one queue: every send is
/// posted first, then every receive, then the sends are awaited.
fn point_to_point(comm: &Comm, ops: &[P2p]) -> bool {
    let c = &comm.clique;
    let mut posted = Vec::new();
    for op in ops.iter().filter(|o| o.send) {
        let done = Arc::new(AtomicBool::new(false));
        c.mail
            .lock()
            .entry((comm.rank, op.peer))
            .or_default()
            .push_back(Msg {
                ptr: op.ptr,
                bytes: op.bytes,
                done: Arc::clone(&done),
            });
        posted.push(done);
    }
    c.mail_cv.notify_all();
    let mut ok = true;
    for op in ops.iter().filter(|o| !o.send) {
        let mut mail = c.mail.lock();
        let key = (op.peer, comm.rank);
        if !wait_until(c, &c.mail_cv, &mut mail, |m| {
            m.get(&key).is_some_and(|q| !q.is_empty())
        }) {
            return false;
        }
        let msg = mail
            .get_mut(&key)
            .and_then(VecDeque::pop_front)
            .expect("a message");
        drop(mail);
        ok &= msg.bytes == op.bytes;
        copy_bytes(op.ptr, msg.ptr, msg.bytes.min(op.bytes));
        msg.done.store(true, Ordering::SeqCst);
        c.mail_cv.notify_all();
    }
    for done in posted {
        let mut mail = c.mail.lock();
        if !wait_until(c, &c.mail_cv, &mut mail, |_| done.load(Ordering::SeqCst)) {
            return false;
        }
    }
    ok
}

/// Queues `task` for `comm` on `queue`, counting it as pending and turning
/// a failure into the communicator's asynchronous error.
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
            me.clique.broken.store(true, Ordering::SeqCst);
            me.clique.cv.notify_all();
            me.clique.mail_cv.notify_all();
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
    if !(0..comm.clique.n as c_int).contains(&root) {
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
    if buf.is_null() || !(0..comm.clique.n as c_int).contains(&peer) || peer as usize == comm.rank {
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
        let clique = Arc::clone(registry().cliques.lock().entry(id.hash).or_insert_with(|| Arc::new(Clique {
            n: nrank as usize,
            joined: Mutex::new(0),
            slots: Mutex::new(HashMap::new()),
            mail: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
            mail_cv: Condvar::new(),
            broken: AtomicBool::new(false),
        })));
        if clique.n != nrank as usize { return ERR_ARGUMENTS; }
        {
            let mut joined = clique.joined.lock();
            *joined += ranks.len();
            clique.cv.notify_all();
            if !wait_until(&clique, &clique.cv, &mut joined, |j| *j >= clique.n) {
                return ERR_INTERNAL;
            }
        }
        for (i, (&rank, &device)) in ranks.iter().zip(devs).enumerate() {
            let comm = Arc::new(Comm { clique: Arc::clone(&clique), rank: rank as usize, device, seq: AtomicU64::new(0), pending: AtomicU64::new(0), async_err: AtomicI32::new(0) });
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
        c.clique.broken.store(true, Ordering::SeqCst);
        c.clique.cv.notify_all();
        c.clique.mail_cv.notify_all();
        SUCCESS
    }
    fn cnclAbortComm(comm: *mut c_void) {
        let Some(c) = registry().comms.remove(comm as usize) else { return ERR_ARGUMENTS };
        c.clique.broken.store(true, Ordering::SeqCst);
        c.clique.cv.notify_all();
        c.clique.mail_cv.notify_all();
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
