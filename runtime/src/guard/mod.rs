//! Guard bytes around device allocations (`DIPU_MEM_CHECK_GUARD_BYTES`):
//! a wrapper around each device allocator that asks for the guards on top
//! of every request, fills them with [`GUARD_PATTERN`] on the allocation's
//! stream, and at free queues the copy of the guards back to the host on
//! that stream (after the work queued on the other streams that used the
//! block), holds the block until an event after the copy has completed
//! (polled at the next allocation or free; no wait), has the memory
//! checker judge the copy, and then gives the block back to the allocator.
//! Small blocks freed on their own stream are kept for reuse instead
//! ([`reuse`]), their guards checked before each reuse.
//!
//! With `DIPU_MEM_CHECK_POISON=1` a freed block is also filled with the
//! poison pattern on its stream and held in a quarantine before it goes
//! back to the allocator ([`quarantine`]).
//!
//! Only runtimes created with the checker on and guards or poison asked
//! for use it: otherwise the allocators are not wrapped and their path is
//! unchanged.

mod pending;
mod quarantine;
mod reuse;
mod staging;

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::{Arc, Once, Weak};

use dipu_allocator::{
    Algorithm, Allocation, AllocatorWrapper, DeviceAllocator, DeviceStats, LiveBlock, Pool,
    Snapshot,
};
use dipu_deviceapi::{Capabilities, CopyKind, Error, Result};
use dipu_memcheck::{FreedRecord, GuardViolation, Side, GUARD_PATTERN};
use dipu_stream::{DeviceContext, DeviceGuard, PooledEvent, Stream};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use staging::{HostCopy, Staging};

/// The allocators' alignment: the guard before a buffer is rounded up to
/// it, so the user's pointer keeps the alignment of an unguarded one.
pub(crate) const ALIGN: usize = 512;

/// The sizes of the two guards for `guard_bytes` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GuardSizes {
    /// Before the user's pointer: `guard_bytes` rounded up to [`ALIGN`].
    pub(crate) front: usize,
    /// After the user's last byte: `guard_bytes`.
    pub(crate) back: usize,
}

impl GuardSizes {
    pub(crate) fn new(guard_bytes: usize) -> GuardSizes {
        GuardSizes {
            front: guard_bytes.div_ceil(ALIGN) * ALIGN,
            back: guard_bytes,
        }
    }
}

/// A live guarded allocation, by the user's pointer.
struct Live {
    bytes: usize,
    stream: Stream,
    /// Other streams that used it (`record_stream`).
    streams: Vec<Stream>,
    /// Sides already reported (each is reported once).
    reported: [bool; 2],
    /// Allocations the block served since its guards were filled (1: this
    /// one; more when it was kept for reuse).
    uses: u32,
}

impl Live {
    /// A block of `bytes` on `stream` serving its first allocation since its
    /// guards were filled, used on no other stream, nothing reported.
    fn new(bytes: usize, stream: Stream) -> Live {
        Live {
            bytes,
            stream,
            streams: Vec::new(),
            reported: [false; 2],
            uses: 1,
        }
    }
}

/// A freed allocation whose guards are being copied back on its stream.
struct Pending {
    user: usize,
    live: Live,
    /// Where the guards are copied (front, then back): a pinned buffer,
    /// which stays put while the copy runs.
    copy: HostCopy,
    /// Recorded on the allocation's stream after the copy.
    done: PooledEvent,
    /// The checker still holds the block (not poisoned): it goes back to
    /// the allocator once its guards are judged, so that no allocation
    /// gets its pointer before the report can name the freed allocation.
    held: bool,
    /// The freed allocation's record, taken out of the checker when the
    /// block was handed out again before this copy came back (a kept block
    /// reused on a busy stream): the report names it.
    freed: Option<FreedRecord>,
}

