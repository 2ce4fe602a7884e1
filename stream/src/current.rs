//! The calling thread's current device and current stream of each device,
//! kept per context.

use std::cell::RefCell;

use dipu_deviceapi::{Result, StreamHandle};

use crate::stream::StreamId;
use crate::{DeviceContext, Stream};

/// One thread's state for one context.
struct ThreadState {
    ctx_id: usize,
    /// The current device, once known.
    device: Option<i32>,
    /// The current stream of each device (`None`: the default stream).
    streams: Vec<Option<(StreamId, StreamHandle)>>,
}

thread_local! {
    static STATES: RefCell<Vec<ThreadState>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's state for `ctx`, creating it on first use.
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
pub(crate) fn current_device(ctx: &DeviceContext) -> Result<i32> {
    with_state(ctx, |state| match state.device {
        Some(device) => Ok(device),
        None => {
            let device = ctx.api().current_device()?;
            state.device = Some(device);
            Ok(device)
        }
    })
}

/// Makes `device` current; calls the vendor only when it changes.
pub(crate) fn set_device(ctx: &DeviceContext, device: i32) -> Result<()> {
    ctx.check_device(device)?;
    with_state(ctx, |state| {
        if state.device != Some(device) {
            ctx.api().set_device(device)?;
            state.device = Some(device);
        }
        Ok(())
    })
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
