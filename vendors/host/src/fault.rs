//! Injected failures of device mallocs and virtual-memory calls, so the
//! layers above can test their out-of-memory and error paths (retry after
//! freeing the cache, error messages, statistics that stay true).

use parking_lot::Mutex;

use crate::config::{ENV_FAIL_MALLOC_AFTER_BYTES, ENV_FAIL_MALLOC_AT};
use dipu_vendorkit::size::format_size;

/// A failure to inject (see [`crate::HostVendor::set_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No injected failures: clears every setting.
    None,
    /// The N-th device malloc from now on (1-based) fails once with
    /// `OutOfMemory`.
    MallocAt(u64),
    /// Every device malloc fails that would bring the bytes allocated from
    /// now on past this many.
    AfterBytes(u64),
    /// The N-th `vmm_create` from now on (1-based) fails once with
    /// `OutOfMemory`.
    VmmCreateAt(u64),
    /// The N-th `vmm_unmap` from now on (1-based) fails once with
    /// `VendorError`, leaving the range mapped.
    VmmUnmapAt(u64),
}

/// Where a fault setting came from, for the failure's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Env,
    Program,
}

#[derive(Debug, Default)]
struct State {
    /// (N, origin): the N-th counted malloc fails, once.
    malloc_at: Option<(u64, Origin)>,
    /// (limit, origin): mallocs past this many total bytes fail.
    after_bytes: Option<(u64, Origin)>,
    /// Nonzero device mallocs seen since `malloc_at` was set.
    mallocs: u64,
    /// Bytes handed out by device mallocs since `after_bytes` was set.
    total_bytes: u64,
    /// Which `vmm_create` fails.
    vmm_create: NthCall,
    /// Which `vmm_unmap` fails.
    vmm_unmap: NthCall,
}

/// The N-th call from when it was set fails, once.
#[derive(Debug, Default)]
struct NthCall {
    at: Option<u64>,
    seen: u64,
}

impl NthCall {
    fn set(&mut self, n: u64) {
        *self = NthCall {
            at: Some(n),
            seen: 0,
        };
    }

    /// Counts a call; the message of its injected failure if it must fail.
    fn on_call(&mut self, call: &str, fault: &str) -> Option<String> {
        self.seen += 1;
        let n = self.at.filter(|&n| n == self.seen)?;
        self.at = None;
        Some(format!(
            "injected failure: {call} #{n} was made to fail by set_fault(Fault::{fault}({n}))"
        ))
    }
}

/// The fault settings and the counters they watch.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    state: Mutex<State>,
}

impl Faults {
    /// Faults from the environment's settings (counted from now).
    pub(crate) fn from_config(malloc_at: Option<u64>, after_bytes: Option<u64>) -> Faults {
        Faults {
            state: Mutex::new(State {
                malloc_at: malloc_at.map(|n| (n, Origin::Env)),
                after_bytes: after_bytes.map(|b| (b, Origin::Env)),
                ..State::default()
            }),
        }
    }

    /// Installs `fault`, restarting the counter it watches.
    pub(crate) fn set(&self, fault: Fault) {
        let mut s = self.state.lock();
        match fault {
            Fault::None => *s = State::default(),
            Fault::MallocAt(n) => {
                s.malloc_at = Some((n, Origin::Program));
                s.mallocs = 0;
            }
            Fault::AfterBytes(b) => {
                s.after_bytes = Some((b, Origin::Program));
                s.total_bytes = 0;
            }
            Fault::VmmCreateAt(n) => s.vmm_create.set(n),
            Fault::VmmUnmapAt(n) => s.vmm_unmap.set(n),
        }
    }

    /// Counts a `vmm_create`; the message of the injected failure if it must fail.
    pub(crate) fn on_vmm_create(&self) -> Option<String> {
        self.state
            .lock()
            .vmm_create
            .on_call("vmm_create", "VmmCreateAt")
    }

    /// Counts a `vmm_unmap`; the message of the injected failure if it must fail.
    pub(crate) fn on_vmm_unmap(&self) -> Option<String> {
        self.state
            .lock()
            .vmm_unmap
            .on_call("vmm_unmap", "VmmUnmapAt")
    }

    /// Counts a device malloc of `bytes` (nonzero) on `device`; returns the
    /// message of the injected failure if it must fail. A malloc that is let
    /// through is counted in the byte total; call [`Faults::undo`] if it then
    /// fails for another reason.
    pub(crate) fn on_malloc(&self, bytes: u64, device: i32) -> Option<String> {
        let mut s = self.state.lock();
        s.mallocs += 1;
        if let Some((n, origin)) = s.malloc_at {
            if s.mallocs == n {
                s.malloc_at = None;
                let setting = match origin {
                    Origin::Env => format!("{ENV_FAIL_MALLOC_AT}={n}"),
                    Origin::Program => format!("set_fault(Fault::MallocAt({n}))"),
                };
                return Some(format!(
                    "injected failure: device malloc #{n} ({} on device {device}) \
                     was made to fail by {setting}",
                    format_size(bytes)
                ));
            }
        }
        if let Some((limit, origin)) = s.after_bytes {
            let total = s.total_bytes.saturating_add(bytes);
            if total > limit {
                let setting = match origin {
                    Origin::Env => format!("{ENV_FAIL_MALLOC_AFTER_BYTES}={limit}"),
                    Origin::Program => format!("set_fault(Fault::AfterBytes({limit}))"),
                };
                return Some(format!(
                    "injected failure: device malloc of {} on device {device} would bring the \
                     bytes allocated to {total}, past the limit set by {setting}",
                    format_size(bytes)
                ));
            }
        }
        s.total_bytes = s.total_bytes.saturating_add(bytes);
        None
    }

    /// Takes back the bytes of a malloc that [`Faults::on_malloc`] let
    /// through but that failed later.
    pub(crate) fn undo(&self, bytes: u64) {
        let mut s = self.state.lock();
        s.total_bytes = s.total_bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malloc_at_fails_once() {
        let f = Faults::from_config(Some(3), None);
        assert!(f.on_malloc(1, 0).is_none());
        assert!(f.on_malloc(1, 0).is_none());
        let m = f.on_malloc(64, 1).expect("third malloc fails");
        assert!(m.contains("injected"), "{m}");
        assert!(m.contains("DIPU_HOST_FAIL_MALLOC_AT=3"), "{m}");
        assert!(m.contains("device 1"), "{m}");
        assert!((0..10).all(|_| f.on_malloc(1, 0).is_none()), "only once");
    }

    #[test]
    fn after_bytes_fails_every_time_past_the_limit() {
        let f = Faults::default();
        f.set(Fault::AfterBytes(100));
        assert!(f.on_malloc(60, 0).is_none());
        let m = f.on_malloc(41, 0).expect("past the limit");
        assert!(m.contains("set_fault(Fault::AfterBytes(100))"), "{m}");
        assert!(f.on_malloc(41, 0).is_some(), "still past the limit");
        assert!(f.on_malloc(40, 0).is_none(), "exactly the limit is fine");
        f.undo(40);
        assert!(f.on_malloc(40, 0).is_none());
        f.set(Fault::None);
        assert!(f.on_malloc(1 << 40, 0).is_none());
    }

    #[test]
    fn set_restarts_the_count() {
        let f = Faults::default();
        assert!(f.on_malloc(1, 0).is_none());
        f.set(Fault::MallocAt(1));
        let m = f.on_malloc(1, 0).expect("first malloc after set");
        assert!(m.contains("set_fault(Fault::MallocAt(1))"), "{m}");
    }
}