#[derive(Default)]
struct State {
    /// By the user's pointer (Fx-hashed: looked up at every allocation,
    /// free and `find`).
    live: FxHashMap<usize, Live>,
    pending: pending::PendingFrees,
    /// Poisoned frees held back from reuse, oldest first.
    quarantine: VecDeque<quarantine::Quarantined>,
    /// The bytes (with guards) of the blocks in `quarantine`.
    held: usize,
    /// Freed blocks kept for reuse, guards and all.
    reuse: reuse::Reuse,
    /// Violations found by settled guard copies so far, wherever they were
    /// settled (a free, a give-back, a check), so that a check of every
    /// guard counts those it caused.
    judged: usize,
}

/// One device's guarded allocator: the shared part, also held by the
/// runtime's list for [`crate::Runtime::check_guards`].
pub(crate) struct Guarded {
    inner: Box<dyn DeviceAllocator>,
    ctx: &'static DeviceContext,
    sizes: GuardSizes,
    /// With poison: the bytes the quarantine holds.
    quarantine: Option<usize>,
    state: Mutex<State>,
    /// Free pinned buffers for the guards' copies.
    staging: Staging,
    /// The vendor's memory is host-accessible: guards are read in place
    /// once the work on them is done, instead of copied back.
    in_place: bool,
}

/// The guarded allocators a runtime made, for checks of every live guard.
pub(crate) type GuardList = Arc<Mutex<Vec<Arc<Guarded>>>>;

/// The wrapper that guards each allocator of `ctx` (and poisons its frees
/// into a quarantine of `quarantine` bytes, when given) and lists it in
/// `list`.
pub(crate) fn wrapper(
    ctx: &'static DeviceContext,
    sizes: GuardSizes,
    quarantine: Option<usize>,
    list: GuardList,
) -> AllocatorWrapper {
    Arc::new(move |_device, inner| {
        let g = Arc::new(Guarded {
            in_place: ctx
                .api()
                .capabilities()
                .contains(Capabilities::HOST_ACCESSIBLE_MEMORY),
            inner,
            ctx,
            sizes,
            quarantine,
            state: Mutex::default(),
            staging: Staging::default(),
        });
        list.lock().push(Arc::clone(&g));
        register_for_exit(&g);
        Box::new(Handle(g))
    })
}

/// Every guarded allocator of the process still alive, for the checks at
/// process exit.
static ALL: Mutex<Vec<Weak<Guarded>>> = Mutex::new(Vec::new());

/// Lists `g` for the checks at process exit (registered with the checker
/// on the first call).
fn register_for_exit(g: &Arc<Guarded>) {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| dipu_memcheck::on_exit(check_all_at_exit));
    let mut all = ALL.lock();
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(g));
}

/// At process exit (on the checker's exit thread): the checks shutdown
/// runs, on every guarded allocator still alive (a runtime shut down
/// before was checked then). Violations go to the checker's report.
fn check_all_at_exit() {
    let all: Vec<Arc<Guarded>> = ALL.lock().iter().filter_map(Weak::upgrade).collect();
    for g in all {
        if let Err(e) = g.check_all() {
            dipu_memcheck::note(&format!(
                "dipu memcheck: checking device {}'s guards at exit: {e}\n",
                g.device()
            ));
        }
    }
}

/// Whether every byte of `guard` is the pattern: compared a page at a time
/// (a `memcmp`), the path of every check that finds nothing.
fn intact(guard: &[u8]) -> bool {
    static PAGE: [u8; 4096] = [GUARD_PATTERN; 4096];
    guard.chunks(PAGE.len()).all(|c| c == &PAGE[..c.len()])
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Before => 0,
        Side::After => 1,
    }
}

impl Guarded {
    fn device(&self) -> i32 {
        self.inner.device()
    }

    /// The allocator's addresses of the blocks the checker holds: kept for
    /// reuse, checked aside, and quarantined.
    fn held_bases(&self) -> Vec<usize> {
        let state = self.state.lock();
        let front = self.sizes.front;
        let kept = state.reuse.users();
        let checking = state.pending.iter().filter(|p| p.held).map(|p| p.user);
        let quarantined = state.quarantine.iter().map(|q| q.user());
        kept.chain(checking)
            .chain(quarantined)
            .map(|user| user - front)
            .collect()
    }

