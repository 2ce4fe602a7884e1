//! A decorator that logs every vendor call at `trace` level (DIPU's
//! `DIPU_TRACK_ACL`, for any vendor): `DIPU_LOG=dipu::vendor_call=trace`.

use std::ffi::c_void;
use std::fmt::Debug;
use std::sync::Arc;

use crate::{
    CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, EventHandle, HostCallback,
    MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result, StreamHandle,
};

/// The `tracing` target of per-call vendor traces.
pub const TRACE_TARGET: &str = "dipu::vendor_call";

/// Wraps `api` in [`Traced`] when per-call tracing is enabled, so that it
/// costs nothing otherwise.
pub(crate) fn maybe_traced(api: Arc<dyn DeviceApi>) -> Arc<dyn DeviceApi> {
    if tracing::enabled!(target: TRACE_TARGET, tracing::Level::TRACE) {
        Arc::new(Traced { inner: api })
    } else {
        api
    }
}

/// A vendor whose every call is logged with its arguments and result.
struct Traced {
    inner: Arc<dyn DeviceApi>,
}

impl Traced {
    fn log<T: TraceFmt>(&self, call: Option<String>, result: Result<T>) -> Result<T> {
        let Some(call) = call else { return result };
        match &result {
            Ok(v) => {
                let v = Shown(v);
                tracing::trace!(target: TRACE_TARGET, vendor = self.inner.name(), "{call} -> {v:?}")
            }
            Err(e) => {
                tracing::trace!(target: TRACE_TARGET, vendor = self.inner.name(), "{call} -> error: {e}")
            }
        }
        result
    }
}

/// How an argument or result of a vendor call is written in its trace.
trait TraceFmt {
    fn trace_fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
}

/// Writes a value by its [`TraceFmt`].
struct Shown<'a, T: ?Sized>(&'a T);

impl<T: TraceFmt + ?Sized> Debug for Shown<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.trace_fmt(f)
    }
}

/// Values written as their `Debug`.
macro_rules! by_debug {
    ($($t:ty),*) => {$(
        impl TraceFmt for $t {
            fn trace_fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                Debug::fmt(self, f)
            }
        }
    )*};
}
by_debug!(
    (),
    bool,
    u8,
    i32,
    usize,
    u64,
    f32,
    *mut c_void,
    *const c_void,
    StreamHandle,
    EventHandle,
    CommHandle,
    PhysicalMemHandle,
    CopyKind,
    DataType,
    ReduceOp,
    DeviceProperties,
    MemoryInfo,
    PriorityRange
);

/// A unique id: its length only.
impl TraceFmt for Vec<u8> {
    fn trace_fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().trace_fmt(f)
    }
}

impl TraceFmt for &[u8] {
    fn trace_fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.len())
    }
}

impl TraceFmt for [u8] {
    fn trace_fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.len())
    }
}

impl TraceFmt for HostCallback {
    fn trace_fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<callback>")
    }
}

/// One forwarding method: the call is written (before it runs, as it may
/// consume its arguments) when the trace is on, then logged with its result.
macro_rules! traced_method {
    (vtable_only $($rest:tt)*) => {};
    ($kind:ident $prof:tt [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            let call = tracing::enabled!(target: TRACE_TARGET, tracing::Level::TRACE).then(|| {
                format!(concat!(stringify!($name), "{:?}"), ($(Shown(&$arg),)*))
            });
            // SAFETY: every argument is forwarded unchanged, so the caller's
            // `DeviceApi` safety contract carries over to the inner vendor.
            #[allow(unused_unsafe)]
            let result = unsafe { self.inner.$name($($arg),*) };
            self.log(call, result)
        }
    };
}

crate::device_api_decorator!(Traced, traced_method);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_written_with_their_arguments() {
        let callback: HostCallback = Box::new(|| {});
        let id: &[u8] = &[1, 2, 3];
        let s = StreamHandle::from_raw(7);
        let args = (Shown(&4096usize), Shown(&CopyKind::HostToDevice), Shown(&s));
        assert_eq!(
            format!("memcpy{args:?}"),
            format!("memcpy(4096, HostToDevice, {s:?})")
        );
        assert_eq!(
            format!("{:?}", (Shown(&s), Shown(&callback))),
            format!("({s:?}, <callback>)")
        );
        assert_eq!(format!("{:?}", (Shown(&id),)), "(<3 bytes>,)");
        assert_eq!(format!("{:?}", Shown(&vec![0u8; 128])), "<128 bytes>");
        assert_eq!(format!("{:?}", Shown(&())), "()");
    }
}
