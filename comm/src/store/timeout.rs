//! Timeouts: a store's settable timeout and deadlines that cope with
//! `Duration::MAX` (wait forever).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A store's timeout, settable through `&self`.
#[derive(Debug)]
pub(crate) struct TimeoutCell(AtomicU64);

impl TimeoutCell {
    /// A cell holding `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        TimeoutCell(AtomicU64::new(to_nanos(timeout)))
    }

    /// The timeout.
    pub(crate) fn get(&self) -> Duration {
        match self.0.load(Ordering::Relaxed) {
            u64::MAX => Duration::MAX,
            nanos => Duration::from_nanos(nanos),
        }
    }

    /// Replaces the timeout.
    pub(crate) fn set(&self, timeout: Duration) {
        self.0.store(to_nanos(timeout), Ordering::Relaxed);
    }
}

/// Nanoseconds, with `u64::MAX` for anything that long or longer (forever).
fn to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The instant `timeout` from now, or `None` for a timeout too long to
/// represent (`Duration::MAX`: never).
pub(crate) fn deadline(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// The time left until `deadline` (`Duration::MAX` when there is none).
pub(crate) fn remaining(deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(at) => at.saturating_duration_since(Instant::now()),
        None => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_round_trips_and_saturates() {
        let cell = TimeoutCell::new(Duration::from_millis(1500));
        assert_eq!(cell.get(), Duration::from_millis(1500));
        cell.set(Duration::MAX);
        assert_eq!(cell.get(), Duration::MAX);
        cell.set(Duration::ZERO);
        assert_eq!(cell.get(), Duration::ZERO);
    }

    #[test]
    fn deadlines_saturate() {
        assert_eq!(deadline(Duration::MAX), None);
        assert_eq!(remaining(None), Duration::MAX);
        assert_eq!(remaining(deadline(Duration::ZERO)), Duration::ZERO);
    }
}
