//! Collectives as state machines over the ranks' shared step counters.
//!
//! All ranks march through the same numbered steps. At step `g` a rank
//! waits until every rank consumed step `g - DEPTH` (its slot is free),
//! writes its contribution and the operation's signature into its slot
//! `g % DEPTH`, and posts `g`; once every rank posted `g` it compares the
//! signatures, reads or reduces what it needs into its output, and marks
//! `g` consumed. A rank may post up to `DEPTH` steps ahead of what it has
//! consumed. Large operations span many steps; every rank computes the
//! same number.
//!
//! Where every rank can read every peer's memory, large operations run
//! in a single-copy form instead (`direct.rs`) over the same steps.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dipu_deviceapi::{DataType, Error, Result};

use super::buffers::{check, copy_in, copy_out, reduce_out};
use super::desc::{Desc, Kind, Reduction};
use super::direct::{self, Direct};
use super::engine::{Progress, Task};
use super::layout::{DEPTH, MAX_WORLD};
use super::reduce::{kernel, Kernel};
use super::state::CommState;

/// Outputs of at least this many bytes are written with non-temporal
/// stores: they would not stay cached anyway, and skipping the caches
/// saves the read of every line written.
const STREAMING_FROM: usize = 4 << 20;

/// A collective as the API received it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    pub(crate) kind: Kind,
    pub(crate) send: usize,
    pub(crate) recv: usize,
    /// `count`, `send_count` (all_gather) or `recv_count` (reduce_scatter).
    pub(crate) count: usize,
    pub(crate) dtype: DataType,
    /// The reduction (reducing kinds).
    pub(crate) op: Option<Reduction>,
    /// The root (broadcast, reduce).
    pub(crate) root: usize,
}

/// One rank's part in one collective.
pub(crate) struct Collective {
    comm: Arc<CommState>,
    spec: Spec,
    desc: Desc,
    kernel: Option<Kernel>,
    /// Write reductions with non-temporal stores (large outputs).
    streaming: bool,
    elem: usize,
    /// Elements of the step axis handled per step.
    per_step: usize,
    first: u64,
    steps: u64,
    posted: u64,
    consumed: u64,
    mode: Mode,
}

/// How an operation runs; decided at its first poll (every rank decides
/// alike, see [`CommState::direct`]).
enum Mode {
    /// Not known yet.
    Undecided,
    /// Through the segment's slots.
    Staged,
    /// Reading the peers' buffers directly.
    Direct(Box<Direct>),
}

impl Collective {
    /// Checks `spec` against the communicator and the registry and reserves
    /// the operation's steps; `None` for an operation with nothing to move.
    pub(crate) fn new(comm: &Arc<CommState>, spec: Spec) -> Result<Option<Collective>> {
        let (world, me) = (comm.world, comm.rank);
        let elem = spec.dtype.size_in_bytes();
        let kernel = match spec.kind {
            Kind::AllReduce | Kind::Reduce | Kind::ReduceScatter => {
                let op = spec
                    .op
                    .ok_or_else(|| Error::invalid_argument("no reduction given"))?;
                Some(kernel(spec.dtype, op)?)
            }
            _ => None,
        };
        if spec.root >= world {
            return Err(Error::invalid_argument(format!(
                "root {} is not a rank of this communicator of {world} ranks",
                spec.root
            )));
        }
        let bytes = spec
            .count
            .checked_mul(elem)
            .and_then(|b| b.checked_mul(world).map(|_| b))
            .ok_or_else(|| Error::invalid_argument("the element count overflows"))?;
        let all = bytes * world;
        let (send_len, recv_len) = match spec.kind {
            Kind::AllReduce => (bytes, bytes),
            Kind::Broadcast => (if me == spec.root { bytes } else { 0 }, bytes),
            Kind::Reduce => (bytes, if me == spec.root { bytes } else { 0 }),
            Kind::AllGather => (bytes, all),
            Kind::ReduceScatter => (all, bytes),
            Kind::Send | Kind::Recv => return Err(Error::invalid_argument("not a collective")),
        };
        check(&comm.memory, "send", spec.send, send_len, comm.device)?;
        check(&comm.memory, "receive", spec.recv, recv_len, comm.device)?;
        if spec.count == 0 {
            return Ok(None);
        }
        let slot_elems = comm.seg().layout().chunk / elem;
        let per_step = match spec.kind {
            Kind::ReduceScatter => slot_elems / world,
            _ => slot_elems,
        };
        let steps = spec.count.div_ceil(per_step) as u64;
        let desc = Desc {
            kind: spec.kind,
            dtype: spec.dtype,
            op: spec.op,
            root: spec.root,
            count: spec.count as u64,
        };
        Ok(Some(Collective {
            comm: Arc::clone(comm),
            spec,
            desc,
            kernel,
            streaming: recv_len >= STREAMING_FROM,
            elem,
            per_step,
            first: comm.reserve_coll(steps),
            steps,
            posted: 0,
            consumed: 0,
            mode: Mode::Undecided,
        }))
    }