    /// The block's bytes with its guards (what the allocator holds).
    fn total(&self, bytes: usize) -> usize {
        self.sizes.front + bytes + self.sizes.back
    }

    /// Queues on the allocation's stream, after the work queued so far on
    /// the streams that used it, the copy of both guards to the host;
    /// returns the host buffer and an event recorded after the copy. The
    /// block can then go back to the allocator: its next user's work on
    /// that stream runs after the copy (stream order), as without guards.
    fn copy_back(&self, user: usize, live: &Live) -> Result<(HostCopy, PooledEvent)> {
        let GuardSizes { front, back } = self.sizes;
        let stream = &live.stream;
        for other in &live.streams {
            let e = self.ctx.pooled_event(other.device())?;
            e.record(other)?;
            e.block(stream)?;
        }
        let mut copy = self.staging.take(self.ctx, front + back);
        let _g = DeviceGuard::new(self.ctx, self.device())?;
        let queued = (|| {
            for (dst, src, len) in [(0, user - front, front), (front, user + live.bytes, back)] {
                if len == 0 {
                    continue;
                }
                // SAFETY: `src..src + len` is a guard inside the block,
                // which is not given back before this copy is queued;
                // `copy` has room for both guards and outlives the copy: it
                // is kept (its buffer unmoved) in the pending free until
                // `done` has completed, or the stream is synchronized below
                // before it is reused.
                unsafe {
                    self.ctx.api().memcpy_async(
                        copy.as_mut_ptr().add(dst).cast(),
                        src as *const c_void,
                        len,
                        CopyKind::DeviceToHost,
                        stream.raw(),
                    )?
                };
            }
            let done = self.ctx.pooled_event(self.device())?;
            done.record(stream)?;
            Ok::<_, Error>(done)
        })();
        match queued {
            Ok(done) => Ok((copy, done)),
            Err(e) => {
                // A copy may be queued: let it finish before `copy` goes.
                let _ = stream.synchronize();
                self.staging.put(copy);
                Err(e)
            }
        }
    }

    /// Queues on `stream` the fill of both guards of the `bytes` at `user`
    /// with [`GUARD_PATTERN`].
    fn fill_guards(&self, user: usize, bytes: usize, stream: Stream) -> Result<()> {
        let GuardSizes { front, back } = self.sizes;
        let _d = DeviceGuard::new(self.ctx, self.device())?;
        for (addr, len) in [(user - front, front), (user + bytes, back)] {
            if len > 0 {
                // SAFETY: `addr..addr + len` is a guard of a block this
                // allocator holds and has not handed out with these bytes
                // yet (just allocated, or being handed out again after
                // the copy of its guards, queued before on `stream`).
                unsafe {
                    self.ctx.api().memset_async(
                        addr as *mut c_void,
                        GUARD_PATTERN,
                        len,
                        stream.raw(),
                    )?
                };
            }
        }
        Ok(())
    }

    /// Copies `bytes` of device memory at `addr` back to the host.
    ///
    /// # Safety
    /// As for [`Guarded::read_append`].
    unsafe fn read(&self, addr: usize, bytes: usize) -> Result<Vec<u8>> {
        let mut host = Vec::new();
        // SAFETY: forwarded caller's contract.
        unsafe { self.read_append(&[(addr, bytes)], &mut host)? };
        Ok(host)
    }

