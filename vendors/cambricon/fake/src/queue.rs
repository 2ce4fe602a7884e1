//! Queues and notifiers on the kit's streams ([`dipu_fakekit::stream`]):
//! a queue is a [`Worker`] (its own thread, tasks in order, each after the
//! configured latency) run with its device current, and a notifier is an
//! [`Event`] (each place a new generation, done when its queue reaches it).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dipu_fakekit::stream::{Event, Worker};

/// Work run by a queue's worker.
pub(crate) type Task = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// Set on a worker while it runs a host function, which must not call CNRT.
    pub(crate) static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// A queue: tasks run in order on its own thread.
pub(crate) struct Queue {
    pub(crate) device: i32,
    worker: Worker,
    destroyed: Arc<AtomicBool>,
}

impl Queue {
    /// A queue of `device` (its worker thread starts with its first task).
    pub(crate) fn new(device: i32) -> Arc<Queue> {
        let latency = crate::common::config().latency;
        Arc::new(Queue {
            device,
            worker: Worker::new(&format!("fake-mlu{device}-queue"), latency),
            destroyed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Queues `task`; `false` if the queue was destroyed.
    pub(crate) fn push(&self, task: Task) -> bool {
        if self.destroyed.load(Ordering::Acquire) {
            return false;
        }
        let (device, destroyed) = (self.device, Arc::clone(&self.destroyed));
        self.worker.submit(Box::new(move || {
            if !destroyed.load(Ordering::Acquire) {
                crate::rt::set_worker_device(device);
                task();
            }
        }));
        true
    }

    /// Whether everything queued so far is done.
    pub(crate) fn idle(&self) -> bool {
        self.worker.idle()
    }

    /// Waits until everything queued before this call is done.
    pub(crate) fn sync(&self) {
        self.worker.drain();
    }

    /// Destroys the queue at once: tasks not yet run are dropped.
    pub(crate) fn destroy(&self) {
        self.destroyed.store(true, Ordering::Release);
        self.worker.close();
    }
}

/// A notifier: each place is a generation, done when its queue reaches it.
pub(crate) struct Notifier {
    pub(crate) device: i32,
    pub(crate) timing: bool,
    event: Arc<Event>,
}

impl Notifier {
    pub(crate) fn new(device: i32, timing: bool) -> Arc<Notifier> {
        Arc::new(Notifier {
            device,
            timing,
            event: Event::new(timing),
        })
    }

    /// Places the notifier on `queue`; it keeps only the last place.
    pub(crate) fn place(&self, queue: &Queue) -> bool {
        if queue.destroyed.load(Ordering::Acquire) {
            return false;
        }
        self.event.record(&queue.worker);
        true
    }

    /// Whether it was ever placed.
    pub(crate) fn placed(&self) -> bool {
        self.event.recorded()
    }

    /// Whether the last place is done (true if never placed).
    pub(crate) fn is_done(&self) -> bool {
        self.event.query()
    }

    /// Waits until the last place (now) is done.
    pub(crate) fn wait(&self) {
        self.event.wait();
    }

    /// A task waiting for the last place (now): what a queue waiting on
    /// the notifier runs.
    pub(crate) fn waiter(&self) -> Task {
        self.event.waiter()
    }

    /// The time the last place completed, if it did and was timed.
    pub(crate) fn time(&self) -> Option<Instant> {
        self.event.completed_at()
    }
}
