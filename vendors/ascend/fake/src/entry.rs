//! The way into every exported function: the callback guard, injected
//! faults, a caught panic, the thread's error message and the trace.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// ACL's codes the fake returns.
pub(crate) mod code {
    pub(crate) const INVALID_PARAM: i32 = 100_000;
    pub(crate) const UNINITIALIZE: i32 = 100_001;
    pub(crate) const REPEAT_INITIALIZE: i32 = 100_002;
    pub(crate) const RT_PARAM_INVALID: i32 = 107_000;
    pub(crate) const RT_INVALID_DEVICEID: i32 = 107_001;
    pub(crate) const RT_CONTEXT_NULL: i32 = 107_002;
    pub(crate) const RT_STREAM_CONTEXT: i32 = 107_003;
    pub(crate) const RT_STREAM_NO_CB_REG: i32 = 107_015;
    pub(crate) const RT_INVALID_HANDLE: i32 = 107_017;
    pub(crate) const RT_FEATURE_NOT_SUPPORT: i32 = 207_000;
    pub(crate) const RT_MEMORY_ALLOCATION: i32 = 207_001;
    pub(crate) const RT_NO_EVENT_RESOURCE: i32 = 207_007;
    pub(crate) const RT_INTERNAL_ERROR: i32 = 507_000;
    pub(crate) const RT_STREAM_NOT_COMPLETE: i32 = 507_004;
    pub(crate) const RT_REPORT_TIMEOUT: i32 = 507_012;
}

/// A failed call: its code and message.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) code: i32,
    pub(crate) message: String,
}

/// A call's result.
pub(crate) type R<T = ()> = Result<T, Fail>;

/// A failure with `code` and `message`.
pub(crate) fn fail<T>(code: i32, message: impl Into<String>) -> R<T> {
    Err(Fail {
        code,
        message: message.into(),
    })
}

thread_local! {
    /// Set while a host callback runs on this thread.
    pub(crate) static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// The last error message of this thread (`aclGetRecentErrMsg`).
    static MESSAGE: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// `aclGetRecentErrMsg`: this thread's last message, or null. Like ACL's,
/// it is per thread: "默认按线程级别" (aclInit.md, the error-message mode).
pub(crate) fn recent_message() -> *const c_char {
    MESSAGE.with(|m| m.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

fn set_message(text: &str) {
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    MESSAGE.with(|m| *m.borrow_mut() = Some(text));
}

/// Runs an exported function's `body`; `internal` is the library's
/// internal-error code (ACL's or HCCL's).
pub(crate) fn run(symbol: &'static str, internal: i32, body: impl FnOnce() -> R) -> i32 {
    // "不应该调用资源申请、资源释放、Stream同步、Device同步、任务下发…等接口"
    // (aclrtLaunchHostFunc.md): a callback must not call the runtime.
    if IN_CALLBACK.with(Cell::get) || dipu_fakekit::host::in_callback() {
        let text =
            format!("{symbol}: called from a host callback, which must not call ACL or HCCL");
        set_message(&text);
        trace(symbol, internal, &text);
        return internal;
    }
    if dipu_fakekit::thread::forked() {
        let text = format!("{symbol}: called in a child of the process that initialised ACL");
        set_message(&text);
        trace(symbol, internal, &text);
        return internal;
    }
    if let Some(code) = crate::config::get().faults.fail(symbol) {
        let text = format!("{symbol}: injected fault (DIPU_FAKE_FAULTS)");
        set_message(&text);
        trace(symbol, code, "injected");
        return code;
    }
    let result = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        fail(
            internal,
            format!("{symbol}: the fake panicked (a bug in the fake)"),
        )
    });
    match result {
        Ok(()) => {
            trace(symbol, 0, "");
            0
        }
        Err(f) => {
            let text = format!("{symbol}: {}", f.message);
            set_message(&text);
            trace(symbol, f.code, &f.message);
            f.code
        }
    }
}

/// One line of the call trace (`DIPU_FAKE_TRACE`): `symbol -> code (note)`.
pub(crate) fn trace(symbol: &str, code: i32, note: &str) {
    dipu_fakekit::trace::call(symbol, || {
        if note.is_empty() {
            format!("-> {code}")
        } else {
            format!("-> {code} ({note})")
        }
    });
}

/// An injected out-of-memory (`oom@N` in `DIPU_FAKE_FAULTS`) for this
/// allocation, if it is the one.
pub(crate) fn injected_oom() -> R {
    if crate::config::get().faults.oom() {
        return fail(
            code::RT_MEMORY_ALLOCATION,
            "injected out of memory (DIPU_FAKE_FAULTS oom@N)",
        );
    }
    Ok(())
}

/// Writes `value` through an out-pointer, refusing null.
pub(crate) fn out<T>(ptr: *mut T, value: T, what: &str) -> R {
    if ptr.is_null() {
        return fail(code::INVALID_PARAM, format!("{what} is null"));
    }
    // SAFETY: non-null; the caller of the C function passes a valid
    // out-pointer, as its prototype requires.
    unsafe { ptr.write(value) };
    Ok(())
}
