//! Unit tests of the host vendor through the `DeviceApi` trait.

mod events;
mod faults;
mod memory;
mod streams;
mod vmm;

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, DeviceApi, ErrorKind, Result};

use crate::{HostConfig, HostVendor};

const MIB: u64 = 1 << 20;

/// A vendor with `devices` devices of `memory` bytes each.
fn host(devices: i32, memory: u64) -> HostVendor {
    HostVendor::new(HostConfig {
        devices,
        memory_per_device: memory,
        ..HostConfig::default()
    })
    .expect("valid config")
}

/// The kind of an error that must happen, with its message for asserts.
#[track_caller]
fn err<T: std::fmt::Debug>(result: Result<T>) -> (ErrorKind, String) {
    let e = result.expect_err("the call should fail");
    (e.kind(), e.message().to_owned())
}

/// Reads `bytes` of device memory with a synchronous copy.
#[track_caller]
fn read(host: &HostVendor, ptr: *const c_void, bytes: usize) -> Vec<u8> {
    let mut out = vec![0xEEu8; bytes];
    // SAFETY: callers pass live device memory of at least `bytes`; `out`
    // is a host buffer of `bytes`.
    unsafe {
        host.memcpy(out.as_mut_ptr().cast(), ptr, bytes, CopyKind::DeviceToHost)
            .expect("read back");
    }
    out
}

/// Blocks `stream` (with a host callback) until the returned sender is
/// dropped.
#[track_caller]
fn gate(host: &HostVendor, stream: dipu_deviceapi::StreamHandle) -> std::sync::mpsc::Sender<()> {
    let (open, wait) = std::sync::mpsc::channel::<()>();
    // SAFETY: `stream` is a live stream of `host` (callers' promise).
    unsafe {
        host.launch_host_func(
            stream,
            Box::new(move || {
                let _ = wait.recv();
            }),
        )
        .expect("gate");
    }
    open
}
