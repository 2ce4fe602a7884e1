//! Single-copy collectives: each rank reads its peers' buffers where they
//! are, instead of every byte being copied into the segment's slots and
//! read back.
//!
//! A rank reaches a peer of its own process through the address (under
//! the peer's registry lock, which keeps the buffer from being freed, see
//! `local.rs`). A peer process's large buffers live in its device arena
//! (`arena.rs`), a memory file the rank maps once and then reads and
//! writes at memory speed; a buffer outside it (expandable-segment
//! mappings) is reached with `process_vm_readv`/`process_vm_writev`
//! (`cma.rs`, about half memcpy's speed).
//! Whether a communicator reads directly is decided once, by all ranks
//! alike ([`CommState::direct`]); if any rank cannot or must not read some
//! peer, every operation is staged. [`ENV_COMM_DIRECT`] can keep reads to
//! the ranks of one process, or turn them off.
//!
//! [`CommState::direct`]: super::state::CommState::direct
//!
//! An operation reserves as many steps as its staged form: ranks agree on
//! step numbers before they know which form runs. The direct form uses the
//! first step `g1` and the last `gL`; the ones between are skipped.
//!
//! - Post `g1`: the rank writes its send and receive addresses and the
//!   signature into its slot of `g1` (its buffers hold the input).
//! - Phase 1, once every rank posted `g1`: signatures compared; the rank
//!   reads what it needs of the peers' *send* buffers. all_reduce: block r
//!   (of about count / world elements) is reduced by rank r, in rank order
//!   (bitwise the result of the staged kernels), a piece at a time: each
//!   piece is written to the rank's own receive buffer, then, while it is
//!   still in the core's cache, into every peer's receive buffer (block r
//!   of every buffer is written by rank r alone, and read by rank r alone
//!   as a term before). reduce_scatter: rank r's part; reduce: the root
//!   reduces all; all_gather, broadcast: copies into its own receive
//!   buffer. Then it consumes `g1`; all_reduce posts `gL` too (it is done
//!   writing the peers' buffers).
//! - The rank is done once every rank consumed `g1` (all_reduce: posted
//!   `gL`): nobody reads or writes its buffers any more. It consumes (and
//!   posts) `gL`.
//!
//! In place (send = receive buffer): rank r reads block r of every
//! buffer and writes block r of every buffer, each piece read before it
//! is written; nobody else touches block r (reduce_scatter and all_gather
//! in place work alike: a rank writes only the part of its buffer no peer
//! reads).
//!
//! A peer's addresses cannot be checked here: the peer checked them when
//! the operation was issued, and keeps them until every rank is done
//! with them. A read that fails (`EFAULT`: a peer gave up and freed its
//! buffer) becomes the communicator's error, and after reading, a rank
//! checks that no rank gave up meanwhile (a peer's buffer is freed only
//! after its rank gave up).

#[cfg(test)]
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dipu_deviceapi::{Error, ErrorKind, Result};
use nix::errno::Errno;
use parking_lot::RwLockReadGuard;

use super::coll::{check_signatures, Spec};
use super::desc::{Desc, Kind};
use super::engine::Progress;
use super::layout::{Counters, DEPTH, MAX_WORLD, NOT_IN_ARENA};
use super::reduce::{Kernel, Out};
use super::state::CommState;
use super::{cma, nt};
use crate::memory::{Memory, Regions};

/// Which peers collectives read directly: unset (or `1`, `true`, `on`,
/// `yes`, `all`) every peer that can be read (other processes through
/// their mapped device arenas); `local` the ranks of this process only;
/// `0` (or `false`, `off`, `no`) none: every collective is staged through
/// shared memory.
pub(crate) const ENV_COMM_DIRECT: &str = "DIPU_HOST_COMM_DIRECT";

/// Which peers a rank reads directly ([`ENV_COMM_DIRECT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// None: every collective is staged.
    Off,
    /// Ranks of this process.
    Local,
    /// Ranks of this process and of other processes (the default).
    All,
}

impl Policy {
    /// The policy [`ENV_COMM_DIRECT`] asks for; an unknown value is an
    /// `InvalidConfig` error naming the variable.
    pub(crate) fn from_env() -> Result<Policy> {
        #[cfg(test)]
        if let Some(forced) = FORCE.get() {
            return Ok(forced);
        }
        let Ok(value) = std::env::var(ENV_COMM_DIRECT) else {
            return Ok(Policy::All);
        };
        Policy::parse(&value)
    }

