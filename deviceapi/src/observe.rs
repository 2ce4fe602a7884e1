//! One "an observer is on" flag for the allocation hot paths.
//!
//! The memory checker and the runtime trace (process-wide) and the memory
//! history (one per runtime) each see every allocate and free while they
//! are on; the cache-hit paths step aside for them. Instead of loading each
//! one's own switch on every allocate and free, a runtime's hit paths load
//! its one [`Flag`], which the observers keep up to date as they are
//! switched on and off: a process-wide observer updates every live flag, a
//! runtime's own observer only that runtime's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// How many observers are on for one runtime.
#[derive(Debug)]
pub struct Flag {
    on: AtomicUsize,
}

/// The process-wide observers that are on, and every flag made.
struct Registry {
    on: usize,
    flags: Vec<Weak<Flag>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    on: 0,
    flags: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // The registry holds counts only; a panic elsewhere leaves them valid.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Flag {
    /// A flag for a new runtime, on when a process-wide observer is.
    pub fn new() -> Arc<Flag> {
        let mut r = registry();
        let flag = Arc::new(Flag {
            on: AtomicUsize::new(r.on),
        });
        r.flags.retain(|f| f.strong_count() > 0);
        r.flags.push(Arc::downgrade(&flag));
        flag
    }

    /// Whether any observer is on: one relaxed load.
    #[inline(always)]
    pub fn any_on(&self) -> bool {
        self.on.load(Ordering::Relaxed) != 0
    }

    /// This runtime's own observer went from `was_on` to `now_on` (nothing
    /// when equal). The observer passes the state it swapped out, so that
    /// two threads switching it at once count once.
    pub fn switched(&self, was_on: bool, now_on: bool) {
        match (was_on, now_on) {
            (false, true) => {
                self.on.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                self.on.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// A process-wide observer went from `was_on` to `now_on`: every live
/// flag, and those made from now on, count it.
pub fn switched_global(was_on: bool, now_on: bool) {
    if was_on == now_on {
        return;
    }
    let mut r = registry();
    if now_on {
        r.on += 1;
    } else {
        r.on -= 1;
    }
    r.flags.retain(|f| match f.upgrade() {
        Some(flag) => {
            flag.switched(was_on, now_on);
            true
        }
        None => false,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_their_own_and_the_global_observers() {
        // The only test of this crate that switches an observer.
        let a = Flag::new();
        let b = Flag::new();
        assert!(!a.any_on() && !b.any_on());
        a.switched(false, true);
        a.switched(true, true);
        assert!(a.any_on(), "a's own observer");
        assert!(!b.any_on(), "a's observer is not b's");
        switched_global(false, true);
        assert!(b.any_on(), "a global observer counts for every flag");
        let c = Flag::new();
        assert!(c.any_on(), "and for flags made while it is on");
        a.switched(true, false);
        assert!(a.any_on(), "the global one is still on");
        switched_global(true, false);
        assert!(!a.any_on() && !b.any_on() && !c.any_on());
        switched_global(false, false);
        assert!(!c.any_on());
        drop(b);
        switched_global(false, true);
        assert!(a.any_on() && c.any_on(), "a dropped flag is skipped");
        switched_global(true, false);
        assert!(!a.any_on());
    }
}
