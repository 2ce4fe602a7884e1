//! Frees deferred until the other streams that used a block are done:
//! each pending block carries the events recorded on those streams at free
//! time, and is handed back only once every event has completed.

use dipu_deviceapi::Result;
use dipu_stream::PooledEvent;

/// Something that completes: an event recorded on a stream.
pub(crate) trait Completion {
    /// Whether it has completed.
    fn done(&self) -> Result<bool>;
    /// Waits until it has completed.
    fn wait(&self) -> Result<()>;
}

impl Completion for PooledEvent {
    fn done(&self) -> Result<bool> {
        self.query()
    }
    fn wait(&self) -> Result<()> {
        self.synchronize()
    }
}

/// Blocks waiting for their events.
pub(crate) struct Deferred<B, E> {
    pending: Vec<(B, Vec<E>)>,
}

impl<B, E: Completion> Deferred<B, E> {
    pub(crate) fn new() -> Self {
        Deferred {
            pending: Vec::new(),
        }
    }

    /// Adds a block that may be reused once all `events` have completed.
    pub(crate) fn push(&mut self, block: B, events: Vec<E>) {
        self.pending.push((block, events));
    }

    /// Whether nothing is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Removes and returns the blocks whose events have all completed
    /// (every block, after waiting for its events, when `wait`).
    pub(crate) fn take_ready(&mut self, wait: bool) -> Result<Vec<B>> {
        let mut ready = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let done = if wait {
                self.pending[i].1.iter().try_for_each(E::wait)?;
                true
            } else {
                let mut all = true;
                for e in &self.pending[i].1 {
                    all &= e.done()?;
                }
                all
            };
            if done {
                ready.push(self.pending.swap_remove(i).0);
            } else {
                i += 1;
            }
        }
        Ok(ready)
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::{Arc, Mutex};

    /// An event another thread completes, publishing the stream's writes.
    struct Flag(Arc<AtomicBool>);

    impl Completion for Flag {
        fn done(&self) -> Result<bool> {
            Ok(self.0.load(Ordering::Acquire))
        }
        fn wait(&self) -> Result<()> {
            while !self.0.load(Ordering::Acquire) {
                loom::thread::yield_now();
            }
            Ok(())
        }
    }

    /// A block freed while another stream still uses it is handed back
    /// only after that stream's event completed (so the stream's last use
    /// of the memory happened before the reuse), and exactly once.
    #[test]
    fn deferred_blocks_come_back_once_and_only_after_their_event() {
        loom::model(|| {
            let done = Arc::new(AtomicBool::new(false));
            let last_use = Arc::new(AtomicBool::new(false));
            let deferred = Arc::new(Mutex::new(Deferred::new()));
            deferred
                .lock()
                .unwrap()
                .push(7u32, vec![Flag(done.clone())]);
            let stream = {
                let (done, last_use) = (done.clone(), last_use.clone());
                loom::thread::spawn(move || {
                    last_use.store(true, Ordering::Relaxed); // the stream's work on the block
                    done.store(true, Ordering::Release); // its event completes
                })
            };
            let mut returned = deferred.lock().unwrap().take_ready(false).unwrap();
            if returned.contains(&7) {
                assert!(
                    last_use.load(Ordering::Relaxed),
                    "reused before the stream was done with it"
                );
            }
            stream.join().unwrap();
            returned.extend(deferred.lock().unwrap().take_ready(true).unwrap());
            assert_eq!(returned, vec![7], "handed back exactly once");
            assert!(deferred.lock().unwrap().is_empty());
        });
    }
}
