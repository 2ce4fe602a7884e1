//! The host-callback thread: one thread, shared by every stream, runs the
//! host functions streams reach, and marks itself so that a vendor call
//! made from inside a host function can fail.

use std::cell::Cell;
use std::sync::OnceLock;

use crossbeam_channel::{bounded, Sender};

use crate::stream::Job;

thread_local! {
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is the host-callback thread.
pub fn in_callback() -> bool {
    IN_CALLBACK.with(Cell::get)
}

fn thread() -> &'static Sender<(Job, Sender<()>)> {
    static TX: OnceLock<Sender<(Job, Sender<()>)>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded::<(Job, Sender<()>)>();
        std::thread::Builder::new()
            .name("fake-host-callbacks".into())
            .spawn(move || {
                IN_CALLBACK.with(|c| c.set(true));
                for (job, done) in rx {
                    job();
                    let _ = done.send(());
                }
            })
            .expect("spawn the fake host-callback thread");
        tx
    })
}

/// Runs `job` on the host-callback thread and waits for it (a stream that
/// reaches a host function waits for it to return).
pub fn run(job: Job) {
    let (done_tx, done_rx) = bounded(1);
    if thread().send((job, done_tx)).is_ok() {
        let _ = done_rx.recv();
    }
}
