//! Guarded blocks kept for reuse: a small block freed on its own stream
//! (no `record_stream`) is kept, guards and all, instead of being copied
//! back and given back to the allocator, and the next allocation of the
//! same size on that stream takes it without a refill. Its guards are
//! checked when it leaves (when the kept bytes are full, at `empty_cache`,
//! when the allocator runs out, at a check of every guard) and at the
//! free that ends its [`MAX_UNCHECKED_USES`]th allocation: then they are
//! copied back while the block waits aside, and it is kept again if they
//! are intact. So a cache-hit pair queues no device work, and one in 256
//! queues a copy, never a wait.

use std::collections::HashMap;

use dipu_deviceapi::Result;
use dipu_stream::Stream;

use super::{Guarded, Live, Pending, State};

/// The largest allocation kept (1 MiB).
pub(super) const MAX_KEPT_BLOCK: usize = 1 << 20;
/// The most bytes (with guards) kept per device (16 MiB).
pub(super) const MAX_KEPT_BYTES: usize = 16 << 20;
/// Allocations a block serves before its guards are checked at its free.
pub(super) const MAX_UNCHECKED_USES: u32 = 256;

/// A kept block: the user's pointer and the allocations it served since
/// its guards were filled.
struct Kept {
    user: usize,
    uses: u32,
}

/// The kept blocks of one device, by stream and size.
#[derive(Default)]
pub(super) struct Reuse {
    by_key: HashMap<(Stream, usize), Vec<Kept>>,
    /// Bytes (with guards) kept.
    bytes: usize,
}

impl Guarded {
    /// Takes a kept block of `bytes` on `stream`: the live allocation's
    /// user pointer, or `None`.
    pub(super) fn reuse(&self, state: &mut State, bytes: usize, stream: Stream) -> Option<usize> {
        let list = state.reuse.by_key.get_mut(&(stream, bytes))?;
        let k = list.pop()?;
        state.reuse.bytes -= self.total(bytes);
        state.live.insert(
            k.user,
            Live {
                bytes,
                stream,
                streams: Vec::new(),
                reported: [false; 2],
                uses: k.uses + 1,
            },
        );
        Some(k.user)
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
        if live.uses >= MAX_UNCHECKED_USES {
            return self.check_aside(state, user, live);
        }
        state.reuse.bytes += total;
        let kept = Kept {
            user,
            uses: live.uses,
        };
        state
            .reuse
            .by_key
            .entry((live.stream, live.bytes))
            .or_default()
            .push(kept);
        Ok(())
    }

    /// Queues the copy of the guards of the freed `live` at `user`, a kept
    /// block at the end of its uses, holding the block aside until the
    /// copy is judged ([`Guarded::after_check`]).
    fn check_aside(&self, state: &mut State, user: usize, live: Live) -> Result<()> {
        let (copy, done) = match self.copy_back(user, &live) {
            Ok(queued) => queued,
            Err(e) => {
                state.live.insert(user, live);
                return Err(e.context("copying the memory checker's guard bytes back"));
            }
        };
        state.pending.push(Pending {
            user,
            live,
            copy,
            done,
            keep: true,
        });
        self.settle(state, false).map(|_| ())
    }

    /// A block checked aside: kept again (its guards proven intact, its
    /// uses counted from 0) if `intact` and there is room, else given back
    /// to the allocator (the next allocation refills its guards).
    pub(super) fn after_check(
        &self,
        state: &mut State,
        user: usize,
        live: Live,
        intact: bool,
    ) -> Result<()> {
        let total = self.total(live.bytes);
        if intact && state.reuse.bytes + total <= MAX_KEPT_BYTES {
            state.reuse.bytes += total;
            let list = state.reuse.by_key.entry((live.stream, live.bytes));
            list.or_default().push(Kept { user, uses: 0 });
            return Ok(());
        }
        self.inner
            .free((user - self.sizes.front) as *mut std::ffi::c_void)
    }

    /// Gives every kept block back (its guards copied back and checked as
    /// at a free); returns how many.
    pub(super) fn flush_kept(&self, state: &mut State) -> Result<usize> {
        let by_key = std::mem::take(&mut state.reuse.by_key);
        state.reuse.bytes = 0;
        let mut n = 0;
        let mut result = Ok(());
        for ((stream, bytes), list) in by_key {
            for k in list {
                n += 1;
                let live = Live {
                    bytes,
                    stream,
                    streams: Vec::new(),
                    reported: [false; 2],
                    uses: k.uses,
                };
                if let Err(e) = self.give_back(state, k.user, live) {
                    result = result.and(Err(e));
                }
            }
        }
        result.map(|()| n)
    }
}
