//! How host threads wait: the caller for the simulated device
//! (`DIPU_HOST_SCHEDULE`, CUDA's `cudaDeviceSchedule*` choices) and a stream
//! worker for work. A wait spins, then yields, then blocks; the schedule sets
//! how long each phase lasts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How a waiting thread uses its core, as CUDA's scheduling flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Schedule {
    /// Spin briefly, then yield, then block (the default): microsecond
    /// round trips while work flows, no CPU burnt once streams go idle.
    #[default]
    Auto,
    /// Spin while waiting: the lowest latency, a whole core per waiter.
    Spin,
    /// Yield the core to other threads between checks.
    Yield,
    /// Block on the operating system at once: the least CPU, the slowest
    /// wake-up (tens of microseconds on an idle machine).
    Block,
}

impl Schedule {
    /// Parses a `DIPU_HOST_SCHEDULE` value (`auto`, `spin`, `yield`,
    /// `block`, any case).
    pub fn parse(text: &str) -> Option<Schedule> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Schedule::Auto),
            "spin" => Some(Schedule::Spin),
            "yield" => Some(Schedule::Yield),
            "block" => Some(Schedule::Block),
            _ => None,
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Auto => "auto",
            Schedule::Spin => "spin",
            Schedule::Yield => "yield",
            Schedule::Block => "block",
        }
    }

    /// How long a waiter spins and then yields before it blocks.
    pub(crate) fn phases(self, who: Waiter) -> Phases {
        // A stream worker with nothing queued keeps watching for a while
        // (the next operation of a busy caller comes within microseconds),
        // but never for long: an idle stream costs no CPU. A caller waiting
        // for the device watches longer, as CUDA's spin and yield modes do,
        // since it has nothing else to do.
        let (spin, yields) = match (self, who) {
            (Schedule::Auto, Waiter::Caller) => (50, 2_000),
            (Schedule::Auto, Waiter::Worker) => (50, 500),
            (Schedule::Spin, Waiter::Caller) => (u64::MAX, 0),
            (Schedule::Spin, Waiter::Worker) => (10_000, 0),
            (Schedule::Yield, Waiter::Caller) => (0, u64::MAX),
            (Schedule::Yield, Waiter::Worker) => (0, 10_000),
            (Schedule::Block, _) => (0, 0),
        };
        Phases {
            spin: Duration::from_micros(spin),
            yields: Duration::from_micros(yields),
        }
    }
}

/// Who waits: it sets how long a wait watches before it blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A thread calling the vendor (synchronize, a synchronous copy).
    Caller,
    /// A stream worker with nothing queued, or waiting for another
    /// stream's event.
    Worker,
}

/// The phases of one wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Phases {
    spin: Duration,
    yields: Duration,
}

impl Phases {
    /// Watches `ready` through the spin and yield phases; `true` as soon as
    /// it holds, `false` when the caller should block.
    pub(crate) fn watch(&self, mut ready: impl FnMut() -> bool) -> bool {
        if ready() {
            return true;
        }
        if self.spin.is_zero() && self.yields.is_zero() {
            return false;
        }
        let start = Instant::now();
        let spin_until = start.checked_add(self.spin);
        loop {
            for _ in 0..64 {
                if ready() {
                    return true;
                }
                std::hint::spin_loop();
            }
            if spin_until.is_some_and(|t| Instant::now() >= t) {
                break;
            }
            if spin_until.is_none() {
                continue; // spin without end
            }
        }
        let yield_until = start.checked_add(self.spin.saturating_add(self.yields));
        loop {
            if ready() {
                return true;
            }
            std::thread::yield_now();
            if yield_until.is_some_and(|t| Instant::now() >= t) {
                return ready();
            }
        }
    }
}

/// A condition that threads wait for and one side signals: the watch
/// phases read it lock-free, the blocking phase sleeps on a condition
/// variable that is touched only when someone sleeps.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Signal {
    /// Waits until `ready` holds. `ready` must read state that the signalling
    /// side changes (with `SeqCst` or `Release`) before calling
    /// [`Signal::notify`].
    pub(crate) fn wait(&self, phases: Phases, ready: impl Fn() -> bool) {
        if phases.watch(&ready) {
            return;
        }
        let mut guard = self.lock.lock();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        while !ready() {
            self.wake.wait(&mut guard);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes every blocked waiter; costs one atomic load when none sleeps.
    pub(crate) fn notify(&self) {
        // Pairs with the waiter's increment-then-check: either the waiter
        // sees the new state, or this load sees the waiter, whose lock we
        // then take, so the wake cannot fall between its check and its sleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            drop(self.lock.lock());
            self.wake.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn parses_every_schedule_in_any_case() {
        for s in [
            Schedule::Auto,
            Schedule::Spin,
            Schedule::Yield,
            Schedule::Block,
        ] {
            assert_eq!(Schedule::parse(s.name()), Some(s));
            assert_eq!(Schedule::parse(&s.name().to_uppercase()), Some(s));
        }
        assert_eq!(Schedule::parse("fast"), None);
    }

    #[test]
    fn every_schedule_sees_a_signal_from_another_thread() {
        for s in [
            Schedule::Auto,
            Schedule::Spin,
            Schedule::Yield,
            Schedule::Block,
        ] {
            for who in [Waiter::Caller, Waiter::Worker] {
                let signal = Arc::new(Signal::default());
                let flag = Arc::new(AtomicBool::new(false));
                let setter = {
                    let (signal, flag) = (Arc::clone(&signal), Arc::clone(&flag));
                    std::thread::spawn(move || {
                        // Long enough that `auto` and `block` reach their
                        // blocking phase.
                        std::thread::sleep(Duration::from_millis(20));
                        flag.store(true, Ordering::SeqCst);
                        signal.notify();
                    })
                };
                signal.wait(s.phases(who), || flag.load(Ordering::SeqCst));
                assert!(flag.load(Ordering::SeqCst), "{s:?} {who:?}");
                setter.join().unwrap();
            }
        }
    }

    #[test]
    fn block_does_not_watch_and_auto_stops_watching() {
        let never = || false;
        assert!(!Schedule::Block.phases(Waiter::Caller).watch(never));
        // Returns (false) once its spin and yield phases are over.
        assert!(!Schedule::Auto.phases(Waiter::Worker).watch(never));
        assert!(Schedule::Spin.phases(Waiter::Caller).watch(|| true));
    }
}
