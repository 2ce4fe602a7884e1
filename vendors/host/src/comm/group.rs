//! `group_start`/`group_end`: a per-thread (and per-vendor) nesting depth;
//! operations issued inside a group are checked and kept, and the
//! outermost `group_end` submits them as one fused op per stream, which
//! polls all its tasks round-robin (so both directions of an exchange, or
//! every send and receive of an all-to-all, progress together).

use std::cell::RefCell;
use std::sync::Arc;

use dipu_deviceapi::{Error, Result};

use super::engine::{self, Task};
use crate::stream::{Op, Stream};

struct Group {
    vendor: u64,
    depth: u32,
    pending: Vec<(Arc<Stream>, Box<dyn Task>)>,
}

thread_local! {
    static GROUPS: RefCell<Vec<Group>> = const { RefCell::new(Vec::new()) };
}

/// Opens a (possibly nested) group for `vendor` on this thread.
pub(crate) fn start(vendor: u64) {
    GROUPS.with_borrow_mut(
        |groups| match groups.iter_mut().find(|g| g.vendor == vendor) {
            Some(g) => g.depth += 1,
            None => groups.push(Group {
                vendor,
                depth: 1,
                pending: Vec::new(),
            }),
        },
    );
}

/// Closes a group; at the outermost level submits what it collected.
pub(crate) fn end(vendor: u64) -> Result<()> {
    let pending = GROUPS.with_borrow_mut(|groups| {
        let at = groups
            .iter()
            .position(|g| g.vendor == vendor)
            .ok_or_else(|| {
                Error::invalid_argument("group_end without a matching group_start on this thread")
            })?;
        groups[at].depth -= 1;
        Ok::<_, Error>(if groups[at].depth == 0 {
            Some(groups.swap_remove(at).pending)
        } else {
            None
        })
    })?;
    pending.map_or(Ok(()), submit_fused)
}

/// Runs `task` on `stream` now, or keeps it if a group is open.
pub(crate) fn issue(vendor: u64, stream: Arc<Stream>, task: Box<dyn Task>) -> Result<()> {
    let kept =
        GROUPS.with_borrow_mut(
            |groups| match groups.iter_mut().find(|g| g.vendor == vendor) {
                Some(g) => {
                    g.pending.push((stream, task));
                    None
                }
                None => Some((stream, task)),
            },
        );
    match kept {
        Some((stream, task)) => submit(&stream, vec![task]),
        None => Ok(()),
    }
}

/// A stream and the tasks its fused op runs.
type Fused = (Arc<Stream>, Vec<Box<dyn Task>>);

/// One fused op per stream, streams in the order they were first used.
fn submit_fused(pending: Vec<(Arc<Stream>, Box<dyn Task>)>) -> Result<()> {
    let mut per_stream: Vec<Fused> = Vec::new();
    for (stream, task) in pending {
        match per_stream.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &stream)) {
            Some((_, tasks)) => tasks.push(task),
            None => per_stream.push((stream, vec![task])),
        }
    }
    let mut first_error = None;
    for (stream, tasks) in per_stream {
        if let Err(e) = submit(&stream, tasks) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn submit(stream: &Stream, tasks: Vec<Box<dyn Task>>) -> Result<()> {
    let comms: Vec<_> = tasks.iter().map(|t| Arc::clone(t.comm())).collect();
    let op: Op = Box::new(move || {
        engine::run(tasks);
        Ok(())
    });
    stream.submit(op).map(drop).inspect_err(|e| {
        // Their steps are reserved: without them the communicator cannot go on.
        for comm in comms {
            comm.fail(e.clone());
        }
    })
}
