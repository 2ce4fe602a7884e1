//! The watchdog: a thread per group that settles finished work and turns
//! overdue or failed work into an abort of the group, so no rank hangs.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::{Condvar, Mutex};

use super::Inner;

/// Stops and joins the watchdog when the group goes.
#[derive(Debug)]
pub(crate) struct Handle {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Handle {
    /// Stops the thread; joins it unless called from the thread itself
    /// (which may drop the group's last reference).
    pub(crate) fn stop(mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

/// How often the watchdog looks: often enough to fail a timeout within a
/// tenth of it, never busier than once a millisecond or idler than 100 ms.
fn interval(timeout: Duration) -> Duration {
    (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

/// Starts the watchdog of `group`.
pub(crate) fn spawn(group: Weak<Inner>) -> Result<Handle> {
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let every = group
        .upgrade()
        .map_or(Duration::from_millis(100), |g| interval(g.options.timeout));
    let thread = std::thread::Builder::new()
        .name("dipu-comm-watchdog".into())
        .spawn({
            let stop = Arc::clone(&stop);
            move || loop {
                {
                    let mut stopped = stop.0.lock();
                    if *stopped {
                        return;
                    }
                    stop.1.wait_for(&mut stopped, every);
                    if *stopped {
                        return;
                    }
                }
                let Some(group) = group.upgrade() else { return };
                group.check_pending();
            }
        })
        .map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot start the process group's watchdog thread: {e}"),
            )
        })?;
    Ok(Handle {
        stop,
        thread: Some(thread),
    })
}
