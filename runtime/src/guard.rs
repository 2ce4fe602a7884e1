//! Guard bytes around device allocations (`DIPU_MEM_CHECK_GUARD_BYTES`):
//! a wrapper around each device allocator that asks for the guards on top
//! of every request, fills them with [`GUARD_PATTERN`] on the allocation's
//! stream, and at free holds the block back until the work queued on its
//! streams has passed, copies the guards back, has the memory checker judge
//! them, and only then gives the block to the allocator.
//!
//! Only runtimes created with the checker on and guards asked for use it:
//! without guards the allocators are not wrapped and their path is
//! unchanged.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use dipu_allocator::{
    Algorithm, Allocation, AllocatorWrapper, DeviceAllocator, DeviceStats, LiveBlock, Snapshot,
};
use dipu_deviceapi::{CopyKind, Error, Result};
use dipu_memcheck::{GuardViolation, Side, GUARD_PATTERN};
use dipu_stream::{DeviceContext, DeviceGuard, PooledEvent, Stream};
use parking_lot::Mutex;

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
}

/// A freed allocation waiting for its streams before its guards are checked.
struct Pending {
    user: usize,
    live: Live,
    events: Vec<PooledEvent>,
}

#[derive(Default)]
struct State {
    live: HashMap<usize, Live>,
    pending: Vec<Pending>,
}

/// One device's guarded allocator: the shared part, also held by the
/// runtime's list for [`crate::Runtime::check_guards`].
pub(crate) struct Guarded {
    inner: Box<dyn DeviceAllocator>,
    ctx: &'static DeviceContext,
    sizes: GuardSizes,
    state: Mutex<State>,
}

/// The guarded allocators a runtime made, for checks of every live guard.
pub(crate) type GuardList = Arc<Mutex<Vec<Arc<Guarded>>>>;

/// The wrapper that guards each allocator of `ctx` and lists it in `list`.
pub(crate) fn wrapper(
    ctx: &'static DeviceContext,
    sizes: GuardSizes,
    list: GuardList,
) -> AllocatorWrapper {
    Arc::new(move |_device, inner| {
        let g = Arc::new(Guarded {
            inner,
            ctx,
            sizes,
            state: Mutex::default(),
        });
        list.lock().push(Arc::clone(&g));
        Box::new(Handle(g))
    })
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

    /// Copies `bytes` of device memory at `addr` back to the host.
    fn read(&self, addr: usize, bytes: usize) -> Result<Vec<u8>> {
        let mut host = vec![0u8; bytes];
        let _g = DeviceGuard::new(self.ctx, self.device())?;
        // SAFETY: `addr..addr + bytes` lies inside a block this allocator
        // holds (a guard), and `host` has room for `bytes` bytes.
        unsafe {
            self.ctx.api().memcpy(
                host.as_mut_ptr().cast(),
                addr as *const c_void,
                bytes,
                CopyKind::DeviceToHost,
            )?
        };
        Ok(host)
    }

    /// Copies both guards of the allocation at `user` back and reports
    /// each overwritten side not reported yet; returns how many it reported.
    fn check(&self, user: usize, live: &mut Live, at_free: bool) -> Result<usize> {
        let GuardSizes { front, back } = self.sizes;
        let mut found = 0;
        for (side, addr, len) in [
            (Side::Before, user - front, front),
            (Side::After, user + live.bytes, back),
        ] {
            if len == 0 || live.reported[side_index(side)] {
                continue;
            }
            let guard = self.read(addr, len)?;
            let v = GuardViolation {
                ptr: user,
                size: live.bytes,
                device: self.device(),
                stream: live.stream.id(),
                side,
                guard,
                at_free,
            };
            if dipu_memcheck::on_guard_violation(&v) {
                live.reported[side_index(side)] = true;
                found += 1;
            }
        }
        Ok(found)
    }

    /// Checks and releases the pending frees whose streams have passed
    /// (every pending free, after waiting, when `wait`); returns the
    /// violations reported.
    fn settle(&self, state: &mut State, wait: bool) -> Result<usize> {
        let mut found = 0;
        let mut i = 0;
        while i < state.pending.len() {
            let p = &state.pending[i];
            let ready = if wait {
                p.events.iter().try_for_each(PooledEvent::synchronize)?;
                true
            } else {
                let mut all = true;
                for e in &p.events {
                    all &= e.query()?;
                }
                all
            };
            if !ready {
                i += 1;
                continue;
            }
            let mut p = state.pending.swap_remove(i);
            found += self.check(p.user, &mut p.live, true)?;
            self.inner
                .free((p.user - self.sizes.front) as *mut c_void)?;
        }
        Ok(found)
    }

    /// Checks every pending free (after waiting for its streams) and every
    /// live allocation (after synchronizing the device); returns the
    /// violations reported.
    pub(crate) fn check_all(&self) -> Result<usize> {
        self.ctx.synchronize_device(self.device())?;
        let mut state = self.state.lock();
        let mut found = self.settle(&mut state, true)?;
        let users: Vec<usize> = state.live.keys().copied().collect();
        for user in users {
            if let Some(mut live) = state.live.remove(&user) {
                let r = self.check(user, &mut live, false);
                state.live.insert(user, live);
                found += r?;
            }
        }
        Ok(found)
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
        let a = g.inner.allocate(total, stream)?;
        let base = a.ptr as usize;
        let user = base + front;
        let filled = (|| {
            let _d = DeviceGuard::new(g.ctx, a.device)?;
            for (addr, len) in [(base, front), (user + bytes, back)] {
                if len > 0 {
                    // SAFETY: `addr..addr + len` lies inside the block just
                    // allocated (`total` bytes from `base`), which nobody
                    // else has yet.
                    unsafe {
                        g.ctx.api().memset_async(
                            addr as *mut c_void,
                            GUARD_PATTERN,
                            len,
                            stream.raw(),
                        )?
                    };
                }
            }
            Ok::<(), Error>(())
        })();
        if let Err(e) = filled {
            let _ = g.inner.free(a.ptr);
            return Err(e.context("filling the memory checker's guard bytes"));
        }
        let mut state = g.state.lock();
        if !state.pending.is_empty() {
            // A failed check is logged; the allocation stands.
            if let Err(e) = g.settle(&mut state, false) {
                tracing::warn!("dipu memcheck: checking the guards of freed blocks: {e}");
            }
        }
        state.live.insert(
            user,
            Live {
                bytes,
                stream,
                streams: Vec::new(),
                reported: [false; 2],
            },
        );
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
        let mut events = Vec::with_capacity(1 + live.streams.len());
        let recorded = std::iter::once(&live.stream)
            .chain(&live.streams)
            .try_for_each(|s| {
                let e = g.ctx.pooled_event(s.device())?;
                e.record(s)?;
                events.push(e);
                Ok::<(), Error>(())
            });
        if let Err(e) = recorded {
            state.live.insert(user, live);
            return Err(e);
        }
        state.pending.push(Pending { user, live, events });
        g.settle(&mut state, false).map(|_| ())
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
        g.settle(&mut g.state.lock(), true)?;
        g.inner.empty_cache()
    }

    fn stats(&self) -> DeviceStats {
        self.0.inner.stats()
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