    /// Reads a value of [`ENV_COMM_DIRECT`].
    fn parse(value: &str) -> Result<Policy> {
        match value.trim().to_ascii_lowercase().as_str() {
            "0" | "false" | "off" | "no" => Ok(Policy::Off),
            "" | "1" | "true" | "on" | "yes" | "all" => Ok(Policy::All),
            "local" => Ok(Policy::Local),
            _ => Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("{ENV_COMM_DIRECT}={value:?}: expected 1 (read every peer that can be read, the default), local (read ranks of this process only) or 0 (always stage)"),
            )),
        }
    }
}

/// Collectives moving fewer bytes per rank than this stay staged: for
/// them one hand-off per step beats the direct form's three.
pub(crate) const DIRECT_FROM: usize = 512 << 10;

/// The scratch for terms read from other processes, all terms together
/// (a piece of each: small enough to stay in the core's cache).
const SCRATCH: usize = 512 << 10;
/// Bounds of one term's piece in the scratch.
const PIECE_MIN: usize = 16 << 10;
const PIECE_MAX: usize = 256 << 10;
/// Bytes copied per registry lock: a rank holds its peer's read lock (a
/// `malloc` or `free` there waits) for no longer than one piece.
const COPY_PIECE: usize = 1 << 20;
/// Bytes per `process_vm_readv` straight into a receive buffer.
const REMOTE_PIECE: usize = 4 << 20;

#[cfg(test)]
thread_local! {
    /// Tests: overrides [`Policy::from_env`] for communicators joined on
    /// this thread.
    pub(crate) static FORCE: Cell<Option<Policy>> = const { Cell::new(None) };
}

/// Whether an operation may run directly (if the communicator does):
/// large enough, and all_reduce with two steps to use.
pub(crate) fn eligible(spec: &Spec, world: usize, steps: u64) -> bool {
    let per_rank = match spec.kind {
        Kind::AllGather | Kind::ReduceScatter => world,
        _ => 1,
    };
    let bytes = spec.count * spec.dtype.size_in_bytes() * per_rank;
    bytes >= DIRECT_FROM && (spec.kind != Kind::AllReduce || steps >= 2)
}

/// How a rank reaches another rank's memory.
pub(crate) enum Access {
    /// It is this rank.
    Me,
    /// A rank of this process, whose registry this is.
    Local(Arc<Memory>),
    /// A rank of another process, by pid.
    Remote(i32),
}

/// What a rank knows of a peer during an operation.
struct Peer {
    send: usize,
    recv: usize,
    /// For a rank of another process: where its send and receive buffers
    /// are in its device arena, if they are and the arena is mapped here.
    send_offset: Option<u64>,
    recv_offset: Option<u64>,
    access: Access,
    /// Its registry's index in [`Direct::mems`] (not for `Remote`).
    lock: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Post,
    Phase1,
    Finish,
    Done,
}

/// One rank's part in one collective run directly.
pub(crate) struct Direct {
    comm: Arc<CommState>,
    spec: Spec,
    desc: Desc,
    kernel: Option<Kernel>,
    streaming: bool,
    elem: usize,
    /// The first and last step of the operation.
    first: u64,
    last: u64,
    stage: Stage,
    /// Every rank (this one included), known from phase 1 on.
    peers: Vec<Peer>,
    /// The registries of this rank and its peers of this process, in
    /// address order (the order they are locked in).
    mems: Vec<Arc<Memory>>,
}

type Guards<'a> = Vec<(usize, RwLockReadGuard<'a, Regions>)>;

impl Direct {
    /// The direct form of an operation whose steps are `first..first + steps`.
    pub(crate) fn new(
        comm: &Arc<CommState>,
        (spec, desc): (Spec, Desc),
        kernel: Option<Kernel>,
        streaming: bool,
        (first, steps): (u64, u64),
    ) -> Direct {
        Direct {
            comm: Arc::clone(comm),
            spec,
            desc,
            kernel,
            streaming,
            elem: spec.dtype.size_in_bytes(),
            first,
            last: first + steps - 1,
            stage: Stage::Post,
            peers: Vec::new(),
            mems: Vec::new(),
        }
    }

