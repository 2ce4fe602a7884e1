//! Framework frames: captured per event through a [`FrameSource`], named at
//! snapshot time after the native frames, released once per capture.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::tests::traced;
use super::*;

/// Hands out numbered handles whose single frame names the handle, and
/// remembers which it released.
#[derive(Default)]
struct Numbered {
    next: AtomicUsize,
    released: Mutex<Vec<usize>>,
}

impl FrameSource for Numbered {
    fn capture(&self) -> Option<NonZeroUsize> {
        NonZeroUsize::new(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn symbolize(&self, handle: NonZeroUsize) -> Vec<Frame> {
        vec![Frame {
            name: format!("capture_{handle}"),
            filename: "model.py".into(),
            line: handle.get() as u32,
        }]
    }

    fn release(&self, handle: NonZeroUsize) {
        self.released.lock().push(handle.get());
    }
}

fn frames_of(snap: &MemorySnapshot, action: Action, addr: usize) -> Vec<Frame> {
    snap.device_traces[0]
        .iter()
        .rfind(|e| e.action == action && e.addr == addr)
        .map(|e| e.frames.to_vec())
        .expect("the event is recorded")
}

#[test]
fn framework_frames_need_a_source() {
    let history = History::new();
    let only = Stacks {
        native: false,
        framework: true,
    };
    let err = history.record_stacks(10, only).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(history.max_entries(), 0, "nothing changed");
}

#[test]
fn events_carry_the_frames_of_their_capture_and_release_them_once() {
    let history = History::new();
    let (alloc, stream) = traced(&history);
    let source = Arc::new(Numbered::default());
    history.set_frame_source(Some(source.clone()));
    let only = Stacks {
        native: false,
        framework: true,
    };
    history.record_stacks(100, only).unwrap();
    let a = alloc.allocate(1000, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    let snap = history.snapshot([alloc.as_ref()]);
    let alloc_frames = frames_of(&snap, Action::Alloc, a.ptr as usize);
    assert_eq!(
        alloc_frames.len(),
        1,
        "framework frames only: {alloc_frames:?}"
    );
    assert_eq!(alloc_frames[0].filename, "model.py");
    let requested = frames_of(&snap, Action::FreeRequested, a.ptr as usize);
    let completed = frames_of(&snap, Action::FreeCompleted, a.ptr as usize);
    assert_eq!(
        requested, completed,
        "one capture for both halves of a free"
    );
    assert_ne!(requested, alloc_frames, "the free has its own capture");
    let captured = source.next.load(Ordering::Relaxed);
    assert!(source.released.lock().is_empty(), "all still in the log");

    // A smaller log drops the oldest events, which release their captures
    // (a free's capture once its two events are gone).
    history.record_stacks(1, only).unwrap();
    let mut released = source.released.lock().clone();
    released.sort_unstable();
    released.dedup();
    assert_eq!(released.len(), source.released.lock().len(), "each once");
    assert_eq!(released.len(), captured - 1, "all but the last event's");

    // Native and framework frames: the native (inner) ones first.
    let both = Stacks {
        native: true,
        framework: true,
    };
    history.record_stacks(100, both).unwrap();
    let b = alloc.allocate(2000, stream).unwrap();
    let snap = history.snapshot([alloc.as_ref()]);
    let frames = frames_of(&snap, Action::Alloc, b.ptr as usize);
    assert!(frames.len() > 1, "{frames:?}");
    assert_eq!(frames.last().unwrap().filename, "model.py");
    assert!(frames[..frames.len() - 1]
        .iter()
        .all(|f| f.filename != "model.py"));

    // Without framework frames (or after the source goes) none are taken.
    history.set_frame_source(None);
    let c = alloc.allocate(3000, stream).unwrap();
    let before = source.next.load(Ordering::Relaxed);
    let snap = history.snapshot([alloc.as_ref()]);
    let frames = frames_of(&snap, Action::Alloc, c.ptr as usize);
    assert!(frames.iter().all(|f| f.filename != "model.py"));
    assert_eq!(source.next.load(Ordering::Relaxed), before);
    for p in [b.ptr, c.ptr] {
        alloc.free(p).unwrap();
    }
    drop(alloc);
    history.record(0, false);
}
