//! Queues (one worker thread each, tasks in order, each taking the
//! configured latency) and notifiers (generations placed and done).

use std::cell::Cell;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Work run by a queue's worker.
pub(crate) type Task = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// Set on a worker while it runs a host function, which must not call CNRT.
    pub(crate) static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

#[derive(Default)]
struct Counts {
    submitted: u64,
    completed: u64,
    destroyed: bool,
}

/// A queue: tasks run in order on its own thread.
pub(crate) struct Queue {
    pub(crate) device: i32,
    tx: Mutex<Option<Sender<Task>>>,
    counts: Mutex<Counts>,
    done: Condvar,
}

impl Queue {
    /// A queue of `device` and its worker thread.
    pub(crate) fn new(device: i32) -> Arc<Queue> {
        let (tx, rx) = channel::<Task>();
        let queue = Arc::new(Queue {
            device,
            tx: Mutex::new(Some(tx)),
            counts: Mutex::new(Counts::default()),
            done: Condvar::new(),
        });
        let worker = Arc::clone(&queue);
        let latency = crate::common::config().latency;
        std::thread::Builder::new()
            .name(format!("fake-mlu{device}-queue"))
            .spawn(move || {
                for task in rx {
                    if !worker.counts.lock().destroyed {
                        if !latency.is_zero() {
                            std::thread::sleep(latency);
                        }
                        crate::rt::set_worker_device(worker.device);
                        task();
                    }
                    let mut c = worker.counts.lock();
                    c.completed += 1;
                    worker.done.notify_all();
                }
            })
            .expect("spawn a fake queue worker");
        queue
    }

    /// Queues `task`; `false` if the queue was destroyed.
    pub(crate) fn push(&self, task: Task) -> bool {
        let tx = self.tx.lock();
        let Some(tx) = tx.as_ref() else {
            return false;
        };
        self.counts.lock().submitted += 1;
        if tx.send(task).is_err() {
            self.counts.lock().submitted -= 1;
            return false;
        }
        true
    }

    /// Whether everything queued so far is done.
    pub(crate) fn idle(&self) -> bool {
        let c = self.counts.lock();
        c.completed == c.submitted
    }

    /// Waits until everything queued before this call is done.
    pub(crate) fn sync(&self) {
        let mut c = self.counts.lock();
        let target = c.submitted;
        while c.completed < target {
            self.done.wait(&mut c);
        }
    }

    /// Destroys the queue at once: tasks not yet run are dropped.
    pub(crate) fn destroy(&self) {
        self.counts.lock().destroyed = true;
        self.tx.lock().take();
    }
}

#[derive(Default)]
struct Marks {
    placed: u64,
    done: u64,
    at: Option<Instant>,
}

/// A notifier: each place is a generation, done when its queue reaches it.
pub(crate) struct Notifier {
    pub(crate) device: i32,
    pub(crate) timing: bool,
    marks: Mutex<Marks>,
    cv: Condvar,
}

impl Notifier {
    pub(crate) fn new(device: i32, timing: bool) -> Arc<Notifier> {
        Arc::new(Notifier {
            device,
            timing,
            marks: Mutex::new(Marks::default()),
            cv: Condvar::new(),
        })
    }

    /// Places the notifier on `queue`; it keeps only the last place.
    pub(crate) fn place(self: &Arc<Self>, queue: &Queue) -> bool {
        let generation = {
            let mut m = self.marks.lock();
            m.placed += 1;
            m.placed
        };
        let me = Arc::clone(self);
        queue.push(Box::new(move || {
            let mut m = me.marks.lock();
            if generation > m.done {
                m.done = generation;
                m.at = Some(Instant::now());
            }
            me.cv.notify_all();
        }))
    }

    /// The last generation placed (0: never).
    pub(crate) fn placed(&self) -> u64 {
        self.marks.lock().placed
    }

    /// Whether the last place is done (true if never placed).
    pub(crate) fn is_done(&self) -> bool {
        let m = self.marks.lock();
        m.done >= m.placed
    }

    /// Waits until generation `generation` is done.
    pub(crate) fn wait_for(&self, generation: u64) {
        let mut m = self.marks.lock();
        while m.done < generation {
            self.cv.wait(&mut m);
        }
    }

    /// The time the last place completed, if it did and was timed.
    pub(crate) fn time(&self) -> Option<Instant> {
        let m = self.marks.lock();
        (m.placed > 0 && m.done >= m.placed)
            .then_some(m.at)
            .flatten()
    }
}