    /// Does what can be done now.
    pub(crate) fn poll(&mut self) -> Result<Progress> {
        let mut advanced = false;
        loop {
            let moved = match self.stage {
                Stage::Post => self.try_post(),
                Stage::Phase1 => self.try_phase1(),
                Stage::Finish => self.try_finish(),
                Stage::Done => return Ok(Progress::Done),
            }?;
            if !moved {
                break;
            }
            advanced = true;
        }
        Ok(if advanced {
            Progress::Advanced
        } else {
            Progress::Blocked
        })
    }

    /// `e` with the rank and the operation in front.
    fn context(&self, e: Error) -> Error {
        e.context(format!("rank {} in {}", self.comm.rank, self.desc))
    }

    fn me(&self) -> &Counters {
        self.comm.seg().coll(self.comm.rank)
    }

    /// Whether `f` holds for every rank's counters.
    fn all(&self, f: impl Fn(&Counters) -> bool) -> bool {
        let seg = self.comm.seg();
        (0..self.comm.world).all(|p| f(seg.coll(p)))
    }

    fn try_post(&mut self) -> Result<bool> {
        let g = self.first;
        let me = self.me();
        // The earlier operations are done here (their writes to this
        // rank's buffers included), and every rank is done with the slot.
        if me.posted.0.load(Ordering::Acquire) != g - 1
            || me.consumed.0.load(Ordering::Acquire) != g - 1
            || !self.all(|c| c.consumed.0.load(Ordering::Acquire) + DEPTH as u64 >= g)
        {
            return Ok(false);
        }
        let slot = (g % DEPTH as u64) as usize;
        #[allow(unused_mut)]
        let mut send = self.spec.send;
        #[cfg(test)]
        if std::env::var_os(super::tests::ENV_BAD_SEND).is_some() {
            send = 8; // never mapped: the peers' reads fail
        }
        let addrs = &me.addrs.0[slot];
        addrs[0].store(send as u64, Ordering::Relaxed);
        addrs[1].store(self.spec.recv as u64, Ordering::Relaxed);
        let arena = self.comm.memory.arena_if_any(self.comm.device);
        let offsets = &me.offsets.0[slot];
        for (word, addr) in offsets.iter().zip([send, self.spec.recv]) {
            let offset = arena.and_then(|a| a.offset_of(addr, 1));
            word.store(offset.unwrap_or(NOT_IN_ARENA), Ordering::Relaxed);
        }
        for (word, value) in me.sigs.0[slot].iter().zip(self.desc.encode()) {
            word.store(value, Ordering::Relaxed);
        }
        me.posted.0.store(g, Ordering::Release);
        self.stage = Stage::Phase1;
        Ok(true)
    }

    fn try_phase1(&mut self) -> Result<bool> {
        let g = self.first;
        if !self.all(|c| c.posted.0.load(Ordering::Acquire) >= g) {
            return Ok(false);
        }
        check_signatures(&self.comm, &self.desc, g)?;
        self.resolve().map_err(|e| self.context(e))?;
        self.phase1().map_err(|e| self.context(e))?;
        self.settle()?;
        let me = self.me();
        me.consumed.0.store(g, Ordering::Release);
        if self.spec.kind == Kind::AllReduce {
            me.posted.0.store(self.last, Ordering::Release);
        }
        self.stage = Stage::Finish;
        Ok(true)
    }

    fn try_finish(&mut self) -> Result<bool> {
        let me = self.me();
        if self.spec.kind == Kind::AllReduce {
            // Every rank is done writing its block into this rank's buffer.
            if !self.all(|c| c.posted.0.load(Ordering::Acquire) >= self.last) {
                return Ok(false);
            }
        } else {
            if !self.all(|c| c.consumed.0.load(Ordering::Acquire) >= self.first) {
                return Ok(false);
            }
            me.posted.0.store(self.last, Ordering::Release);
        }
        me.consumed.0.store(self.last, Ordering::Release);
        self.stage = Stage::Done;
        Ok(true)
    }

    /// After reading: the non-temporal stores ordered before what follows,
    /// and no rank gave up meanwhile (its buffers may be gone).
    fn settle(&self) -> Result<()> {
        if self.streaming {
            nt::fence();
        }
        self.comm.check_abort().map_err(|cause| {
            Error::new(
                cause.kind(),
                format!(
                    "{} while rank {} read its peers' buffers in {}",
                    cause.message(),
                    self.comm.rank,
                    self.desc
                ),
            )
        })
    }

