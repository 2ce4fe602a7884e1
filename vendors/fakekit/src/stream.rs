//! Streams as worker threads that run queued work in order, each piece
//! after a configurable latency (so a missing synchronisation really
//! races), and events with record generations.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

/// A piece of queued work.
pub type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug, Default)]
struct Progress {
    /// (submitted, done) tickets; ticket n is the n-th job, from 1.
    counts: Mutex<(u64, u64)>,
    cv: Condvar,
}

/// How a worker takes jobs: its thread is started by the first job (so a
/// process that never queued work has no thread to lose in a fork).
#[derive(Debug)]
enum Intake {
    NotStarted { name: String, latency: Duration },
    Running(Sender<Job>),
    Closed,
}

/// A queue run by its own thread, in submission order.
#[derive(Debug)]
pub struct Worker {
    intake: Mutex<Intake>,
    progress: Arc<Progress>,
}

impl Worker {
    /// A worker named `name` whose thread (started by the first job)
    /// waits `latency` before each job.
    pub fn new(name: &str, latency: Duration) -> Self {
        Worker {
            intake: Mutex::new(Intake::NotStarted {
                name: name.to_owned(),
                latency,
            }),
            progress: Arc::new(Progress::default()),
        }
    }

    fn start(name: &str, latency: Duration, progress: &Arc<Progress>) -> Sender<Job> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let p = Arc::clone(progress);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for job in rx {
                    if !latency.is_zero() {
                        std::thread::sleep(latency);
                    }
                    job();
                    p.counts.lock().1 += 1;
                    p.cv.notify_all();
                }
            })
            .expect("spawn a fake stream thread");
        tx
    }

    /// Queues `job`; its ticket, which [`Worker::wait`] takes. A closed
    /// worker drops the job and counts it done.
    pub fn submit(&self, job: Job) -> u64 {
        let mut intake = self.intake.lock();
        if let Intake::NotStarted { name, latency } = &*intake {
            *intake = Intake::Running(Self::start(name, *latency, &self.progress));
        }
        let mut counts = self.progress.counts.lock();
        counts.0 += 1;
        match &*intake {
            Intake::Running(tx) if tx.send(job).is_ok() => {}
            _ => counts.1 += 1,
        }
        counts.0
    }

    /// The ticket of the last job queued (0 if none).
    pub fn last(&self) -> u64 {
        self.progress.counts.lock().0
    }

    /// Whether the job of `ticket` (and every earlier one) has run.
    pub fn done(&self, ticket: u64) -> bool {
        self.progress.counts.lock().1 >= ticket
    }

    /// Whether every queued job has run.
    pub fn idle(&self) -> bool {
        let c = self.progress.counts.lock();
        c.1 >= c.0
    }

    /// Blocks until the job of `ticket` has run.
    pub fn wait(&self, ticket: u64) {
        let mut c = self.progress.counts.lock();
        while c.1 < ticket {
            self.progress.cv.wait(&mut c);
        }
    }

    /// Blocks until every job queued so far has run.
    pub fn drain(&self) {
        let last = self.last();
        self.wait(last);
    }

    /// Stops taking work; the thread ends once what is queued has run.
    pub fn close(&self) {
        *self.intake.lock() = Intake::Closed;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.close();
    }
}

/// One record of an event: passed when its worker has run `ticket`.
#[derive(Debug, Clone)]
struct Mark {
    progress: Arc<Progress>,
    ticket: u64,
    /// When the worker passed the record, set before it counts the record
    /// run.
    at: Arc<Mutex<Option<Instant>>>,
}

impl Mark {
    fn done(&self) -> bool {
        self.progress.counts.lock().1 >= self.ticket
    }

    fn wait(&self) {
        let mut c = self.progress.counts.lock();
        while c.1 < self.ticket {
            self.progress.cv.wait(&mut c);
        }
    }
}

/// An event: each record is a ticket on its stream's worker, so the event
/// is complete exactly when the worker counts the work before it run (an
/// event seen complete means its stream idle, if nothing was queued since,
/// and a drained stream means its events complete); queries and waits look
/// at the record made last.
#[derive(Debug, Default)]
pub struct Event {
    /// Whether the event keeps the time of its completion.
    pub timing: bool,
    last: Mutex<Option<Mark>>,
}

impl Event {
    /// A fresh event, never recorded.
    pub fn new(timing: bool) -> Arc<Self> {
        Arc::new(Event {
            timing,
            ..Event::default()
        })
    }

    /// Records the event on `worker`: completed when the worker passes it.
    pub fn record(self: &Arc<Self>, worker: &Worker) {
        let at = Arc::new(Mutex::new(None));
        let stamp = Arc::clone(&at);
        // Held across the submit, so records of one event keep their order.
        let mut last = self.last.lock();
        let ticket = worker.submit(Box::new(move || *stamp.lock() = Some(Instant::now())));
        *last = Some(Mark {
            progress: Arc::clone(&worker.progress),
            ticket,
            at,
        });
    }

    /// Whether it was ever recorded.
    pub fn recorded(&self) -> bool {
        self.last.lock().is_some()
    }

    /// Whether the last record has completed (true if never recorded).
    pub fn query(&self) -> bool {
        self.last.lock().as_ref().is_none_or(Mark::done)
    }

    /// Blocks until the record made last (now) has completed.
    pub fn wait(&self) {
        let mark = self.last.lock().clone();
        if let Some(mark) = mark {
            mark.wait();
        }
    }

    /// A job that blocks until the record made last (when this is called)
    /// has completed: what a stream waiting on the event runs.
    pub fn waiter(self: &Arc<Self>) -> Job {
        let mark = self.last.lock().clone();
        Box::new(move || {
            if let Some(mark) = mark {
                mark.wait();
            }
        })
    }

    /// When the last record completed; `None` while it is pending or if
    /// never recorded.
    pub fn completed_at(&self) -> Option<Instant> {
        let mark = self.last.lock().clone()?;
        if mark.done() {
            *mark.at.lock()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn jobs_run_in_order_and_tickets_track_them() {
        let w = Worker::new("t", Duration::from_millis(1));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut last = 0;
        for i in 0..5 {
            let s = Arc::clone(&seen);
            last = w.submit(Box::new(move || s.lock().push(i)));
        }
        assert_eq!(last, 5);
        w.wait(last);
        assert!(w.done(5) && w.idle());
        assert_eq!(*seen.lock(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn events_complete_per_generation() {
        let w = Worker::new("t", Duration::ZERO);
        let e = Event::new(true);
        assert!(e.query() && !e.recorded() && e.completed_at().is_none());
        let gate = Arc::new(AtomicU32::new(0));
        let g = Arc::clone(&gate);
        w.submit(Box::new(move || {
            while g.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
        }));
        e.record(&w);
        assert!(!e.query(), "pending behind the gate");
        let waiter = e.waiter();
        gate.store(1, Ordering::Release);
        waiter();
        assert!(e.query() && e.completed_at().is_some());
    }

    /// An event and its worker agree: once the record made last is done
    /// the worker is idle, and once the worker is drained the event is done.
    #[test]
    fn an_event_done_means_its_worker_is_idle_and_back() {
        let w = Worker::new("t", Duration::ZERO);
        let e = Event::new(true);
        for round in 0..1000 {
            w.submit(Box::new(|| {}));
            e.record(&w);
            if round % 2 == 0 {
                e.wait();
                assert!(w.idle(), "round {round}: event done, worker busy");
            } else {
                w.drain();
                assert!(e.query() && e.completed_at().is_some(), "round {round}");
            }
        }
    }
}
