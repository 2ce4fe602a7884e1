//! `Profiled`: the `DeviceApi` decorator itself.

use std::ffi::c_void;
use std::sync::Arc;

use dipu_deviceapi::{
    CommHandle, CopyKind, DataType, DeviceApi, DeviceProperties, EventHandle, HostCallback,
    MemoryInfo, PhysicalMemHandle, PriorityRange, ReduceOp, Result, StreamHandle,
};

use super::device::DeviceTimes;
use crate::{enabled, now_ns, Arg, Args, Category, Event, Phase, Track};

/// A vendor whose calls are recorded while the trace is on.
pub(super) struct Profiled {
    pub(super) inner: Arc<dyn DeviceApi>,
    pub(super) device: Arc<DeviceTimes>,
}

/// Records the host slice of a vendor call that started at `t0`.
fn host_slice<T>(name: &'static str, cat: Category, t0: u64, args: Args, result: &Result<T>) {
    let args = match result {
        Ok(_) => args,
        Err(e) => args.with_priority("error", Arg::Str(e.kind().as_str())),
    };
    crate::complete(name, cat, Track::current_thread(), t0, now_ns() - t0, args);
}

/// A call with only a host time: `host!(self, method(args..), Args)`.
macro_rules! host {
    ($self:ident, $method:ident($($arg:expr),*), $args:expr) => {{
        if enabled() {
            let t0 = now_ns();
            // SAFETY: every argument is forwarded unchanged, so the
            // caller's `DeviceApi` contract carries over to the vendor.
            #[allow(unused_unsafe)]
            let result = unsafe { $self.inner.$method($($arg),*) };
            host_slice(stringify!($method), Category::Vendor, t0, $args, &result);
            result
        } else {
            // SAFETY: as above.
            #[allow(unused_unsafe)]
            unsafe { $self.inner.$method($($arg),*) }
        }
    }};
}

/// A call that queues work on `stream`: its host time, and its device
/// time on the stream's track.
macro_rules! queued {
    ($self:ident, $cat:expr, $method:ident($($arg:expr),*), $stream:expr, $args:expr) => {{
        if enabled() {
            let t0 = now_ns();
            let begun = $self.device.begin($stream);
            // SAFETY: every argument is forwarded unchanged, so the
            // caller's `DeviceApi` contract carries over to the vendor.
            let result = unsafe { $self.inner.$method($($arg),*) };
            let args: Args = $args;
            host_slice(stringify!($method), $cat, t0, args, &result);
            if let Some(b) = begun {
                $self.device.end(b, stringify!($method), $cat, args, None);
            }
            result
        } else {
            // SAFETY: as above.
            unsafe { $self.inner.$method($($arg),*) }
        }
    }};
}

fn ptr(p: *const c_void) -> u64 {
    p as usize as u64
}

fn copy_kind(kind: CopyKind) -> &'static str {
    match kind {
        CopyKind::HostToDevice => "HtoD",
        CopyKind::DeviceToHost => "DtoH",
        CopyKind::DeviceToDevice => "DtoD",
        CopyKind::HostToHost => "HtoH",
    }
}

/// A value recorded as an argument of a vendor call's slice.
trait ToArg {
    /// `args` with `self` added under `key`.
    fn add_to(self, args: Args, key: &'static str) -> Args;
}

impl ToArg for usize {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.u64(key, self as u64)
    }
}

impl ToArg for i32 {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.i64(key, self.into())
    }
}

impl ToArg for bool {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.u64(key, self.into())
    }
}

impl ToArg for *mut c_void {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.hex(key, ptr(self))
    }
}

impl ToArg for *const c_void {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.hex(key, ptr(self))
    }
}

/// Handles, in hex.
macro_rules! hex_handles {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn add_to(self, args: Args, key: &'static str) -> Args {
                args.hex(key, self.as_raw())
            }
        }
    )*};
}
hex_handles!(StreamHandle, EventHandle, CommHandle, PhysicalMemHandle);

impl ToArg for CopyKind {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.str(key, copy_kind(self))
    }
}

/// `(count, dtype)`: the bytes of `count` elements.
impl ToArg for (usize, DataType) {
    fn add_to(self, args: Args, key: &'static str) -> Args {
        args.u64(key, (self.0 * self.1.size_in_bytes()) as u64)
    }
}

/// `Args::new()` with `key = value` pairs added in order.
macro_rules! args {
    ($($key:ident = $value:expr),*) => {{
        let args = Args::new();
        $(let args = ToArg::add_to($value, args, stringify!($key));)*
        args
    }};
}

/// One forwarding method, as its PROFILE in `for_each_device_method!`
/// says: a host slice, a host slice and the stream's device time, or
/// written by hand in [`custom`].
macro_rules! profiled_method {
    ($kind:ident (host $(: $($key:ident = $value:expr),*)?) [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            host!(self, $name($($arg),*), args!($($($key = $value),*)?))
        }
    };
    ($kind:ident (queued $cat:ident $stream:ident $(: $($key:ident = $value:expr),*)?) [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            queued!(
                self,
                Category::$cat,
                $name($($arg),*),
                $stream,
                args!($($($key = $value),*)?)
            )
        }
    };
    ($kind:ident (custom) [$($unsafe:tt)?] fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; $($c:tt)*) => {
        $($unsafe)? fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
            // SAFETY: the arguments are passed on unchanged, so the caller's
            // `DeviceApi` contract carries over.
            #[allow(unused_unsafe)]
            unsafe {
                custom::$name(self, $($arg),*)
            }
        }
    };
    ($kind:ident (none) $($rest:tt)*) => {};
}

