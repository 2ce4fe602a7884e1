//! Guarded blocks kept for reuse: a small block freed on its own stream
//! (no `record_stream`) is kept, guards and all, instead of being copied
//! back and given back to the allocator, and the next allocation of the
//! same size on that stream takes it without a refill.
//!
//! Its guards are checked **before it is handed out again**, so that a
//! violation names the allocation that wrote it:
//! - when the stream has finished its work (so the freed allocation's
//!   writes are done), the guards are read there and then: in place on a
//!   vendor with host-accessible memory, else with synchronous vendor
//!   copies (one of the whole block for blocks up to [`WHOLE_BLOCK_READ`],
//!   else one per guard). A block found overwritten is reported and given
//!   back to the allocator (the next allocation there refills its guards);
//!   an intact one is handed out;
//! - when the stream is still busy, nothing waits: the copy of the guards
//!   is queued on the stream behind the freed allocation's work, then
//!   their refill, and the block is handed out at once (its next user's
//!   work runs after both, by stream order). The freed allocation's record
//!   is taken out of the checker, and the copy, once back, is judged
//!   naming it.
//!
//! Kept blocks also leave, checked as at a free, when the kept bytes are
//! full, at `empty_cache`, when the allocator runs out, and at a check of
//! every guard (and so at shutdown and at process exit).
//!
//! So a cache-hit pair on an idle stream queues no device work and reads
//! the block or its two guards (in place, or with one or two synchronous
//! copies); on a busy stream it queues two or three small operations and
//! an event.

use std::cell::RefCell;

use dipu_deviceapi::Result;
use dipu_stream::Stream;
use rustc_hash::FxHashMap;

use super::{Guarded, Live, Pending, State};

/// The largest allocation kept (4 MiB).
pub(super) const MAX_KEPT_BLOCK: usize = 4 << 20;
/// The most bytes (with guards) kept per device (32 MiB).
pub(super) const MAX_KEPT_BYTES: usize = 32 << 20;
/// Blocks (with guards) up to this size are read back whole in one copy
/// when checked before reuse; larger ones guard by guard.
pub(super) const WHOLE_BLOCK_READ: usize = 1 << 10;

/// The kept blocks of one device, by stream and size: their user pointers.
#[derive(Default)]
pub(super) struct Reuse {
    by_key: FxHashMap<(Stream, usize), Vec<usize>>,
    /// Bytes (with guards) kept.
    bytes: usize,
}

impl Reuse {
    /// The user pointers of the kept blocks.
    pub(super) fn users(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_key.values().flatten().copied()
    }
}

impl Guarded {
    /// Takes a kept block of `bytes` on `stream`: the new live
    /// allocation's user pointer, or `None` (nothing kept, or its guards
    /// overwritten: the caller allocates afresh). On an idle stream its
    /// guards are checked now (naming the freed allocation); on a busy one
    /// they are copied back and refilled in stream order and judged later
    /// ([`Guarded::reuse_busy`]). Never waits for the stream.
    pub(super) fn reuse(&self, bytes: usize, stream: Stream) -> Option<usize> {
        let user = {
            let mut state = self.state.lock();
            let user = state.reuse.by_key.get_mut(&(stream, bytes))?.pop()?;
            state.reuse.bytes -= self.total(bytes);
            user
        };
        let mut freed = Live::new(bytes, stream);
        // The freed allocation's work must be done before its guards are
        // read: on a busy stream they are read back later, in stream order.
        match stream.query() {
            Ok(true) => {}
            Ok(false) => return self.reuse_busy(user, freed),
            Err(e) => {
                tracing::warn!("dipu memcheck: querying a kept block's stream: {e}");
                return self.reuse_busy(user, freed);
            }
        }
        let intact = match self.check_kept(user, &mut freed) {
            Ok(found) => found == 0,
            Err(e) => {
                tracing::warn!("dipu memcheck: checking a kept block's guards: {e}");
                false
            }
        };
        let mut state = self.state.lock();
        if !intact {
            // Reported (or unreadable): back to the allocator, whose next
            // allocation refills the guards.
            let base = (user - self.sizes.front) as *mut std::ffi::c_void;
            if let Err(e) = self.inner.free(base) {
                tracing::warn!("dipu memcheck: giving a kept block back: {e}");
            }
            return None;
        }
        state.live.insert(user, freed);
        self.settle_now(&mut state);
        Some(user)
    }