    /// Reads every rank's addresses (posted at `first`) and how to reach it.
    fn resolve(&mut self) -> Result<()> {
        let (seg, me) = (self.comm.seg(), self.comm.rank);
        let slot = (self.first % DEPTH as u64) as usize;
        let mut mems = vec![Arc::clone(&self.comm.memory)];
        let mut peers = Vec::with_capacity(self.comm.world);
        for p in 0..self.comm.world {
            let addrs = &seg.coll(p).addrs.0[slot];
            let (send, recv) = if p == me {
                (self.spec.send, self.spec.recv)
            } else {
                (
                    addrs[0].load(Ordering::Relaxed) as usize,
                    addrs[1].load(Ordering::Relaxed) as usize,
                )
            };
            let access = self.comm.access(p)?;
            if let Access::Local(memory) = &access {
                if !mems.iter().any(|m| Arc::ptr_eq(m, memory)) {
                    mems.push(Arc::clone(memory));
                }
            }
            let (mut send_offset, mut recv_offset) = (None, None);
            if matches!(access, Access::Remote(_)) && self.comm.peer_arena(p).is_some() {
                let offsets = &seg.coll(p).offsets.0[slot];
                let offset = |i: usize| {
                    Some(offsets[i].load(Ordering::Relaxed)).filter(|o| *o != NOT_IN_ARENA)
                };
                (send_offset, recv_offset) = (offset(0), offset(1));
            }
            peers.push(Peer {
                send,
                recv,
                send_offset,
                recv_offset,
                access,
                lock: None,
            });
        }
        mems.sort_by_key(|m| Arc::as_ptr(m) as usize);
        let index = |m: &Arc<Memory>| mems.iter().position(|x| Arc::ptr_eq(x, m));
        for peer in &mut peers {
            peer.lock = match &peer.access {
                Access::Me => index(&self.comm.memory),
                Access::Local(memory) => index(memory),
                Access::Remote(_) => None,
            };
        }
        self.peers = peers;
        self.mems = mems;
        Ok(())
    }

    /// Rank `p`'s block of an all-reduce: elements `start..end`, cut at
    /// 4 KiB multiples.
    fn block(&self, p: usize) -> (usize, usize) {
        let n = self.spec.count;
        let grain = (4096 / self.elem).max(1);
        let per = n.div_ceil(self.comm.world).next_multiple_of(grain);
        ((p * per).min(n), ((p + 1) * per).min(n))
    }

    fn phase1(&self) -> Result<()> {
        let (me, s, e) = (self.comm.rank, &self.spec, self.elem);
        let n = s.count;
        match s.kind {
            Kind::AllReduce => {
                let (start, end) = self.block(me);
                let _pushing = Pushing::new(&self.comm);
                self.reduce(start * e, end - start, s.recv + start * e, true)
            }
            Kind::ReduceScatter => self.reduce(me * n * e, n, s.recv, false),
            Kind::Reduce if me == s.root => self.reduce(0, n, s.recv, false),
            Kind::AllGather => {
                for p in 0..self.comm.world {
                    let dst = s.recv + p * n * e;
                    if p == me && dst == s.send {
                        continue; // in place: already there
                    }
                    self.fetch(p, ("send", self.peers[p].send), dst, n * e)?;
                }
                Ok(())
            }
            Kind::Broadcast if s.send != s.recv || me != s.root => {
                self.fetch(s.root, ("send", self.peers[s.root].send), s.recv, n * e)
            }
            _ => Ok(()),
        }
    }

