//! Host callbacks, both of ACL's models:
//!
//! - `aclrtLaunchHostFunc`: "会在Stream上注册的线程（该线程在本接口内部创建并注册）
//!   中执行回调函数，并且回调任务默认阻塞本Stream上后续任务的执行"
//!   (aclrtLaunchHostFunc.md): the fake kit's callback thread runs it while
//!   the stream waits;
//! - `aclrtSubscribeReport` + `aclrtLaunchCallback` + `aclrtProcessReport`:
//!   the callback runs on the thread the stream is subscribed to, when that
//!   thread calls `aclrtProcessReport`; with `ACL_CALLBACK_BLOCK` the stream
//!   waits for it. "不支持调用aclrtSubscribeReport接口给同一个Stream注册多个处理
//!   回调函数的线程" (aclrtSubscribeReport.md).
//!
//! "对于同一个Stream，两套实现异步场景下的callback功能的接口不能混用"
//! (aclrtLaunchHostFunc.md): the fake refuses the second model on a stream.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::entry::{code, fail, IN_CALLBACK, R};
use crate::streams::{resolve, Model, Stream};

/// A C callback and its argument.
#[derive(Clone, Copy)]
struct Call {
    f: unsafe extern "C" fn(*mut c_void),
    arg: usize,
}

impl Call {
    /// Runs it with the no-ACL guard set.
    fn run(self) {
        IN_CALLBACK.with(|c| c.set(true));
        // SAFETY: the function and argument the caller of the launch passed.
        unsafe { (self.f)(self.arg as *mut c_void) };
        IN_CALLBACK.with(|c| c.set(false));
    }
}

/// A one-shot "done" signal.
#[derive(Default)]
struct Done {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Done {
    fn set(&self) {
        *self.done.lock() = true;
        self.changed.notify_all();
    }
    fn wait(&self) {
        let mut done = self.done.lock();
        while !*done {
            self.changed.wait(&mut done);
        }
    }
}

fn use_model(stream: &Stream, model: Model) -> R {
    let mut used = stream.model.lock();
    match *used {
        Some(m) if m != model => fail(
            code::RT_FEATURE_NOT_SUPPORT,
            format!("the stream already uses the {m:?} callback model: the two must not be mixed on one stream"),
        ),
        _ => {
            *used = Some(model);
            Ok(())
        }
    }
}

/// `aclrtLaunchHostFunc`.
#[cfg_attr(
    feature = "old-cann",
    expect(dead_code, reason = "not exported by the old build")
)]
pub(crate) fn launch_host_func(
    stream: *mut c_void,
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> R {
    let Some(f) = f else {
        return fail(code::INVALID_PARAM, "null callback");
    };
    let s = resolve(stream)?;
    use_model(&s, Model::HostFunc)?;
    let call = Call {
        f,
        arg: arg as usize,
    };
    // The fake kit's one callback thread runs it; the stream waits.
    s.enqueue(Box::new(move || {
        dipu_fakekit::host::run(Box::new(move || call.run()))
    }))
}

/// Reports waiting for their subscribed thread.
#[derive(Default)]
struct Reports {
    queue: Mutex<VecDeque<(Call, Arc<Done>)>>,
    arrived: Condvar,
}

fn reports(thread: u64) -> Arc<Reports> {
    static REPORTS: OnceLock<Mutex<HashMap<u64, Arc<Reports>>>> = OnceLock::new();
    Arc::clone(
        REPORTS
            .get_or_init(Default::default)
            .lock()
            .entry(thread)
            .or_default(),
    )
}

/// `aclrtSubscribeReport`.
pub(crate) fn subscribe(thread: u64, stream: *mut c_void) -> R {
    let s = resolve(stream)?;
    let mut subscriber = s.subscriber.lock();
    match *subscriber {
        Some(t) if t != thread => fail(
            code::RT_PARAM_INVALID,
            format!("the stream is already subscribed to thread {t}: one thread per stream"),
        ),
        _ => {
            *subscriber = Some(thread);
            Ok(())
        }
    }
}

/// `aclrtUnSubscribeReport`.
pub(crate) fn unsubscribe(thread: u64, stream: *mut c_void) -> R {
    let s = resolve(stream)?;
    let mut subscriber = s.subscriber.lock();
    if *subscriber != Some(thread) {
        return fail(
            code::RT_PARAM_INVALID,
            format!("the stream is not subscribed to thread {thread}"),
        );
    }
    *subscriber = None;
    Ok(())
}

/// `aclrtLaunchCallback`.
pub(crate) fn launch_callback(
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
    block: i32,
    stream: *mut c_void,
) -> R {
    let Some(f) = f else {
        return fail(code::INVALID_PARAM, "null callback");
    };
    let s = resolve(stream)?;
    let Some(thread) = *s.subscriber.lock() else {
        return fail(
            code::RT_STREAM_NO_CB_REG,
            "no thread is subscribed to the stream (aclrtSubscribeReport first)",
        );
    };
    use_model(&s, Model::Report)?;
    let call = Call {
        f,
        arg: arg as usize,
    };
    let blocking = block == 1;
    s.enqueue(Box::new(move || {
        let done = Arc::new(Done::default());
        let r = reports(thread);
        r.queue.lock().push_back((call, Arc::clone(&done)));
        r.arrived.notify_all();
        if blocking {
            done.wait();
        }
    }))
}

/// `aclrtProcessReport`: runs one report of the calling thread, waiting up
/// to `timeout` ms (-1: forever).
pub(crate) fn process(timeout: i32) -> R {
    if timeout == 0 || timeout < -1 {
        return fail(
            code::INVALID_PARAM,
            format!("timeout {timeout}: -1 or a positive number of ms"),
        );
    }
    // SAFETY: no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    let r = reports(me);
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut queue = r.queue.lock();
    loop {
        if let Some((call, done)) = queue.pop_front() {
            drop(queue);
            call.run();
            done.set();
            return Ok(());
        }
        match deadline {
            Some(d) => {
                if r.arrived.wait_until(&mut queue, d).timed_out() && queue.is_empty() {
                    return fail(
                        code::RT_REPORT_TIMEOUT,
                        "no callback arrived within the timeout",
                    );
                }
            }
            None => r.arrived.wait(&mut queue),
        }
    }
}
