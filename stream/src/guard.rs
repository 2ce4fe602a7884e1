//! RAII guards with c10's semantics: each restores what it changed when
//! dropped, also while unwinding from a panic.

use dipu_deviceapi::Result;

use crate::{current, DeviceContext, Stream};

/// Makes a device current for its scope, then restores the previous one.
#[derive(Debug)]
pub struct DeviceGuard<'a> {
    ctx: &'a DeviceContext,
    original: i32,
    current: i32,
}

impl<'a> DeviceGuard<'a> {
    /// Makes `device` current (cheap when it already is).
    pub fn new(ctx: &'a DeviceContext, device: i32) -> Result<Self> {
        let original = current::exchange_device(ctx, device)?;
        Ok(DeviceGuard {
            ctx,
            original,
            current: device,
        })
    }

    /// Switches to another device; the original one is still restored on drop.
    pub fn set_index(&mut self, device: i32) -> Result<()> {
        self.ctx.set_device(device)?;
        self.current = device;
        Ok(())
    }

    /// The device current before the guard.
    pub fn original_device(&self) -> i32 {
        self.original
    }

    /// The device the guard made current.
    pub fn current_device(&self) -> i32 {
        self.current
    }
}

impl Drop for DeviceGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.set_device(self.original) {
            tracing::error!(
                "DeviceGuard could not restore device {}: {e}",
                self.original
            );
        }
    }
}

/// A [`DeviceGuard`] that may hold no device (c10's `OptionalDeviceGuard`).
#[derive(Debug)]
pub struct OptionalDeviceGuard<'a> {
    ctx: &'a DeviceContext,
    guard: Option<DeviceGuard<'a>>,
}

impl<'a> OptionalDeviceGuard<'a> {
    /// Makes `device` current if there is one; does nothing for `None`.
    pub fn new(ctx: &'a DeviceContext, device: Option<i32>) -> Result<Self> {
        let guard = device.map(|d| DeviceGuard::new(ctx, d)).transpose()?;
        Ok(OptionalDeviceGuard { ctx, guard })
    }

    /// Makes `device` current, remembering the original device the first time.
    pub fn set_index(&mut self, device: i32) -> Result<()> {
        match &mut self.guard {
            Some(guard) => guard.set_index(device),
            None => {
                self.guard = Some(DeviceGuard::new(self.ctx, device)?);
                Ok(())
            }
        }
    }

    /// Restores the original device now and holds nothing any more.
    pub fn reset(&mut self) {
        self.guard = None;
    }

    /// The device current before the guard, if it holds one.
    pub fn original_device(&self) -> Option<i32> {
        self.guard.as_ref().map(DeviceGuard::original_device)
    }

    /// The device the guard made current, if it holds one.
    pub fn current_device(&self) -> Option<i32> {
        self.guard.as_ref().map(DeviceGuard::current_device)
    }
}

/// Makes a stream's device current and the stream current on that device;
/// restores both when dropped.
#[derive(Debug)]
pub struct StreamGuard {
    original_stream: Stream,
    current_stream: Stream,
    // Dropped after `drop` has put the original stream back.
    _device: DeviceGuard<'static>,
}

impl StreamGuard {
    /// Switches to `stream`'s device and makes `stream` its current stream.
    pub fn new(stream: Stream) -> Result<Self> {
        let device = DeviceGuard::new(stream.context(), stream.device())?;
        let original_stream = current::exchange_stream(stream);
        Ok(StreamGuard {
            original_stream,
            current_stream: stream,
            _device: device,
        })
    }

    /// The stream that was current on the stream's device before the guard.
    pub fn original_stream(&self) -> Stream {
        self.original_stream
    }

    /// The stream the guard made current.
    pub fn current_stream(&self) -> Stream {
        self.current_stream
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        current::exchange_stream(self.original_stream);
    }
}

/// Makes several streams current, each on its own device, without changing
/// the current device; restores every device's previous stream when dropped.
#[derive(Debug)]
pub struct MultiStreamGuard {
    originals: Vec<Stream>,
}

impl MultiStreamGuard {
    /// Makes each of `streams` current on its device (later ones win when
    /// two share a device).
    pub fn new(streams: &[Stream]) -> Self {
        let originals = streams
            .iter()
            .map(|s| current::exchange_stream(*s))
            .collect();
        MultiStreamGuard { originals }
    }
}

impl Drop for MultiStreamGuard {
    fn drop(&mut self) {
        for original in self.originals.iter().rev() {
            current::exchange_stream(*original);
        }
    }
}
