//! The vendor's record of its allocations: which address ranges are device
//! memory of which device (copies and memsets are checked against it, and
//! a pointer that is not an allocation's start is refused by `free`), the
//! pinned host allocations, and each device's memory budget in use.
//!
//! OpenCL enforces no budget of its own worth the name (PoCL's pages are
//! lazy: 64 allocations of 512 MiB succeed on a 2 GiB device), so the
//! vendor counts, as the host vendor does.

use std::collections::BTreeMap;
use std::ffi::c_void;

use dipu_deviceapi::{Error, Result};
use parking_lot::Mutex;

use crate::handles::Mem;

/// What an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Device memory of a device (SVM).
    Device(i32),
    /// Pinned host memory: a fine-grained SVM buffer.
    HostSvm,
    /// Pinned host memory: a mapped `CL_MEM_ALLOC_HOST_PTR` buffer.
    HostBuffer(Mem),
}

/// One live allocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// The bytes asked for.
    pub(crate) bytes: usize,
    /// What OpenCL returned (the allocation's start may be past it, for
    /// alignment).
    pub(crate) base: usize,
    pub(crate) kind: Kind,
}

#[derive(Debug)]
struct State {
    /// By start address.
    live: BTreeMap<usize, Entry>,
    /// Bytes of device memory in use, by device.
    used: Vec<u64>,
}

/// The live allocations and the budget in use.
#[derive(Debug)]
pub(crate) struct Allocations {
    state: Mutex<State>,
}

impl Allocations {
    /// No allocation yet, on `devices` devices.
    pub(crate) fn new(devices: usize) -> Self {
        Allocations {
            state: Mutex::new(State {
                live: BTreeMap::new(),
                used: vec![0; devices],
            }),
        }
    }

    /// Bytes of `device`'s budget in use.
    pub(crate) fn used(&self, device: i32) -> u64 {
        self.state.lock().used[device as usize]
    }

    /// Counts `bytes` against `device`'s budget of `total`; when they do not
    /// fit, the bytes in use.
    pub(crate) fn reserve(
        &self,
        device: i32,
        bytes: usize,
        total: u64,
    ) -> std::result::Result<(), u64> {
        let mut s = self.state.lock();
        let used = &mut s.used[device as usize];
        match used.checked_add(bytes as u64) {
            Some(after) if after <= total => {
                *used = after;
                Ok(())
            }
            _ => Err(*used),
        }
    }

    /// Gives `bytes` of `device`'s budget back.
    pub(crate) fn unreserve(&self, device: i32, bytes: usize) {
        let mut s = self.state.lock();
        let used = &mut s.used[device as usize];
        *used = used.saturating_sub(bytes as u64);
    }

    /// Records a new allocation at `ptr`.
    pub(crate) fn insert(&self, ptr: *mut c_void, entry: Entry) {
        self.state.lock().live.insert(ptr as usize, entry);
    }

    /// Takes the allocation that starts at `ptr` out of the record if it is
    /// device memory (`device: true`) or pinned host memory; otherwise
    /// `InvalidArgument` saying what `ptr` is (for `call`).
    pub(crate) fn take(&self, ptr: *mut c_void, device: bool, call: &str) -> Result<Entry> {
        let mut s = self.state.lock();
        let at = ptr as usize;
        let right_kind = s
            .live
            .get(&at)
            .is_some_and(|e| matches!(e.kind, Kind::Device(_)) == device);
        match right_kind.then(|| s.live.remove(&at)).flatten() {
            Some(entry) => Ok(entry),
            None => Err(Error::invalid_argument(format!(
                "{call}({ptr:p}): {}",
                what_is(&s.live, at)
            ))),
        }
    }

