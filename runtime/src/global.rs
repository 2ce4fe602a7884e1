//! The process-global runtime: `init`, `get`, `shutdown`.

use std::sync::Arc;

use dipu_deviceapi::{Error, Result};
use parking_lot::RwLock;

use crate::{Runtime, RuntimeOptions, ShutdownReport};

static GLOBAL: RwLock<Option<Arc<Runtime>>> = RwLock::new(None);

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
    *global = Some(Arc::clone(&rt));
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
    *global = Some(Arc::clone(&rt));
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
    let Some(rt) = GLOBAL.write().take() else {
        return Ok(ShutdownReport::default());
    };
    let report = rt.release_and_report();
    tracing::debug!(clean = report.is_clean(), "dipu runtime shut down");
    Ok(report)
}
