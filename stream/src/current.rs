//! The calling thread's current device and current stream of each device,
//! kept per context.

use std::cell::{Cell, RefCell};

use dipu_deviceapi::{Result, StreamHandle};

use crate::stream::StreamId;
use crate::{DeviceContext, Stream};

/// One thread's state for one context.
struct ThreadState {
    ctx_id: usize,
    /// The current device while another context is the recent one.
    device: Option<i32>,
    /// The current stream of each device (`None`: the default stream).
    streams: Vec<Option<(StreamId, StreamHandle)>>,
}

thread_local! {
    static STATES: RefCell<Vec<ThreadState>> = const { RefCell::new(Vec::new()) };
    /// The context this thread used last and its current device, kept
    /// apart from `STATES` so the common case is one plain cell read.
    /// Context ids start at 1, so `(0, _)` means none.
    static RECENT_DEVICE: Cell<(usize, i32)> = const { Cell::new((0, 0)) };
}

/// Runs `f` on this thread's state for `ctx`, creating it on first use.
#[inline]
fn with_state<R>(ctx: &DeviceContext, f: impl FnOnce(&mut ThreadState) -> R) -> R {
    STATES.with(|states| {
        let mut states = states.borrow_mut();
        let index = match states.iter().position(|s| s.ctx_id == ctx.id) {
            Some(index) => index,
            None => {
                states.push(ThreadState {
                    ctx_id: ctx.id,
                    device: None,
                    streams: vec![None; ctx.device_count() as usize],
                });
                states.len() - 1
            }
        };
        f(&mut states[index])
    })
}

/// The calling thread's current device.
#[inline]
pub(crate) fn current_device(ctx: &DeviceContext) -> Result<i32> {
    match RECENT_DEVICE.get() {
        (id, device) if id == ctx.id => Ok(device),
        _ => make_recent(ctx),
    }
}

/// Makes `device` current and returns the device current before; calls
/// the vendor only when the device changes.
#[inline]
pub(crate) fn exchange_device(ctx: &DeviceContext, device: i32) -> Result<i32> {
    ctx.check_device(device)?;
    let original = current_device(ctx)?;
    if original != device {
        ctx.api().set_device(device)?;
        RECENT_DEVICE.set((ctx.id, device));
    }
    Ok(original)
}

/// Moves `ctx`'s current device into the fast cell and returns it; the
/// previous context's device is parked in its state (or, if it has none,
/// asked of its vendor again next time, which tracks it per thread too).
#[cold]
fn make_recent(ctx: &DeviceContext) -> Result<i32> {
    let (parked_id, parked_device) = RECENT_DEVICE.replace((0, 0));
    let stored = STATES.with(|states| {
        let mut states = states.borrow_mut();
        if let Some(parked) = states.iter_mut().find(|s| s.ctx_id == parked_id) {
            parked.device = Some(parked_device);
        }
        states
            .iter_mut()
            .find(|s| s.ctx_id == ctx.id)
            .and_then(|s| s.device.take())
    });
    let device = match stored {
        Some(device) => device,
        None => ctx.api().current_device()?,
    };
    RECENT_DEVICE.set((ctx.id, device));
    Ok(device)
}

/// The calling thread's current stream on `device`.
pub(crate) fn current_stream(ctx: &'static DeviceContext, device: i32) -> Result<Stream> {
    let slot = ctx.check_device(device)?;
    let (id, raw) = with_state(ctx, |state| state.streams[slot])
        .unwrap_or((StreamId::DEFAULT, StreamHandle::DEFAULT));
    Ok(Stream {
        ctx,
        device,
        id,
        raw,
    })
}

/// Makes `stream` the current stream of its device; returns the one it replaced.
pub(crate) fn exchange_stream(stream: Stream) -> Stream {
    let ctx = stream.ctx;
    let slot = stream.device as usize;
    let previous = with_state(ctx, |state| {
        state.streams[slot].replace((stream.id, stream.raw))
    });
    let (id, raw) = previous.unwrap_or((StreamId::DEFAULT, StreamHandle::DEFAULT));
    Stream {
        ctx,
        device: stream.device,
        id,
        raw,
    }
}
