//! Injected faults (`DIPU_FAKE_FAULTS`): a comma-separated list of
//!
//! - `fail:SYMBOL[:CODE][@N]`: the N-th call (1-based) of `SYMBOL`, or every
//!   call without `@N`, returns `CODE` (default 507000, an internal error)
//!   instead of running. `fail:aclrtMalloc:207001` is out of memory,
//!   `fail:aclrtStreamQuery:507004` a stream that never reports done;
//! - `events:N`: at most N events with `ACL_EVENT_SYNC` per device (the real
//!   limit is 65536);
//! - `no_peer`: `aclrtDeviceCanAccessPeer` says no (copies between devices
//!   must then go through the host);
//! - `hccl_timeout_ms:N`: how long a rank waits for the others in a
//!   collective before its communicator fails with a timeout (default 60 s).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One `fail:` rule.
#[derive(Debug)]
struct Rule {
    code: i32,
    nth: Option<u64>,
    calls: AtomicU64,
}

/// The parsed fault list.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    rules: HashMap<String, Rule>,
    pub(crate) event_limit: Option<usize>,
    pub(crate) no_peer: bool,
    pub(crate) hccl_timeout_ms: Option<u64>,
}

impl Faults {
    /// Parses the list; the error names the bad entry.
    pub(crate) fn parse(spec: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || format!("bad entry {entry:?} (see docs/ascend.md for the syntax)");
            let mut parts = entry.splitn(2, ':');
            match (parts.next(), parts.next()) {
                (Some("no_peer"), None) => faults.no_peer = true,
                (Some("events"), Some(n)) => {
                    faults.event_limit = Some(n.parse().map_err(|_| bad())?)
                }
                (Some("hccl_timeout_ms"), Some(n)) => {
                    faults.hccl_timeout_ms = Some(n.parse().map_err(|_| bad())?)
                }
                (Some("fail"), Some(rest)) => {
                    let (rest, nth) = match rest.split_once('@') {
                        Some((r, n)) => (r, Some(n.parse::<u64>().map_err(|_| bad())?)),
                        None => (rest, None),
                    };
                    let (symbol, code) = match rest.split_once(':') {
                        Some((s, c)) => (s, c.parse::<i32>().map_err(|_| bad())?),
                        None => (rest, 507_000),
                    };
                    if symbol.is_empty() || nth == Some(0) {
                        return Err(bad());
                    }
                    faults.rules.insert(
                        symbol.to_owned(),
                        Rule {
                            code,
                            nth,
                            calls: AtomicU64::new(0),
                        },
                    );
                }
                _ => return Err(bad()),
            }
        }
        Ok(faults)
    }

    /// The code this call of `symbol` must fail with, if any.
    pub(crate) fn check(&self, symbol: &str) -> Option<i32> {
        let rule = self.rules.get(symbol)?;
        let call = rule.calls.fetch_add(1, Ordering::Relaxed) + 1;
        match rule.nth {
            Some(n) if n != call => None,
            _ => Some(rule.code),
        }
    }
}
