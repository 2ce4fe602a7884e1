//! Holding a stream: a host function queued on it that waits until the
//! runner lets it go, so work queued behind it has not run yet.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dipu_diopi as diopi;
use dipu_runtime::Stream;

/// How long a [`Hold`] keeps its stream at most.
pub(crate) const HOLD_LIMIT: Duration = Duration::from_secs(1);

/// A [`Hold`]'s state: released by the runner; given way on its own.
#[derive(Default)]
struct HoldState {
    released: bool,
    gave_way: bool,
}

/// Holds a stream: a host function queued on it waits until the `Hold`
/// is released or dropped (at most [`HOLD_LIMIT`], so a library that waits
/// for that stream itself is slowed down, not deadlocked).
pub(crate) struct Hold(Arc<(Mutex<HoldState>, Condvar)>);

impl Hold {
    /// Queues the hold on `stream`.
    pub(crate) fn new(stream: Stream) -> Result<Hold, String> {
        let pair = Arc::new((Mutex::new(HoldState::default()), Condvar::new()));
        let theirs = Arc::clone(&pair);
        diopi::launch_host_func(
            stream,
            Box::new(move || {
                let (lock, cv) = &*theirs;
                let deadline = Instant::now() + HOLD_LIMIT;
                let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
                while !state.released {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        state.gave_way = true;
                        break;
                    }
                    state = cv
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }),
        )
        .map_err(|e| format!("holding a stream: {e}"))?;
        Ok(Hold(pair))
    }

    /// Lets the stream go on; whether the hold had given way already.
    pub(crate) fn release(self) -> bool {
        let (lock, cv) = &*self.0;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        state.released = true;
        cv.notify_all();
        state.gave_way
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let (lock, cv) = &*self.0;
        lock.lock().unwrap_or_else(PoisonError::into_inner).released = true;
        cv.notify_all();
    }
}
