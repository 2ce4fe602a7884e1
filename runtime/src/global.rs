//! The process-global runtime: `init`, `get`, `shutdown`.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dipu_allocator::{ThreadState, ThreadView};
use dipu_deviceapi::{Error, Result};
use parking_lot::RwLock;

use crate::{Runtime, RuntimeOptions, ShutdownReport};

static GLOBAL: RwLock<Option<Arc<Runtime>>> = RwLock::new(None);

/// A seed for every device's default generator, given by
/// [`manual_seed_all`] before the global runtime existed: applied when it
/// is created.
static PENDING_SEED: parking_lot::Mutex<Option<u64>> = parking_lot::Mutex::new(None);

/// Bumped (under `GLOBAL`'s write lock) whenever `GLOBAL` changes, so a
/// thread's copy of the runtime knows whether it is still the global one.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// This thread's view of the global runtime, kept in the allocation
/// path's thread state (`ThreadView`: which runtime it last used, of which
/// generation, and how many `with` calls of the thread are running), so
/// that a C ABI allocation reads one thread-local.
type Lent = ThreadView;

/// What the view is when the thread holds no runtime.
const NONE: Lent = ThreadView::NONE;

/// The `Arc` behind a thread's view; when it goes (the thread ends), so
/// does the view.
struct Held(Option<Arc<Runtime>>);

impl Drop for Held {
    fn drop(&mut self) {
        // Fails when the thread state went first: nobody reads it then.
        let _ = ThreadState::with(|ts| {
            let cell = ts.view();
            cell.set(Lent {
                depth: cell.get().depth,
                ..NONE
            });
        });
    }
}

std::thread_local! {
    /// Keeps the view's runtime alive; replaced only when no `with` of the
    /// thread runs.
    static HELD: RefCell<Held> = const { RefCell::new(Held(None)) };
}

/// Counts a running `with` of this thread (in its view) until dropped.
struct Depth<'a>(&'a Cell<Lent>);

impl<'a> Depth<'a> {
    #[inline]
    fn enter(cell: &'a Cell<Lent>) -> Depth<'a> {
        let mut l = cell.get();
        l.depth += 1;
        cell.set(l);
        Depth(cell)
    }
}

impl Drop for Depth<'_> {
    #[inline]
    fn drop(&mut self) {
        let mut l = self.0.get();
        l.depth -= 1;
        self.0.set(l);
    }
}

/// Makes every thread's view stale (bumps the generation without
/// touching `GLOBAL`): called in a forked child.
pub(crate) fn invalidate_views() {
    GENERATION.fetch_add(1, Ordering::Release);
}

/// Sets the global runtime (the write lock held) and bumps the generation.
fn publish(global: &mut Option<Arc<Runtime>>, rt: Option<Arc<Runtime>>) -> Option<Arc<Runtime>> {
    if let Some(rt) = &rt {
        if let Some(seed) = PENDING_SEED.lock().take() {
            rt.generators().manual_seed_all(seed);
        }
        crate::fork::note_created();
    } else {
        crate::fork::note_shutdown();
    }
    let old = std::mem::replace(global, rt);
    GENERATION.fetch_add(1, Ordering::Release);
    old
}

/// Runs `f` on the process-global runtime (created from the environment
/// on first use, as [`get`] does) and returns what it returns: the path
/// every hot C ABI call takes. No lock and no reference count is touched
/// when the thread called `with` before and the global runtime has not
/// changed since: each thread keeps an `Arc` of the runtime it last used,
/// checked against a generation counter that only [`init`], [`get`] and
/// [`shutdown`] change. (So after [`shutdown`] a thread's `Arc` keeps the
/// old runtime alive until the thread's next call or its end.)
#[inline]
pub fn with<R>(f: impl FnOnce(&Runtime) -> Result<R>) -> Result<R> {
    let mut f = Some(f);
    let done = ThreadState::with(|ts| {
        let f = f.take().expect("taken once");
        with_in(ts, |rt, _| f(rt))
    });
    match (done, f) {
        (Some(result), _) => result,
        // The thread is ending: no view to keep.
        (None, Some(f)) => f(&current()?.1),
        (None, None) => unreachable!("`f` is taken only when the closure ran"),
    }
}

/// [`with`] that also hands `f` this thread's allocation-path state, for
/// the allocators' hit paths ([`Runtime::allocate_cached_in`]): one
/// thread-local read for both. `None` (and `f` not run) while the thread
/// ends.
#[inline]
pub fn with_current<R>(f: impl FnOnce(&Runtime, &ThreadState) -> Result<R>) -> Option<Result<R>> {
    ThreadState::with(|ts| with_in(ts, f))
}

/// `with` on this thread's state `ts`.
#[inline]
fn with_in<R>(ts: &ThreadState, f: impl FnOnce(&Runtime, &ThreadState) -> Result<R>) -> Result<R> {
    let cell = ts.view();
    let lent = cell.get();
    if lent.generation == GENERATION.load(Ordering::Acquire) && !lent.ptr.is_null() {
        let _depth = Depth::enter(cell);
        // SAFETY: `lent.ptr` is the runtime of the `Arc` in this thread's
        // `HELD` (set together in `with_slow`, cleared when `HELD` is
        // dropped), which is replaced only while no `with` of this thread
        // runs (depth 0), so it outlives this call.
        return f(unsafe { &*lent.ptr.cast::<Runtime>() }, ts);
    }
    with_slow(cell, |rt| f(rt, ts))
}

