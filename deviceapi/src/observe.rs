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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// How many observers are on for one runtime. It lives in the runtime
/// itself (one load on the hot path, no pointer to follow); the runtime
/// registers with [`register`] to hear of the process-wide observers.
#[derive(Debug, Default)]
pub struct Flag {
    on: AtomicUsize,
}

/// What holds a [`Flag`] (a runtime).
pub trait Observed: Send + Sync {
    /// The flag its hot paths load.
    fn observer_flag(&self) -> &Flag;
}

/// The process-wide observers that are on, and every holder registered.
struct Registry {
    on: usize,
    holders: Vec<Weak<dyn Observed>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    on: 0,
    holders: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    // The registry holds counts only; a panic elsewhere leaves them valid.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Flag {
    /// Whether any observer is on: one relaxed load.
    #[inline(always)]
    pub fn any_on(&self) -> bool {
        self.on.load(Ordering::Relaxed) != 0
    }

    /// The holder's own observer went from `was_on` to `now_on` (nothing
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

/// Makes `holder`'s flag count the process-wide observers, those on now
/// and those switched from now on, for as long as it lives.
pub fn register(holder: &Arc<dyn Observed>) {
    let mut r = registry();
    holder.observer_flag().on.fetch_add(r.on, Ordering::Relaxed);
    r.holders.retain(|h| h.strong_count() > 0);
    r.holders.push(Arc::downgrade(holder));
}

/// A process-wide observer went from `was_on` to `now_on`: every
/// registered flag counts it.
pub fn switched_global(was_on: bool, now_on: bool) {
    if was_on == now_on {
        return;
    }
    let mut alive = Vec::new();
    {
        let mut r = registry();
        if now_on {
            r.on += 1;
        } else {
            r.on -= 1;
        }
        r.holders.retain(|h| match h.upgrade() {
            Some(holder) => {
                holder.observer_flag().switched(was_on, now_on);
                alive.push(holder);
                true
            }
            None => false,
        });
    }
    // Dropped outside the lock: the last reference may drop a runtime.
    drop(alive);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Holder(Flag);

    impl Observed for Holder {
        fn observer_flag(&self) -> &Flag {
            &self.0
        }
    }

    fn holder() -> Arc<dyn Observed> {
        let h: Arc<dyn Observed> = Arc::new(Holder::default());
        register(&h);
        h
    }

    #[test]
    fn flags_follow_their_own_and_the_global_observers() {
        // The only test of this crate that switches an observer.
        let a = holder();
        let b = holder();
        let (fa, fb) = (a.observer_flag(), b.observer_flag());
        assert!(!fa.any_on() && !fb.any_on());
        fa.switched(false, true);
        fa.switched(true, true);
        assert!(fa.any_on(), "a's own observer");
        assert!(!fb.any_on(), "a's observer is not b's");
        switched_global(false, true);
        assert!(fb.any_on(), "a global observer counts for every flag");
        let c = holder();
        assert!(
            c.observer_flag().any_on(),
            "and for flags registered while it is on"
        );
        fa.switched(true, false);
        assert!(fa.any_on(), "the global one is still on");
        switched_global(true, false);
        assert!(!fa.any_on() && !fb.any_on() && !c.observer_flag().any_on());
        switched_global(false, false);
        assert!(!c.observer_flag().any_on());
        drop(b);
        switched_global(false, true);
        assert!(
            fa.any_on() && c.observer_flag().any_on(),
            "a dropped holder is skipped"
        );
        switched_global(true, false);
        assert!(!fa.any_on());
    }
}