    /// Copies each range (address, bytes) of device memory, in order, to
    /// the end of `host`: in place on host-accessible memory, else with
    /// synchronous vendor copies.
    ///
    /// # Safety
    /// Each range lies in a block this allocator holds, and the device work
    /// queued on it so far is done (its stream idle, its event complete, or
    /// the device synchronised): read in place, memory that a stream still
    /// writes would be a data race.
    unsafe fn read_append(&self, ranges: &[(usize, usize)], host: &mut Vec<u8>) -> Result<()> {
        host.reserve(ranges.iter().map(|&(_, bytes)| bytes).sum());
        if self.in_place {
            for &(addr, bytes) in ranges {
                // SAFETY: `addr..addr + bytes` lies inside a block this
                // allocator holds, so it stays mapped, and the work on it is
                // done (the caller's contract); the vendor's
                // HOST_ACCESSIBLE_MEMORY capability makes it host memory
                // this process may read. `host` has room for `bytes` more
                // bytes, a separate allocation.
                unsafe {
                    let at = host.as_mut_ptr().add(host.len());
                    std::ptr::copy_nonoverlapping(addr as *const u8, at, bytes);
                    host.set_len(host.len() + bytes);
                }
            }
            return Ok(());
        }
        let _g = DeviceGuard::new(self.ctx, self.device())?;
        for &(addr, bytes) in ranges {
            let len = host.len();
            // SAFETY: `addr..addr + bytes` lies inside a block this
            // allocator holds (a guard or a kept block), and `host` has room
            // for `bytes` more bytes (not zeroed first: the copy writes
            // every byte).
            unsafe {
                self.ctx.api().memcpy(
                    host.as_mut_ptr().add(len).cast(),
                    addr as *const c_void,
                    bytes,
                    CopyKind::DeviceToHost,
                )?
            };
            // SAFETY: the synchronous copy above initialised those `bytes`.
            unsafe { host.set_len(len + bytes) };
        }
        Ok(())
    }

    /// Copies both guards of the live allocation at `user` back now and
    /// reports each overwritten side not reported yet; returns how many.
    fn check(&self, user: usize, live: &mut Live) -> Result<usize> {
        let GuardSizes { front, back } = self.sizes;
        // SAFETY: both guards lie in the live allocation's block, which
        // this allocator holds; the callers synchronise the device first
        // (`check_all`), so the work queued on it until then is done. Work
        // another thread queues afterwards on a live allocation races with
        // this check as it would with the vendor's own copy.
        let (before, after) = unsafe {
            (
                self.read(user - front, front)?,
                self.read(user + live.bytes, back)?,
            )
        };
        Ok(self.judge(user, live, [&before, &after], false, None))
    }

    /// Reports each side of `guards` (before, after) that is overwritten
    /// and not reported yet, naming `freed` if given (else the checker's
    /// record at `user`); returns how many it reported.
    fn judge(
        &self,
        user: usize,
        live: &mut Live,
        guards: [&[u8]; 2],
        at_free: bool,
        freed: Option<&FreedRecord>,
    ) -> usize {
        let mut found = 0;
        for (side, guard) in [(Side::Before, guards[0]), (Side::After, guards[1])] {
            if intact(guard) || live.reported[side_index(side)] {
                continue;
            }
            let v = GuardViolation {
                ptr: user,
                size: live.bytes,
                device: self.device(),
                stream: live.stream.id(),
                side,
                guard: guard.to_vec(),
                at_free,
                uses: live.uses,
            };
            let reported = match freed {
                Some(f) => dipu_memcheck::on_guard_violation_of(&v, f),
                None => dipu_memcheck::on_guard_violation(&v),
            };
            if reported {
                live.reported[side_index(side)] = true;
                found += 1;
            }
        }
        found
    }

    /// Checks the guards copied back by the frees whose copies are done
    /// (every pending free, after waiting, when `wait`); returns the
    /// violations reported.
    ///
    /// Copies on one stream complete in the order they were queued (and
    /// are pending in that order): without `wait`, the first one not done
    /// on a stream ends the queries of that stream, so a long queue behind
    /// a busy stream costs one event query per stream, not one per block.
    fn settle(&self, state: &mut State, wait: bool) -> Result<usize> {
        let (ready, result) = state.pending.take_ready(|p| {
            if wait {
                p.done.synchronize().map(|()| true)
            } else {
                p.done.query()
            }
        });
        let mut found = 0;
        for mut p in ready {
            let (front, back) = p.copy.bytes().split_at(self.sizes.front);
            let bad = self.judge(p.user, &mut p.live, [front, back], true, p.freed.as_ref());
            self.staging.put(p.copy);
            found += bad;
            state.judged += bad;
            if p.held {
                let base = (p.user - self.sizes.front) as *mut c_void;
                if let Err(e) = self.inner.free(base) {
                    tracing::warn!("dipu memcheck: giving a checked block back: {e}");
                }
            }
        }
        result.map(|()| found)
    }