/// `with` when the thread's view is stale: the global runtime (made if
/// there is none), kept for the thread's next calls.
#[cold]
fn with_slow<R>(cell: &Cell<Lent>, f: impl FnOnce(&Runtime) -> Result<R>) -> Result<R> {
    let (generation, rt) = current()?;
    if cell.get().depth == 0 {
        // Fails only while the thread ends: then nothing is kept.
        let _ = HELD.try_with(|held| {
            if let Ok(mut held) = held.try_borrow_mut() {
                cell.set(NONE);
                held.0 = Some(Arc::clone(&rt));
                cell.set(Lent {
                    generation,
                    ptr: Arc::as_ptr(&rt).cast(),
                    depth: 0,
                });
            }
        });
    }
    let _depth = Depth::enter(cell);
    f(&rt)
}

/// The global runtime (created if there is none) and its generation.
#[cold]
fn current() -> Result<(u64, Arc<Runtime>)> {
    crate::fork::check()?;
    if let Some(rt) = GLOBAL.read().as_ref() {
        return Ok((GENERATION.load(Ordering::Acquire), Arc::clone(rt)));
    }
    let rt = get()?;
    let global = GLOBAL.read();
    match global.as_ref() {
        Some(now) if Arc::ptr_eq(now, &rt) => Ok((GENERATION.load(Ordering::Acquire), rt)),
        // Shut down or replaced meanwhile: this call still gets the runtime
        // `get` made, but the thread does not keep it.
        _ => Ok((u64::MAX, rt)),
    }
}

/// Creates the process-global runtime from `options` (unset fields from
/// the environment). An `InvalidArgument` error if there already is one
/// (made by `init` or by a [`get`]): call [`shutdown`] first.
pub fn init(options: RuntimeOptions) -> Result<Arc<Runtime>> {
    crate::fork::check()?;
    let mut global = GLOBAL.write();
    if let Some(rt) = global.as_ref() {
        return Err(Error::invalid_argument(format!(
            "the dipu runtime is already initialised (vendor `{}`, {}, device allocator {}): \
             call dipu_runtime::shutdown() first to initialise it again with other options",
            rt.vendor_name(),
            rt.vendor_origin(),
            rt.algorithm()
        )));
    }
    let rt = Runtime::new(options)?;
    publish(&mut global, Some(Arc::clone(&rt)));
    Ok(rt)
}

/// The process-global runtime, created from the environment on first use.
/// Thread-safe: racing first calls get the same runtime. A failed creation
/// is returned (and tried again on the next call). In a child forked after
/// the runtime was created, every call fails at once (see
/// [`is_in_bad_fork`](crate::is_in_bad_fork)).
pub fn get() -> Result<Arc<Runtime>> {
    crate::fork::check()?;
    if let Some(rt) = GLOBAL.read().as_ref() {
        return Ok(Arc::clone(rt));
    }
    let mut global = GLOBAL.write();
    if let Some(rt) = global.as_ref() {
        return Ok(Arc::clone(rt));
    }
    let rt = Runtime::new(RuntimeOptions::from_env())?;
    publish(&mut global, Some(Arc::clone(&rt)));
    Ok(rt)
}

/// Whether there is a process-global runtime now (false in a bad fork:
/// the parent's is unusable there).
pub fn is_initialized() -> bool {
    !crate::fork::is_in_bad_fork() && GLOBAL.read().is_some()
}

/// Removes the process-global runtime, then synchronizes every device,
/// empties every allocator cache and the pinned cache, and reports (and
/// logs) what is still live: see [`Runtime::release_and_report`]. Without
/// a runtime it reports nothing (`was_initialized` false). Afterwards
/// [`get`] creates a new runtime; `Arc`s and buffers of the old one keep it
/// alive and usable, but its streams and pointers are foreign to the new one.
pub fn shutdown() -> Result<ShutdownReport> {
    crate::fork::check()?;
    let Some(rt) = publish(&mut GLOBAL.write(), None) else {
        return Ok(ShutdownReport::default());
    };
    let report = rt.release_and_report();
    tracing::debug!(clean = report.is_clean(), "dipu runtime shut down");
    Ok(report)
}

/// The number of devices without creating the global runtime: the global
/// runtime's count when there is one, else the count of the vendor the
/// environment names, loaded once just to ask (for the built-in host
/// vendor that starts no thread and touches no device state, so a child
/// forked afterwards can still create its runtime). A machine without
/// devices counts 0.
pub fn device_count_without_init() -> Result<i32> {
    static PROBED: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    if !crate::fork::is_in_bad_fork() {
        if let Some(rt) = GLOBAL.read().as_ref() {
            return Ok(rt.device_count());
        }
    }
    if let Some(n) = PROBED.get() {
        return Ok(*n);
    }
    let spec = RuntimeOptions::from_env().resolve()?.vendor;
    let vendor = crate::runtime::loader().load(&spec)?;
    let n = match vendor.api.device_count() {
        Ok(n) => n,
        Err(e) if e.kind() == dipu_deviceapi::ErrorKind::NoDevice => 0,
        Err(e) => return Err(e),
    };
    Ok(*PROBED.get_or_init(|| n))
}

/// Seeds every device's default generator of the global runtime with
/// `seed`; without a global runtime, creates none and remembers the seed
/// for the runtime created next (as torch.cuda queues its seeding), so a
/// process that only seeded can still fork children that use dipu.
pub fn manual_seed_all(seed: u64) -> Result<()> {
    crate::fork::check()?;
    // The read lock keeps a creation (write lock) from racing the store.
    let global = GLOBAL.read();
    match global.as_ref() {
        Some(rt) => rt.generators().manual_seed_all(seed),
        None => *PENDING_SEED.lock() = Some(seed),
    }
    Ok(())
}