    /// Hands the kept block at `user` out again without waiting for its
    /// busy stream: queues there (behind the freed allocation's work) the
    /// copy of its guards, then their refill, and takes the freed
    /// allocation's record out of the checker; the copy is judged when it
    /// is back, naming that allocation. `None` (the block held until then,
    /// the caller allocating afresh) when the refill cannot be queued.
    fn reuse_busy(&self, user: usize, freed: Live) -> Option<usize> {
        let (bytes, stream) = (freed.bytes, freed.stream);
        let (copy, done) = match self.copy_back(user, &freed) {
            Ok(queued) => queued,
            Err(e) => {
                tracing::warn!("dipu memcheck: copying a kept block's guards back: {e}");
                let base = (user - self.sizes.front) as *mut std::ffi::c_void;
                if let Err(e) = self.inner.free(base) {
                    tracing::warn!("dipu memcheck: giving a kept block back: {e}");
                }
                return None;
            }
        };
        let refilled = self.fill_guards(user, bytes, stream);
        if let Err(e) = &refilled {
            tracing::warn!("dipu memcheck: refilling a kept block's guards: {e}");
        }
        let named = dipu_memcheck::take_freed(user);
        let mut state = self.state.lock();
        state.pending.push(Pending {
            user,
            live: freed,
            copy,
            done,
            held: refilled.is_err(),
            freed: named,
        });
        if refilled.is_ok() {
            state.live.insert(user, Live::new(bytes, stream));
        }
        self.settle_now(&mut state);
        refilled.ok().map(|()| user)
    }

    /// Judges the pending copies that are back (no wait); a failure is
    /// logged.
    pub(super) fn settle_now(&self, state: &mut State) {
        if state.pending.is_empty() {
            return;
        }
        if let Err(e) = self.settle(state, false) {
            tracing::warn!("dipu memcheck: checking the guards of freed blocks: {e}");
        }
    }

    /// Reads the guards of the kept (freed) block at `user` back now, its
    /// stream being idle, and reports each overwritten side as found at the
    /// free of the allocation it served; returns how many.
    fn check_kept(&self, user: usize, freed: &mut Live) -> Result<usize> {
        thread_local! {
            /// The read-back buffer, kept between checks (no allocation
            /// per reuse).
            static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        let front = self.sizes.front;
        let total = self.total(freed.bytes);
        SCRATCH.with(|scratch| {
            let mut buf = scratch.borrow_mut();
            buf.clear();
            // The kept block is held by this allocator and its stream is
            // idle (the caller queried it), the only stream that used it:
            // the freed allocation's work on it is done.
            let (before, after) = if total <= WHOLE_BLOCK_READ {
                // SAFETY: the whole block, as above.
                unsafe { self.read_append(&[(user - front, total)], &mut buf)? };
                let (before, rest) = buf.split_at(front);
                (before, &rest[freed.bytes..])
            } else {
                let back = (user + freed.bytes, self.sizes.back);
                // SAFETY: its two guards, as above.
                unsafe { self.read_append(&[(user - front, front), back], &mut buf)? };
                buf.split_at(front)
            };
            Ok(self.judge(user, freed, [before, after], true, None))
        })
    }

    /// Keeps the freed `live` at `user` for reuse if it qualifies (small,
    /// used on its stream only, nothing reported, not poisoned, room left);
    /// else gives it back.
    pub(super) fn keep_or_give_back(
        &self,
        state: &mut State,
        user: usize,
        live: Live,
    ) -> Result<()> {
        let total = self.total(live.bytes);
        let keep = self.quarantine.is_none()
            && live.streams.is_empty()
            && live.reported == [false; 2]
            && live.bytes <= MAX_KEPT_BLOCK
            && state.reuse.bytes + total <= MAX_KEPT_BYTES;
        if !keep {
            return self.give_back(state, user, live);
        }
        state.reuse.bytes += total;
        state
            .reuse
            .by_key
            .entry((live.stream, live.bytes))
            .or_default()
            .push(user);
        Ok(())
    }

    /// Gives every kept block back (its guards copied back and checked as
    /// at a free); returns how many.
    pub(super) fn flush_kept(&self, state: &mut State) -> Result<usize> {
        let by_key = std::mem::take(&mut state.reuse.by_key);
        state.reuse.bytes = 0;
        let mut n = 0;
        let mut result = Ok(());
        for ((stream, bytes), list) in by_key {
            for user in list {
                n += 1;
                let live = Live::new(bytes, stream);
                if let Err(e) = self.give_back(state, user, live) {
                    result = result.and(Err(e));
                }
            }
        }
        result.map(|()| n)
    }
}