    /// Gives the freed `live` at `user` back: queues the copy of its
    /// guards, then poisons and quarantines the block or gives it back to
    /// the allocator at once. On an error the allocation stays live.
    fn give_back(&self, state: &mut State, user: usize, live: Live) -> Result<()> {
        let (copy, done) = match self.copy_back(user, &live) {
            Ok(queued) => queued,
            Err(e) => {
                state.live.insert(user, live);
                return Err(e.context("copying the memory checker's guard bytes back"));
            }
        };
        let held = self.poison(user, &live);
        state.pending.push(Pending {
            user,
            live,
            copy,
            done,
            held: held.is_none(),
            freed: None,
        });
        let settled = self.settle(state, false);
        if let Some(q) = held {
            self.hold(state, q)?;
        }
        settled.map(|_| ())
    }

    /// Checks every pending free (after waiting for its streams), every
    /// kept block (given back), every live allocation (after synchronizing
    /// the device) and the quarantine; returns the violations reported.
    pub(crate) fn check_all(&self) -> Result<usize> {
        self.ctx.synchronize_device(self.device())?;
        let mut state = self.state.lock();
        let before = state.judged;
        // Giving the kept blocks back may settle their copies (and others')
        // already: count by the running total, not by this settle alone.
        self.flush_kept(&mut state)?;
        self.settle(&mut state, true)?;
        let mut found = state.judged - before;
        let users: Vec<usize> = state.live.keys().copied().collect();
        for user in users {
            if let Some(mut live) = state.live.remove(&user) {
                let r = self.check(user, &mut live);
                state.live.insert(user, live);
                found += r?;
            }
        }
        found += self.check_quarantine(&mut state)?;
        Ok(found)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // The pending copies write into buffers freed with this.
        for p in self.state.get_mut().pending.iter() {
            let _ = p.done.synchronize();
        }
        let mut state = std::mem::take(self.state.get_mut());
        if let Err(e) = self.flush(&mut state) {
            tracing::warn!("dipu memcheck: emptying the quarantine: {e}");
        }
        for p in state.pending.take_all() {
            let _ = p.done.synchronize();
            Staging::release(self.ctx, p.copy);
        }
        self.staging.release_all(self.ctx);
    }
}

/// The [`DeviceAllocator`] the runtime uses in place of the wrapped one.
struct Handle(Arc<Guarded>);

impl DeviceAllocator for Handle {
    fn device(&self) -> i32 {
        self.0.device()
    }

    fn algorithm(&self) -> Algorithm {
        self.0.inner.algorithm()
    }

