//! Events: the fake kit's record generations, with ACL's flags (`SYNC`,
//! `TIME_LINE`) and the per-device limit.

use dipu_fakekit::stream::Event as KitEvent;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use crate::entry::{code, fail, out, R};
use crate::state;
use crate::streams::resolve;

/// `ACL_EVENT_SYNC`.
pub(crate) const SYNC: u32 = 1;
/// `ACL_EVENT_TIME_LINE`.
pub(crate) const TIME_LINE: u32 = 8;
/// Events with `ACL_EVENT_SYNC` per device: "单个Device支持的Event最大数 …
/// 65536" (aclrtCreateEventWithFlag.md).
const SYNC_EVENT_LIMIT: usize = 65_536;

/// One event: the fake kit's event (record generations, completion time)
/// with ACL's flags and device.
#[derive(Debug)]
pub(crate) struct Event {
    flags: u32,
    device: i32,
    kit: Arc<KitEvent>,
}

fn events() -> &'static Mutex<HashMap<usize, Arc<Event>>> {
    static EVENTS: OnceLock<Mutex<HashMap<usize, Arc<Event>>>> = OnceLock::new();
    EVENTS.get_or_init(Default::default)
}

fn get(handle: *mut c_void) -> R<Arc<Event>> {
    events()
        .lock()
        .get(&(handle as usize))
        .cloned()
        .map_or_else(
            || {
                fail(
                    code::RT_INVALID_HANDLE,
                    format!("{handle:p} is not a live event"),
                )
            },
            Ok,
        )
}

/// `aclrtCreateEventWithFlag`. Events with `ACL_EVENT_SYNC` are limited per
/// device (`fail:aclrtCreateEventWithFlag@N=207007` in `DIPU_FAKE_FAULTS`
/// makes the N-th creation fail as if the limit were reached).
pub(crate) fn create(event: *mut *mut c_void, flags: u32) -> R {
    let device = state::current()?;
    if flags & !(SYNC | TIME_LINE) != 0 {
        return fail(
            code::INVALID_PARAM,
            format!("flags {flags:#x}: the fake knows SYNC and TIME_LINE"),
        );
    }
    let dev = state::device(device)?;
    if flags & SYNC != 0 {
        let limit = SYNC_EVENT_LIMIT;
        if dev.sync_events.fetch_add(1, Ordering::AcqRel) >= limit {
            dev.sync_events.fetch_sub(1, Ordering::AcqRel);
            return fail(
                code::RT_NO_EVENT_RESOURCE,
                format!("device {device} has no event left ({limit} events with ACL_EVENT_SYNC)"),
            );
        }
    }
    let e = Arc::new(Event {
        flags,
        device,
        kit: KitEvent::new(flags & TIME_LINE != 0),
    });
    let handle = Arc::as_ptr(&e) as usize;
    out(event, handle as *mut c_void, "event")?;
    events().lock().insert(handle, e);
    Ok(())
}

/// `aclrtDestroyEvent` (pending records still complete).
pub(crate) fn destroy(handle: *mut c_void) -> R {
    let e = get(handle)?;
    events().lock().remove(&(handle as usize));
    if e.flags & SYNC != 0 {
        state::device(e.device)?
            .sync_events
            .fetch_sub(1, Ordering::AcqRel);
    }
    Ok(())
}

/// `aclrtRecordEvent`.
pub(crate) fn record(handle: *mut c_void, stream: *mut c_void) -> R {
    let e = get(handle)?;
    let s = resolve(stream)?;
    if s.device != e.device {
        return fail(
            code::RT_STREAM_CONTEXT,
            "the stream and the event belong to different devices",
        );
    }
    e.kit.record(&s.worker);
    Ok(())
}

/// `aclrtQueryEventStatus`: 1 (complete) or 0 (not ready).
pub(crate) fn query(handle: *mut c_void, status: *mut i32) -> R {
    let e = get(handle)?;
    out(status, i32::from(e.kit.query()), "status")
}

/// `aclrtSynchronizeEvent`.
pub(crate) fn synchronize(handle: *mut c_void) -> R {
    let e = get(handle)?;
    e.kit.wait();
    Ok(())
}

/// `aclrtStreamWaitEvent`. "若flag参数值不包含ACL_EVENT_SYNC宏，则不支持在以下API
/// 中使用本接口创建的Event：…aclrtStreamWaitEvent…" (aclrtCreateEventWithFlag.md).
pub(crate) fn stream_wait(stream: *mut c_void, handle: *mut c_void) -> R {
    let e = get(handle)?;
    if e.flags & SYNC == 0 {
        return fail(
            code::RT_PARAM_INVALID,
            "the event was created without ACL_EVENT_SYNC, so a stream cannot wait on it",
        );
    }
    let s = resolve(stream)?;
    s.enqueue(e.kit.waiter())
}

/// `aclrtEventElapsedTime`: both events need `ACL_EVENT_TIME_LINE` and a
/// completed record.
pub(crate) fn elapsed(ms: *mut f32, start: *mut c_void, end: *mut c_void) -> R {
    let mut times = Vec::new();
    for (name, handle) in [("start", start), ("end", end)] {
        let e = get(handle)?;
        if e.flags & TIME_LINE == 0 {
            return fail(
                code::RT_PARAM_INVALID,
                format!("the {name} event has no ACL_EVENT_TIME_LINE"),
            );
        }
        if !e.kit.recorded() {
            return fail(
                code::RT_PARAM_INVALID,
                format!("the {name} event was never recorded"),
            );
        }
        let Some(at) = e.kit.completed_at() else {
            return fail(507_006, format!("the {name} event is not complete"));
        };
        times.push(at);
    }
    let millis = if times[1] >= times[0] {
        (times[1] - times[0]).as_secs_f32() * 1000.0
    } else {
        -((times[0] - times[1]).as_secs_f32() * 1000.0)
    };
    out(ms, millis, "ms")
}