    /// Settles how the operation runs; `false` while the communicator's
    /// verdict is not known yet (and the operation wants it).
    fn decide(&mut self) -> bool {
        // Asked by every operation, so every rank publishes its verdict.
        let verdict = self.comm.direct();
        if !direct::eligible(&self.spec, self.comm.world, self.steps) {
            self.mode = Mode::Staged;
            return true;
        }
        self.mode = match verdict {
            None => return false,
            Some(false) => Mode::Staged,
            Some(true) => Mode::Direct(Box::new(Direct::new(
                &self.comm,
                (self.spec, self.desc),
                self.kernel,
                self.streaming,
                (self.first, self.steps),
            ))),
        };
        true
    }

    /// `e` with the rank and the operation in front.
    fn context(&self, e: Error) -> Error {
        e.context(format!("rank {} in {}", self.comm.rank, self.desc))
    }

    /// Elements `start..start + len` of the step axis covered by step `i`.
    fn range(&self, i: u64) -> (usize, usize) {
        let start = i as usize * self.per_step;
        (start, self.per_step.min(self.spec.count - start))
    }

    /// Tries to post this operation's next step.
    fn try_post(&mut self) -> Result<bool> {
        if self.posted == self.steps || self.posted >= self.consumed + DEPTH as u64 {
            return Ok(false);
        }
        let g = self.first + self.posted;
        let seg = self.comm.seg();
        let me = seg.coll(self.comm.rank);
        if me.posted.0.load(Ordering::Acquire) != g - 1 {
            return Ok(false); // an earlier operation has not posted all its steps
        }
        let free = (0..self.comm.world)
            .all(|p| seg.coll(p).consumed.0.load(Ordering::Acquire) + DEPTH as u64 >= g);
        if !free {
            return Ok(false);
        }
        self.write(self.posted, g).map_err(|e| self.context(e))?;
        let sig = &me.sigs.0[(g % DEPTH as u64) as usize];
        for (word, value) in sig.iter().zip(self.desc.encode()) {
            word.store(value, Ordering::Relaxed);
        }
        me.posted.0.store(g, Ordering::Release);
        self.posted += 1;
        Ok(true)
    }

