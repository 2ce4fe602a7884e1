//! Poisoned, quarantined frees (`DIPU_MEM_CHECK_POISON=1`): a freed block
//! is filled with [`POISON_PATTERN`] on its stream (after the copy of its
//! guards, so after the work of the streams that used it) and held back
//! from the allocator, oldest first, while the quarantine holds at most its
//! bytes. A block leaving it (or checked by `check_all`) is copied back
//! and any byte that is no longer poison is reported as a write after
//! free, with the free's backtrace.

use std::ffi::c_void;

use dipu_deviceapi::{Error, Result};
use dipu_memcheck::{PoisonViolation, POISON_PATTERN};
use dipu_stream::{DeviceGuard, PooledEvent, Stream};

use super::{Guarded, Live, State};

/// A freed block held back from reuse.
pub(super) struct Quarantined {
    /// The user's pointer and size.
    user: usize,
    bytes: usize,
    stream: Stream,
    /// Recorded on the allocation's stream after the poison fill.
    poisoned: PooledEvent,
    /// Whether a write after free was reported already.
    reported: bool,
}

impl Quarantined {
    /// The user's pointer.
    pub(super) fn user(&self) -> usize {
        self.user
    }
}

impl Guarded {
    /// With poison on, queues the fill of the freed allocation's bytes on
    /// its stream and returns it for the quarantine, unless it is larger
    /// than the whole quarantine (then it is poisoned and given back at
    /// once). A failure to queue is logged and the block given back.
    pub(super) fn poison(&self, user: usize, live: &Live) -> Option<Quarantined> {
        let limit = self.quarantine?;
        let queued = (|| {
            let _g = DeviceGuard::new(self.ctx, self.device())?;
            if live.bytes > 0 {
                // SAFETY: `user..user + bytes` is the allocation being
                // freed, inside a block the allocator still holds (it goes
                // back only after this fill, by stream order or from the
                // quarantine).
                unsafe {
                    self.ctx.api().memset_async(
                        user as *mut c_void,
                        POISON_PATTERN,
                        live.bytes,
                        live.stream.raw(),
                    )?
                };
            }
            let poisoned = self.ctx.pooled_event(self.device())?;
            poisoned.record(&live.stream)?;
            Ok::<_, Error>(poisoned)
        })();
        match queued {
            Ok(poisoned) if self.total(live.bytes) <= limit => Some(Quarantined {
                user,
                bytes: live.bytes,
                stream: live.stream,
                poisoned,
                reported: false,
            }),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!("dipu memcheck: poisoning a freed block: {e}");
                None
            }
        }
    }

    /// Puts `q` in the quarantine and lets the oldest blocks out while it
    /// holds more than its bytes.
    pub(super) fn hold(&self, state: &mut State, q: Quarantined) -> Result<()> {
        let limit = self.quarantine.unwrap_or(0);
        dipu_memcheck::keep(q.user);
        state.held += self.total(q.bytes);
        state.quarantine.push_back(q);
        let mut result = Ok(());
        while state.held > limit {
            let Some(old) = state.quarantine.pop_front() else {
                break;
            };
            let r = self.release(state, old);
            result = result.and(r.map(|_| ()));
        }
        result
    }

    /// Checks the poison of `q` now (waiting for its fill): reports a
    /// write after free once; returns whether it reported one.
    fn check_poison(&self, q: &mut Quarantined, leaving: bool) -> Result<bool> {
        q.poisoned.synchronize()?;
        if q.reported || q.bytes == 0 {
            return Ok(false);
        }
        // SAFETY: the quarantined block is held by this allocator, and its
        // poison fill, the last work queued on it, is done (synchronised
        // above).
        let bytes = unsafe { self.read(q.user, q.bytes)? };
        if intact(&bytes) {
            return Ok(false);
        }
        let v = PoisonViolation {
            ptr: q.user,
            device: self.device(),
            stream: q.stream.id(),
            bytes,
            leaving,
        };
        q.reported = dipu_memcheck::on_poison_violation(&v);
        Ok(q.reported)
    }

    /// Lets `q` out of the quarantine: checks its poison and gives the
    /// block back to the allocator (also when the check failed); returns
    /// whether a violation was reported.
    fn release(&self, state: &mut State, mut q: Quarantined) -> Result<bool> {
        state.held -= self.total(q.bytes);
        let checked = self.check_poison(&mut q, true);
        // The guards' copy, queued before the fill, is done too: judge it
        // while the checker still keeps the free's record.
        let settled = self.settle(state, false);
        dipu_memcheck::release(q.user);
        self.inner
            .free((q.user - self.sizes.front) as *mut c_void)?;
        settled?;
        checked
    }

    /// Checks the poison of every quarantined block, keeping them; returns
    /// the violations reported.
    pub(super) fn check_quarantine(&self, state: &mut State) -> Result<usize> {
        let mut found = 0;
        for q in state.quarantine.iter_mut() {
            found += usize::from(self.check_poison(q, false)?);
        }
        Ok(found)
    }

    /// Lets every block out of the quarantine (checked); returns how many
    /// left.
    pub(super) fn flush(&self, state: &mut State) -> Result<usize> {
        let n = state.quarantine.len();
        let mut result = Ok(n);
        while let Some(q) = state.quarantine.pop_front() {
            let r = self.release(state, q);
            if let Err(e) = r {
                result = result.and(Err(e));
            }
        }
        result
    }
}

/// Whether every byte is the poison: compared a page at a time (a
/// `memcmp`), as blocks of many MiB come back.
fn intact(bytes: &[u8]) -> bool {
    static PAGE: [u8; 4096] = [POISON_PATTERN; 4096];
    bytes.chunks(PAGE.len()).all(|c| c == &PAGE[..c.len()])
}