dipu_deviceapi::device_api_decorator!(Profiled, profiled_method);

/// The methods marked `custom`: besides their slices, they keep the stream
/// and event bookkeeping of [`DeviceTimes`] or time the host callback.
mod custom {
    use super::*;

    pub(super) fn stream_create(p: &Profiled, priority: i32) -> Result<StreamHandle> {
        let stream = host!(p, stream_create(priority), args!(priority = priority))?;
        if let Ok(device) = p.inner.current_device() {
            p.device.stream_created(stream, device);
        }
        Ok(stream)
    }

    /// # Safety
    /// As [`DeviceApi::stream_destroy`].
    pub(super) unsafe fn stream_destroy(p: &Profiled, stream: StreamHandle) -> Result<()> {
        p.device.stream_destroyed(stream);
        host!(p, stream_destroy(stream), args!(stream = stream))
    }

    /// # Safety
    /// As [`DeviceApi::stream_wait_event`].
    pub(super) unsafe fn stream_wait_event(
        p: &Profiled,
        stream: StreamHandle,
        event: EventHandle,
    ) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { p.inner.stream_wait_event(stream, event) };
        }
        let t0 = now_ns();
        let begun = p.device.begin(stream);
        // SAFETY: as above.
        let result = unsafe { p.inner.stream_wait_event(stream, event) };
        let args = args!(stream = stream, event = event);
        host_slice("stream_wait_event", Category::Stream, t0, args, &result);
        let flow = p.device.flow_of(event).map(Phase::FlowEnd);
        if let Some(b) = begun {
            p.device
                .end(b, "stream_wait_event", Category::Stream, args, flow);
        }
        result
    }

    /// # Safety
    /// As [`DeviceApi::launch_host_func`].
    pub(super) unsafe fn launch_host_func(
        p: &Profiled,
        stream: StreamHandle,
        callback: HostCallback,
    ) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { p.inner.launch_host_func(stream, callback) };
        }
        let t0 = now_ns();
        let queued_at = t0;
        let timed: HostCallback = Box::new(move || {
            let t = now_ns();
            callback();
            crate::complete(
                "host_callback",
                Category::Callback,
                Track::current_thread(),
                t,
                now_ns() - t,
                Args::new().u64("queued_us_ago", (t - queued_at) / 1000),
            );
        });
        // SAFETY: as above.
        let result = unsafe { p.inner.launch_host_func(stream, timed) };
        let args = args!(stream = stream);
        host_slice("launch_host_func", Category::Callback, t0, args, &result);
        result
    }

    /// # Safety
    /// As [`DeviceApi::event_destroy`].
    pub(super) unsafe fn event_destroy(p: &Profiled, event: EventHandle) -> Result<()> {
        p.device.event_destroyed(event);
        host!(p, event_destroy(event), args!(event = event))
    }

    /// # Safety
    /// As [`DeviceApi::event_record`].
    pub(super) unsafe fn event_record(
        p: &Profiled,
        event: EventHandle,
        stream: StreamHandle,
    ) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { p.inner.event_record(event, stream) };
        }
        let t0 = now_ns();
        let begun = p.device.begin(stream);
        // SAFETY: as above.
        let result = unsafe { p.inner.event_record(event, stream) };
        let args = args!(stream = stream, event = event);
        host_slice("event_record", Category::Stream, t0, args, &result);
        if let Some(b) = begun {
            let flow = result
                .is_ok()
                .then(|| Phase::FlowStart(p.device.flow_for_record(event)));
            p.device
                .end(b, "event_record", Category::Stream, args, flow);
        }
        result
    }

    /// # Safety
    /// As [`DeviceApi::event_synchronize`].
    pub(super) unsafe fn event_synchronize(p: &Profiled, event: EventHandle) -> Result<()> {
        if !enabled() {
            // SAFETY: forwarded unchanged; the caller's contract carries over.
            return unsafe { p.inner.event_synchronize(event) };
        }
        let t0 = now_ns();
        // SAFETY: as above.
        let result = unsafe { p.inner.event_synchronize(event) };
        let args = args!(event = event);
        host_slice("event_synchronize", Category::Stream, t0, args, &result);
        if let Some(id) = p.device.flow_of(event) {
            crate::record(Event {
                name: "event",
                cat: Category::Stream,
                phase: Phase::FlowEnd(id),
                track: Track::current_thread(),
                ts_ns: t0,
                args: Args::new(),
            });
        }
        result
    }

    pub(super) fn comm_init_rank(
        p: &Profiled,
        world_size: i32,
        unique_id: &[u8],
        rank: i32,
    ) -> Result<CommHandle> {
        if !enabled() {
            return p.inner.comm_init_rank(world_size, unique_id, rank);
        }
        let t0 = now_ns();
        let result = p.inner.comm_init_rank(world_size, unique_id, rank);
        let args = args!(world_size = world_size, rank = rank);
        host_slice("comm_init_rank", Category::Comm, t0, args, &result);
        result
    }
}