    /// Read guards of the registries `which` (indices into `mems`), taken
    /// in address order, so two ranks never wait for each other's.
    fn lock(&self, which: &[usize]) -> Guards<'_> {
        let mut which = which.to_vec();
        which.sort_unstable();
        which.dedup();
        which
            .into_iter()
            .map(|i| (i, self.mems[i].read()))
            .collect()
    }

    /// Checks `addr..addr + len` of rank `p`'s `side` buffer against its
    /// registry (locked in `guards`).
    fn check(
        &self,
        guards: &Guards<'_>,
        p: usize,
        side: &str,
        addr: usize,
        len: usize,
    ) -> Result<()> {
        let me = p == self.comm.rank;
        let regions = self.peers[p]
            .lock
            .and_then(|i| guards.iter().find(|(j, _)| *j == i))
            .map(|(_, g)| g)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "a registry was not locked"))?;
        let device = me.then_some(self.comm.device);
        regions
            .check_device(addr, len, device)
            .map(drop)
            .map_err(|e| {
                if me {
                    e.context(format!(
                        "the {side} buffer (freed or unmapped before the stream reached the \
                         operation?)"
                    ))
                } else {
                    e.context(format!("rank {p}'s {side} buffer"))
                }
            })
    }

    /// Where `len` bytes at `addr` of rank `p`'s send (or receive) buffer
    /// are mapped here, if `p` is another process whose arena holds them.
    fn mapped(&self, p: usize, send_side: bool, addr: usize, len: usize) -> Option<usize> {
        let peer = &self.peers[p];
        let (base, offset) = if send_side {
            (peer.send, peer.send_offset?)
        } else {
            (peer.recv, peer.recv_offset?)
        };
        let delta = u64::try_from(addr.checked_sub(base)?).ok()?;
        let at = self
            .comm
            .peer_arena(p)?
            .at(offset.checked_add(delta)?, len)?;
        Some(at)
    }

    /// Where this process can write `bytes` at byte `at` of rank `p`'s
    /// receive buffer: a peer of this process's buffer (checked against
    /// its registry, locked in `guards`), or a peer process's in its arena
    /// mapped here; `None` if it is reached with `process_vm_writev` only.
    fn push_target(
        &self,
        guards: &Guards<'_>,
        p: usize,
        at: usize,
        bytes: usize,
    ) -> Result<Option<usize>> {
        let to = self.peers[p].recv + at;
        match &self.peers[p].access {
            Access::Remote(_) => Ok(self.mapped(p, false, to, bytes)),
            _ => {
                self.check(guards, p, "receive", to, bytes)?;
                Ok(Some(to))
            }
        }
    }

    /// Copies `bytes` at `from` (this rank's receive buffer, live) to byte
    /// `at` of peer process `p`'s receive buffer with `process_vm_writev`.
    fn push_cma(&self, p: usize, from: usize, at: usize, bytes: usize) -> Result<()> {
        let Access::Remote(pid) = self.peers[p].access else {
            return Err(Error::new(
                ErrorKind::Internal,
                "push_cma to a rank of this process",
            ));
        };
        let to = self.peers[p].recv + at;
        // SAFETY: `from` is `bytes` of this rank's receive buffer, live
        // (checked under its registry's lock, held by the caller), not
        // written meanwhile.
        unsafe { cma::write(pid, to, from as *const u8, bytes) }
            .map_err(|e| self.remote_error(p, "receive", (to, bytes), e))
    }

    /// `process_vm_readv` (or `process_vm_writev`) of rank `p` failed.
    fn remote_error(&self, p: usize, side: &str, (addr, len): (usize, usize), e: Errno) -> Error {
        let pid = self.comm.pid_of(p);
        let why = match e {
            Errno::EFAULT => " (not mapped there: freed after its rank gave up?)",
            Errno::ESRCH => " (the process is gone)",
            _ => "",
        };
        Error::vendor(
            ErrorKind::VendorError,
            e as i64,
            format!(
                "reaching {len} bytes at {addr:#x} of rank {p}'s {side} buffer (pid {pid}) with \
                 process_vm_readv/writev failed: {e}{why}"
            ),
        )
    }

    /// Copies `len` bytes at `src` of rank `p`'s `side` buffer into this
    /// rank's receive buffer at `dst`.
    fn fetch(&self, p: usize, (side, src): (&str, usize), dst: usize, len: usize) -> Result<()> {
        let me = self.comm.rank;
        let own = self.peers[me].lock.unwrap_or(0);
        match &self.peers[p].access {
            Access::Remote(pid) => {
                let send_side = side == "send";
                let mapped = self.mapped(p, send_side, src, len).is_some();
                let piece = if mapped { COPY_PIECE } else { REMOTE_PIECE };
                for (at, n) in pieces(len, piece) {
                    let guards = self.lock(&[own]);
                    self.check(&guards, me, "receive", dst + at, n)?;
                    let to = (dst + at) as *mut u8;
                    if let Some(from) = self.mapped(p, send_side, src + at, n) {
                        let from = from as *const u8;
                        // SAFETY: `from` is `n` bytes of the peer's arena
                        // mapped here (the file never shrinks, so reads
                        // cannot fault), which the peer does not write
                        // in this phase; `to` is `n` bytes of this rank's
                        // receive buffer, live (checked under the read lock,
                        // held) and touched by this rank alone now, in
                        // another mapping than `from`.
                        unsafe { nt::copy(from, to, n, self.streaming) };
                        continue;
                    }
                    // SAFETY: `dst + at` is `n` bytes of this rank's receive
                    // buffer, live (checked under the read lock, held across
                    // the call); in this phase this rank alone touches them.
                    unsafe { cma::read(*pid, src + at, to, n) }
                        .map_err(|e| self.remote_error(p, side, (src + at, n), e))?;
                }
            }
            Access::Me | Access::Local(_) => {
                let theirs = self.peers[p].lock.unwrap_or(0);
                for (at, n) in pieces(len, COPY_PIECE) {
                    let guards = self.lock(&[own, theirs]);
                    self.check(&guards, p, side, src + at, n)?;
                    self.check(&guards, me, "receive", dst + at, n)?;
                    let (from, to) = (src + at, dst + at);
                    if from == to {
                        continue;
                    }
                    // SAFETY: both ranges are live device memory (checked
                    // under their registries' read locks, held across the
                    // copy); nobody writes the source or reads the
                    // destination in this phase; overlapping ranges (one
                    // buffer given to two ranks) are moved, not copied.
                    unsafe {
                        if from.abs_diff(to) < n {
                            std::ptr::copy(from as *const u8, to as *mut u8, n);
                        } else {
                            nt::copy(from as *const u8, to as *mut u8, n, self.streaming);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Reduces `count` elements at byte `at` of every rank's send buffer,
    /// in rank order, into this rank's receive buffer at `dst`; `push`
    /// (all_reduce): each piece also into every peer's receive buffer, at
    /// the same place.
    fn reduce(&self, at: usize, count: usize, dst: usize, push: bool) -> Result<()> {
        let kernel = self
            .kernel
            .ok_or_else(|| Error::invalid_argument("no reduction given"))?;
        let (me, world, e) = (self.comm.rank, self.comm.world, self.elem);
        let piece_bytes = (SCRATCH / world).clamp(PIECE_MIN, PIECE_MAX) / 4096 * 4096;
        let piece = piece_bytes / e;
        let staged = |p: &Peer| matches!(p.access, Access::Remote(_)) || (p.send + at) % e != 0;
        let mut scratch = Scratch::take(if self.peers.iter().any(staged) {
            world * piece_bytes
        } else {
            0
        });
        let base = scratch.base();
        let locks: Vec<usize> = self.peers.iter().filter_map(|p| p.lock).collect();
        let mut start = 0;
        while start < count {
            let len = piece.min(count - start);
            let bytes = len * e;
            #[cfg(test)]
            if push && self.comm.give_up_before_push.swap(false, Ordering::SeqCst) {
                self.comm.fail(Error::new(
                    ErrorKind::VendorError,
                    "test: gave up before pushing",
                ));
            }
            if push {
                // A rank that gave up may reuse its buffers any time now.
                self.comm.check_abort()?;
            }
            let guards = self.lock(&locks);
            let mut terms = [std::ptr::null::<u8>(); MAX_WORLD];
            for (p, peer) in self.peers.iter().enumerate() {
                let src = peer.send + at + start * e;
                // Part p of the scratch (used only when it was allocated).
                let part = base.wrapping_add(p * piece_bytes);
                terms[p] = match (&peer.access, self.mapped(p, true, src, bytes)) {
                    (Access::Remote(_), Some(from)) => {
                        let from = from as *const u8;
                        if from as usize % e == 0 {
                            from
                        } else {
                            // SAFETY: `from` is `bytes` of the peer's arena
                            // mapped here, which it does not write now; part
                            // p of the scratch has room and is ours.
                            unsafe { std::ptr::copy_nonoverlapping(from, part, bytes) };
                            part
                        }
                    }
                    (Access::Remote(pid), None) => {
                        // SAFETY: part p of the scratch has `piece_bytes`
                        // >= `bytes` and is this thread's alone.
                        unsafe { cma::read(*pid, src, part, bytes) }
                            .map_err(|err| self.remote_error(p, "send", (src, bytes), err))?;
                        part
                    }
                    _ => {
                        self.check(&guards, p, "send", src, bytes)?;
                        if src % e == 0 {
                            src as *const u8
                        } else {
                            // SAFETY: the source is live memory (checked
                            // under its registry's lock, held), nobody
                            // writes it now; part p of the scratch has room.
                            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, part, bytes) };
                            part
                        }
                    }
                };
            }
            let out = dst + start * e;
            self.check(&guards, me, "receive", out, bytes)?;
            // all_reduce: the kernel writes the peers' receive buffers too
            // (one given to several ranks once; partly overlapping ones,
            // and the ones reached by process_vm_writev only, afterwards).
            // This rank's own output, in place, is written through the
            // caches: its lines were just read (no read for ownership), and
            // the core's fill buffers are left to the reads and the peers'
            // non-temporal stores.
            let nothing = Out {
                ptr: std::ptr::null_mut(),
                streaming: false,
            };
            let mut outs = [nothing; MAX_WORLD];
            outs[0] = Out {
                ptr: out as *mut u8,
                streaming: self.streaming && !(push && self.spec.send == self.spec.recv),
            };
            let mut n_outs = 1;
            let (mut moves, mut later) = (Vec::new(), Vec::new());
            if push {
                for p in (0..world).filter(|p| *p != me) {
                    let Some(to) = self.push_target(&guards, p, out - self.spec.recv, bytes)?
                    else {
                        later.push(p);
                        continue;
                    };
                    let written = &outs[..n_outs];
                    if written.iter().any(|o| o.ptr as usize == to) {
                        continue;
                    }
                    if written
                        .iter()
                        .any(|o| (o.ptr as usize).abs_diff(to) < bytes)
                    {
                        moves.push(to);
                        continue;
                    }
                    outs[n_outs] = Out {
                        ptr: to as *mut u8,
                        streaming: self.streaming,
                    };
                    n_outs += 1;
                }
            }
            // SAFETY: every term is `len` aligned elements of the kernel's
            // type that nobody writes now: scratch parts, peers' send
            // buffers in their arenas mapped here (never faulting), or
            // send buffers live under their registries' read locks (held),
            // in a block no rank but this one writes, and only after
            // reading it. The outputs: `out`, live receive memory of this
            // rank (checked, locked), and block `me` of peers' receive
            // buffers, live (checked under their registries' locks, held)
            // or in their arenas mapped here, which no other rank touches
            // now; no two overlap, and none overlaps a term except exactly
            // (in place), which the kernel allows.
            unsafe { kernel(&terms[..world], &outs[..n_outs], len) };
            for to in moves {
                // SAFETY: both are `bytes` of live receive memory (checked
                // under their registries' locks, held) that overlap: moved.
                unsafe { std::ptr::copy(out as *const u8, to as *mut u8, bytes) };
            }
            for p in later {
                self.push_cma(p, out, out - self.spec.recv, bytes)?;
            }
            drop(guards);
            start += len;
        }
        Ok(())
    }
}

/// Marks the rank as writing into its peers' buffers while it lives.
struct Pushing<'a>(&'a CommState);

impl<'a> Pushing<'a> {
    fn new(comm: &'a CommState) -> Self {
        comm.set_pushing(true);
        Pushing(comm)
    }
}

impl Drop for Pushing<'_> {
    fn drop(&mut self) {
        self.0.set_pushing(false);
    }
}

/// `(offset, length)` of the pieces of `len` bytes, `piece` at most each.
fn pieces(len: usize, piece: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(piece)
        .map(move |at| (at, piece.min(len - at)))
}

/// 64 bytes, aligned for every element type and a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

thread_local! {
    /// The stream worker's scratch, kept between operations.
    static SCRATCH_CACHE: std::cell::Cell<Vec<Line>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's scratch of at least the bytes asked, given back on drop.
struct Scratch(Vec<Line>);

impl Scratch {
    fn take(bytes: usize) -> Scratch {
        let mut lines = SCRATCH_CACHE.take();
        if lines.len() * 64 < bytes {
            lines.resize(bytes.div_ceil(64), Line([0; 64]));
        }
        Scratch(lines)
    }

    fn base(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        SCRATCH_CACHE.set(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    #[test]
    fn policy_values_and_errors() {
        assert_eq!(Policy::parse("0").unwrap(), Policy::Off);
        assert_eq!(Policy::parse(" Local ").unwrap(), Policy::Local);
        assert_eq!(Policy::parse("").unwrap(), Policy::All);
        assert_eq!(Policy::parse("all").unwrap(), Policy::All);
        let e = Policy::parse("sometimes").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.message().contains(ENV_COMM_DIRECT), "{e}");
    }
}