    /// Writes this rank's contribution to step `i` (number `g`) into its slot.
    fn write(&self, i: u64, g: u64) -> Result<()> {
        let (me, s) = (self.comm.rank, &self.spec);
        let slot = self.comm.seg().coll_slot(me, g);
        let (start, len) = self.range(i);
        let (at, bytes) = (start * self.elem, len * self.elem);
        match s.kind {
            Kind::AllReduce | Kind::Reduce | Kind::AllGather => {
                copy_in(&self.comm, "send", s.send + at, slot, bytes)
            }
            Kind::Broadcast if me == s.root => {
                copy_in(&self.comm, "send", s.send + at, slot, bytes)
            }
            Kind::ReduceScatter => {
                let part = self.per_step * self.elem;
                for q in 0..self.comm.world {
                    let src = s.send + q * s.count * self.elem + at;
                    // SAFETY: part q of the slot lies inside it: world parts
                    // of `per_step` elements fit one chunk.
                    let dst = unsafe { slot.add(q * part) };
                    copy_in(&self.comm, "send", src, dst, bytes)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Tries to consume this operation's next posted step.
    fn try_consume(&mut self) -> Result<bool> {
        if self.consumed == self.posted {
            return Ok(false);
        }
        let g = self.first + self.consumed;
        let seg = self.comm.seg();
        let me = seg.coll(self.comm.rank);
        if me.consumed.0.load(Ordering::Acquire) != g - 1 {
            return Ok(false); // an earlier operation has not consumed all its steps
        }
        if !(0..self.comm.world).all(|p| seg.coll(p).posted.0.load(Ordering::Acquire) >= g) {
            return Ok(false);
        }
        check_signatures(&self.comm, &self.desc, g)?;
        self.read(self.consumed, g).map_err(|e| self.context(e))?;
        me.consumed.0.store(g, Ordering::Release);
        self.consumed += 1;
        Ok(true)
    }

    /// Reads step `i` (number `g`) of every rank's slot into the output.
    fn read(&self, i: u64, g: u64) -> Result<()> {
        let (me, world, s) = (self.comm.rank, self.comm.world, &self.spec);
        let seg = self.comm.seg();
        let (start, len) = self.range(i);
        let (at, bytes) = (start * self.elem, len * self.elem);
        let mut terms = [std::ptr::null::<u8>(); MAX_WORLD];
        let offset = match s.kind {
            Kind::ReduceScatter => me * self.per_step * self.elem,
            _ => 0,
        };
        for (p, term) in terms.iter_mut().enumerate().take(world) {
            // SAFETY: the offset (part `me` of a reduce-scatter slot) lies
            // inside the slot.
            *term = unsafe { seg.coll_slot(p, g).add(offset) };
        }
        let terms = &terms[..world];
        let streaming = self.streaming;
        let reduce = |k| {
            reduce_out(
                &self.comm,
                k,
                terms,
                (s.recv + at, len, self.elem),
                streaming,
            )
        };
        match (s.kind, self.kernel) {
            (Kind::AllReduce | Kind::ReduceScatter, Some(k)) => reduce(k),
            (Kind::Reduce, Some(k)) if me == s.root => reduce(k),
            (Kind::Broadcast, _) if !(me == s.root && s.send == s.recv) => {
                copy_out(&self.comm, "receive", terms[s.root], s.recv + at, bytes)
            }
            (Kind::AllGather, _) => {
                for (p, term) in terms.iter().enumerate() {
                    let dst = s.recv + p * s.count * self.elem + at;
                    if p == me && dst == s.send + at {
                        continue; // in place: already there
                    }
                    copy_out(&self.comm, "receive", *term, dst, bytes)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Fails if a rank posted step `g` for another operation than `desc`.
pub(crate) fn check_signatures(comm: &CommState, desc: &Desc, g: u64) -> Result<()> {
    let mine = desc.encode();
    let seg = comm.seg();
    for p in 0..comm.world {
        let sig = &seg.coll(p).sigs.0[(g % DEPTH as u64) as usize];
        let theirs = [
            sig[0].load(Ordering::Relaxed),
            sig[1].load(Ordering::Relaxed),
        ];
        if theirs != mine {
            return Err(Error::invalid_argument(format!(
                "collective mismatch: rank {p} is in {} while rank {} is in {} \
                 (every rank must issue the same collectives in the same order)",
                Desc::describe(theirs),
                comm.rank,
                desc
            )));
        }
    }
    Ok(())
}

impl Task for Collective {
    fn poll(&mut self) -> Result<Progress> {
        if !self.comm.ready() {
            return Ok(Progress::Blocked);
        }
        if matches!(self.mode, Mode::Undecided) && !self.decide() {
            return Ok(Progress::Blocked);
        }
        if let Mode::Direct(op) = &mut self.mode {
            return op.poll();
        }
        let posted = self.try_post()?;
        let consumed = self.try_consume()?;
        Ok(if self.consumed == self.steps {
            Progress::Done
        } else if posted || consumed {
            Progress::Advanced
        } else {
            Progress::Blocked
        })
    }

    fn describe(&self) -> String {
        self.desc.to_string()
    }

    fn comm(&self) -> &Arc<CommState> {
        &self.comm
    }
}
