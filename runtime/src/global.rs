//! The process-global runtime: `init`, `get`, `shutdown`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dipu_deviceapi::{Error, Result};
use parking_lot::RwLock;

use crate::{Runtime, RuntimeOptions, ShutdownReport};

static GLOBAL: RwLock<Option<Arc<Runtime>>> = RwLock::new(None);

/// Bumped (under `GLOBAL`'s write lock) whenever `GLOBAL` changes, so a
/// thread's copy of the runtime knows whether it is still the global one.
static GENERATION: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// This thread's copy of the global runtime and its generation.
    static CACHED: RefCell<Option<(u64, Arc<Runtime>)>> = const { RefCell::new(None) };
}

/// Sets the global runtime (the write lock held) and bumps the generation.
fn publish(global: &mut Option<Arc<Runtime>>, rt: Option<Arc<Runtime>>) -> Option<Arc<Runtime>> {
    let old = std::mem::replace(global, rt);
    GENERATION.fetch_add(1, Ordering::Release);
    old
}

/// Runs `f` on the process-global runtime (created from the environment
/// on first use, as [`get`] does) and returns what it returns: the path
/// every C ABI call takes. No lock and no reference count is touched when
/// the thread ran `with` before and the global runtime has not changed
/// since: each thread keeps a copy of the `Arc`, checked against a
/// generation counter that only [`init`], [`get`] and [`shutdown`] change.
/// (So after [`shutdown`] a thread's copy keeps the old runtime alive
/// until the thread's next call or its end.)
#[inline]
pub fn with<R>(f: impl FnOnce(&Arc<Runtime>) -> R) -> Result<R> {
    let mut f = Some(f);
    let hit = CACHED
        .try_with(|cell| {
            let cached = cell.try_borrow().ok()?;
            let (generation, rt) = cached.as_ref()?;
            if *generation != GENERATION.load(Ordering::Acquire) {
                return None;
            }
            f.take().map(|f| f(rt))
        })
        .ok()
        .flatten();
    if let Some(result) = hit {
        return Ok(result);
    }
    let (generation, rt) = current()?;
    // Fails only while the thread ends, or inside `f` of an outer `with`.
    let _ = CACHED.try_with(|cell| {
        if let Ok(mut cached) = cell.try_borrow_mut() {
            *cached = Some((generation, Arc::clone(&rt)));
        }
    });
    let f = f
        .take()
        .ok_or_else(|| Error::new(dipu_deviceapi::ErrorKind::Internal, "with: ran twice"))?;
    Ok(f(&rt))
}

/// The global runtime (created if there is none) and its generation.
#[cold]
fn current() -> Result<(u64, Arc<Runtime>)> {
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
/// is returned (and tried again on the next call).
pub fn get() -> Result<Arc<Runtime>> {
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

/// Whether there is a process-global runtime now.
pub fn is_initialized() -> bool {
    GLOBAL.read().is_some()
}

/// Removes the process-global runtime, then synchronizes every device,
/// empties every allocator cache and the pinned cache, and reports (and
/// logs) what is still live: see [`Runtime::release_and_report`]. Without
/// a runtime it reports nothing (`was_initialized` false). Afterwards
/// [`get`] creates a new runtime; `Arc`s and buffers of the old one keep it
/// alive and usable, but its streams and pointers are foreign to the new one.
pub fn shutdown() -> Result<ShutdownReport> {
    let Some(rt) = publish(&mut GLOBAL.write(), None) else {
        return Ok(ShutdownReport::default());
    };
    let report = rt.release_and_report();
    tracing::debug!(clean = report.is_clean(), "dipu runtime shut down");
    Ok(report)
}
