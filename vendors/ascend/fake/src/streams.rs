//! Streams: one worker thread each runs the stream's tasks in order, after
//! `DIPU_FAKE_LATENCY_US`; the host waits on a progress counter.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use dipu_fakekit::stream::Worker;
use parking_lot::Mutex;

use crate::entry::{code, fail, R};
use crate::state;

/// Work queued on a stream.
pub(crate) type Task = dipu_fakekit::stream::Job;

/// Which host callback model a stream has used (never both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    /// `aclrtLaunchHostFunc`.
    HostFunc,
    /// `aclrtLaunchCallback` with `aclrtSubscribeReport`.
    Report,
}

/// One stream: a [`Worker`] thread of the fake kit runs its tasks in order.
pub(crate) struct Stream {
    pub(crate) device: i32,
    pub(crate) worker: Worker,
    /// The callback model in use.
    pub(crate) model: Mutex<Option<Model>>,
    /// The thread subscribed to its callbacks.
    pub(crate) subscriber: Mutex<Option<u64>>,
}

impl Stream {
    fn new(device: i32) -> R<Arc<Stream>> {
        Ok(Arc::new(Stream {
            device,
            worker: Worker::new(
                &format!("fake-acl-stream-d{device}"),
                crate::config::get().latency,
            ),
            model: Mutex::new(None),
            subscriber: Mutex::new(None),
        }))
    }

    /// Queues `task`.
    pub(crate) fn enqueue(&self, task: Task) -> R {
        self.worker.submit(task);
        Ok(())
    }

    /// Waits until everything queued so far is done.
    pub(crate) fn synchronize(&self) {
        self.worker.drain();
    }

    /// Whether everything queued is done.
    pub(crate) fn idle(&self) -> bool {
        self.worker.idle()
    }

    fn close(&self) {
        self.worker.close();
    }
}

/// Live streams by handle.
fn streams() -> &'static Mutex<HashMap<usize, Arc<Stream>>> {
    static STREAMS: OnceLock<Mutex<HashMap<usize, Arc<Stream>>>> = OnceLock::new();
    STREAMS.get_or_init(Default::default)
}

/// The default stream of `device`.
pub(crate) fn default_stream(device: i32) -> R<Arc<Stream>> {
    let dev = state::device(device)?;
    if let Some(s) = dev.default_stream.get() {
        return Ok(Arc::clone(s));
    }
    let made = Stream::new(device)?;
    Ok(Arc::clone(dev.default_stream.get_or_init(|| made)))
}

/// The stream a handle names: null is the current device's default stream.
pub(crate) fn resolve(handle: *mut c_void) -> R<Arc<Stream>> {
    if handle.is_null() {
        return default_stream(state::current()?);
    }
    state::current()?;
    streams()
        .lock()
        .get(&(handle as usize))
        .cloned()
        .map_or_else(
            || {
                fail(
                    code::RT_INVALID_HANDLE,
                    format!("{handle:p} is not a live stream"),
                )
            },
            Ok,
        )
}

/// Every stream of `device`, the default one included.
pub(crate) fn of_device(device: i32) -> Vec<Arc<Stream>> {
    let mut all: Vec<_> = streams()
        .lock()
        .values()
        .filter(|s| s.device == device)
        .cloned()
        .collect();
    if let Some(s) = state::devices()
        .get(device as usize)
        .and_then(|d| d.default_stream.get())
    {
        all.push(Arc::clone(s));
    }
    all
}

/// `aclrtCreateStream[WithConfig]` on the current device.
pub(crate) fn create(out: *mut *mut c_void) -> R {
    let stream = Stream::new(state::current()?)?;
    let handle = Arc::as_ptr(&stream) as usize;
    crate::entry::out(out, handle as *mut c_void, "stream")?;
    streams().lock().insert(handle, stream);
    Ok(())
}

/// `aclrtDestroyStream`. "在调用aclrtDestroyStream接口销毁指定Stream前，需要先调用
/// aclrtSynchronizeStream接口确保Stream中的任务都已完成" and "需确保该Stream在当前
/// Context下" (aclrtDestroyStream.md): the fake refuses a stream with work
/// pending, or of another device than the current one.
pub(crate) fn destroy(handle: *mut c_void) -> R {
    if handle.is_null() {
        return fail(
            code::INVALID_PARAM,
            "the default stream cannot be destroyed",
        );
    }
    let stream = resolve(handle)?;
    let current = state::current()?;
    if stream.device != current {
        return fail(
            code::RT_STREAM_CONTEXT,
            format!(
                "the stream belongs to device {}, the current device is {current}",
                stream.device
            ),
        );
    }
    if !stream.idle() {
        return fail(
            code::RT_STREAM_NOT_COMPLETE,
            "tasks are still queued: synchronise the stream before destroying it",
        );
    }
    if stream.subscriber.lock().is_some() {
        return fail(
            code::RT_PARAM_INVALID,
            "the stream is still subscribed (aclrtUnSubscribeReport first)",
        );
    }
    stream.close();
    streams().lock().remove(&(handle as usize));
    Ok(())
}