    fn allocate(&self, bytes: usize, stream: Stream) -> Result<Allocation> {
        let g = &*self.0;
        if bytes == 0 {
            return g.inner.allocate(0, stream);
        }
        if g.quarantine.is_none() && bytes <= reuse::MAX_KEPT_BLOCK {
            if let Some(user) = g.reuse(bytes, stream) {
                return Ok(Allocation {
                    ptr: user as *mut c_void,
                    size: bytes,
                    device: g.device(),
                    stream,
                });
            }
        }
        let GuardSizes { front, back } = g.sizes;
        let total = bytes
            .checked_add(front + back)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::new(
                    dipu_deviceapi::ErrorKind::OutOfMemory,
                    format!("{bytes} bytes and their guards is more than any allocation can hold"),
                )
            })?;
        // Frees whose copies are done are judged first, their blocks given
        // back for this allocation to take.
        g.settle_now(&mut g.state.lock());
        let a = match g.inner.allocate(total, stream) {
            Err(e) if e.kind() == dipu_deviceapi::ErrorKind::OutOfMemory => {
                // The kept and quarantined blocks go back first, then once
                // more.
                let mut state = g.state.lock();
                let n = g.flush_kept(&mut state)? + g.flush(&mut state)?;
                let n = n + state.pending.iter().filter(|p| p.held).count();
                g.settle(&mut state, true)?;
                drop(state);
                if n == 0 {
                    return Err(e);
                }
                g.inner.allocate(total, stream)?
            }
            r => r?,
        };
        let base = a.ptr as usize;
        let user = base + front;
        let filled = g.fill_guards(user, bytes, stream);
        if let Err(e) = filled {
            let _ = g.inner.free(a.ptr);
            return Err(e.context("filling the memory checker's guard bytes"));
        }
        let mut state = g.state.lock();
        state.live.insert(user, Live::new(bytes, stream));
        Ok(Allocation {
            ptr: user as *mut c_void,
            size: bytes,
            ..a
        })
    }

    fn free(&self, ptr: *mut c_void) -> Result<()> {
        let g = &*self.0;
        let user = ptr as usize;
        let mut state = g.state.lock();
        let Some(live) = state.live.remove(&user) else {
            return Err(Error::invalid_argument(format!(
                "{ptr:p} is not a live allocation of device {}'s allocator",
                g.device()
            )));
        };
        g.keep_or_give_back(&mut state, user, live)
    }

    fn record_stream(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        let mut state = self.0.state.lock();
        let Some(live) = state.live.get_mut(&(ptr as usize)) else {
            return Err(Error::invalid_argument(format!(
                "record_stream: {ptr:p} is not a live allocation"
            )));
        };
        if live.stream != stream && !live.streams.contains(&stream) {
            live.streams.push(stream);
        }
        Ok(())
    }

    fn find(&self, addr: usize) -> Option<LiveBlock> {
        let g = &*self.0;
        let b = g.inner.find(addr)?;
        let user = b.addr + g.sizes.front;
        let state = g.state.lock();
        let live = state.live.get(&user)?;
        (addr >= user && addr < user + live.bytes).then_some(LiveBlock {
            addr: user,
            requested: live.bytes,
        })
    }

    fn empty_cache(&self) -> Result<()> {
        let g = &*self.0;
        let mut state = g.state.lock();
        g.flush_kept(&mut state)?;
        g.settle(&mut state, true)?;
        g.flush(&mut state)?;
        drop(state);
        g.inner.empty_cache()
    }

    fn stats(&self) -> DeviceStats {
        let g = &*self.0;
        let mut stats = g.inner.stats();
        // The blocks the checker holds (kept for reuse, quarantined) are
        // free to the user: not counted as allocated, active or requested.
        let held = g.held_bases();
        if held.is_empty() {
            return stats;
        }
        let snapshot = g.inner.snapshot();
        let mut sizes = HashMap::with_capacity(held.len());
        for s in &snapshot.segments {
            // The snapshot names a segment's pool as the statistics count it.
            let pool = if s.pool == "small" {
                Pool::Small
            } else {
                Pool::Large
            };
            for b in &s.blocks {
                sizes.insert(b.address, (b.size, b.requested, pool));
            }
        }
        for base in held {
            let Some(&(size, requested, pool)) = sizes.get(&base) else {
                continue;
            };
            let (size, requested) = (size as u64, requested as u64);
            let sub = |v: &mut u64, by: u64| *v = v.saturating_sub(by);
            // The aggregate, then the block's pool, so the pools still add
            // up to it.
            sub(&mut stats.allocation.current, 1);
            sub(&mut stats.active.current, 1);
            sub(&mut stats.allocated_bytes.current, size);
            sub(&mut stats.active_bytes.current, size);
            sub(&mut stats.requested_bytes.current, requested);
            let part = stats.pool_mut(pool);
            sub(&mut part.allocation.current, 1);
            sub(&mut part.active.current, 1);
            sub(&mut part.allocated_bytes.current, size);
            sub(&mut part.active_bytes.current, size);
            sub(&mut part.requested_bytes.current, requested);
        }
        stats
    }

    fn reset_peak_stats(&self) {
        self.0.inner.reset_peak_stats()
    }

    fn snapshot(&self) -> Snapshot {
        self.0.inner.snapshot()
    }

    fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.0.inner.set_memory_fraction(fraction)
    }
}