    /// `Ok` when `ptr..ptr + bytes` lies in one live device allocation (of
    /// `device`, when given); else `InvalidArgument` naming `role` (`the
    /// source`) and what the range is.
    pub(crate) fn check_device_range(
        &self,
        ptr: *const c_void,
        bytes: usize,
        device: Option<i32>,
        role: &str,
    ) -> Result<()> {
        let s = self.state.lock();
        let at = ptr as usize;
        let found = s.live.range(..=at).next_back();
        if let Some((&start, e)) = found {
            if let Kind::Device(d) = e.kind {
                let end_ok = at
                    .checked_add(bytes)
                    .is_some_and(|end| end <= start + e.bytes);
                if at < start + e.bytes && end_ok && device.is_none_or(|want| want == d) {
                    return Ok(());
                }
                if at < start + e.bytes && end_ok {
                    return Err(Error::invalid_argument(format!(
                        "{role} {ptr:p} is memory of device {d}, not of device {}",
                        device.unwrap_or(d)
                    )));
                }
                if at < start + e.bytes {
                    return Err(Error::invalid_argument(format!(
                        "{role} {ptr:p} + {bytes} bytes runs past the end of the device allocation \
                         at {start:#x} ({} bytes on device {d})",
                        e.bytes
                    )));
                }
            }
        }
        Err(Error::invalid_argument(format!(
            "{role} {ptr:p} is not device memory: {}",
            what_is(&s.live, at)
        )))
    }

    /// Every live allocation (the vendor's end).
    pub(crate) fn drain(&self) -> Vec<(usize, Entry)> {
        let mut s = self.state.lock();
        s.used.iter_mut().for_each(|u| *u = 0);
        std::mem::take(&mut s.live).into_iter().collect()
    }
}

/// What the address `at` is, for an error message.
fn what_is(live: &BTreeMap<usize, Entry>, at: usize) -> String {
    let Some((&start, e)) = live.range(..=at).next_back() else {
        return "not memory of this vendor (never allocated, or already freed)".to_owned();
    };
    let what = match e.kind {
        Kind::Device(d) => format!("the device allocation of {} bytes on device {d}", e.bytes),
        Kind::HostSvm | Kind::HostBuffer(_) => {
            format!("the pinned host allocation of {} bytes", e.bytes)
        }
    };
    if at == start {
        format!("{what} (the other kind of memory)")
    } else if at < start + e.bytes {
        format!(
            "{} bytes into {what} at {start:#x}, not its start",
            at - start
        )
    } else {
        "not memory of this vendor (never allocated, or already freed)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(at: usize) -> *mut c_void {
        at as *mut c_void
    }

    #[test]
    fn budget_counts_and_refuses() {
        let a = Allocations::new(2);
        assert_eq!(a.reserve(0, 600, 1000), Ok(()));
        assert_eq!(a.reserve(0, 500, 1000), Err(600));
        assert_eq!(
            a.reserve(1, 1000, 1000),
            Ok(()),
            "devices have their own budgets"
        );
        assert_eq!(a.reserve(0, usize::MAX, u64::MAX), Err(600), "no overflow");
        a.unreserve(0, 600);
        assert_eq!(a.used(0), 0);
    }

    #[test]
    fn frees_and_ranges_are_checked() {
        let a = Allocations::new(2);
        a.insert(
            p(0x1000),
            Entry {
                bytes: 256,
                base: 0x1000,
                kind: Kind::Device(1),
            },
        );
        a.insert(
            p(0x2000),
            Entry {
                bytes: 64,
                base: 0x2000,
                kind: Kind::HostSvm,
            },
        );
        assert!(a
            .check_device_range(p(0x1010), 240, None, "the source")
            .is_ok());
        assert!(a
            .check_device_range(p(0x1010), 16, Some(1), "the source")
            .is_ok());
        let e = a
            .check_device_range(p(0x1010), 16, Some(0), "the source")
            .unwrap_err();
        assert!(
            e.message().contains("memory of device 1, not of device 0"),
            "{e}"
        );
        let e = a
            .check_device_range(p(0x10f0), 32, None, "the destination")
            .unwrap_err();
        assert!(e.message().contains("runs past the end"), "{e}");
        let e = a
            .check_device_range(p(0x2000), 8, None, "the source")
            .unwrap_err();
        assert!(
            e.message()
                .contains("is not device memory: the pinned host allocation"),
            "{e}"
        );
        let e = a.take(p(0x1001), true, "free").unwrap_err();
        assert!(
            e.message().contains("1 bytes into the device allocation"),
            "{e}"
        );
        let e = a.take(p(0x2000), true, "free").unwrap_err();
        assert!(e.message().contains("(the other kind of memory)"), "{e}");
        assert_eq!(a.take(p(0x1000), true, "free").unwrap().bytes, 256);
        let e = a.take(p(0x1000), true, "free").unwrap_err();
        assert!(e.message().contains("already freed"), "{e}");
        assert_eq!(
            a.take(p(0x2000), false, "free_host").unwrap().kind,
            Kind::HostSvm
        );
    }
}
