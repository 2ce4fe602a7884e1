//! Short stacks: instruction pointers captured at the event, names and
//! lines looked up only when a snapshot is taken.

use std::collections::HashMap;

use super::{Frame, MAX_FRAMES};

/// Return addresses captured per event, the history's and the runtime's
/// own frames included.
const CAPTURED_FRAMES: usize = 3 * MAX_FRAMES;

/// Up to [`CAPTURED_FRAMES`] return addresses, innermost first.
pub(crate) struct Stack {
    ips: Box<[usize]>,
}

impl Stack {
    /// The caller's stack, without resolving it.
    pub(crate) fn capture() -> Stack {
        // The capture machinery and the runtime's own layers come first and
        // are dropped when resolving (an unoptimised build inlines none of
        // them: twenty frames or more), so capture enough to keep
        // [`MAX_FRAMES`] of the caller's.
        let mut ips = Vec::with_capacity(CAPTURED_FRAMES);
        backtrace::trace(|frame| {
            ips.push(frame.ip() as usize);
            ips.len() < CAPTURED_FRAMES
        });
        Stack { ips: ips.into() }
    }

    /// The frames with function names, files and lines, dropping the
    /// history's and the allocator's own frames at the top.
    /// `cache` keeps each address's frames for the next stacks.
    pub(crate) fn resolve(&self, cache: &mut HashMap<usize, Vec<Frame>>) -> Vec<Frame> {
        let mut frames = Vec::new();
        for &ip in self.ips.iter() {
            let at_ip = cache.entry(ip).or_insert_with(|| resolve_ip(ip));
            frames.extend(at_ip.iter().cloned());
        }
        // Inlined library frames (closures, `bool::then`) sit among ours:
        // drop everything up to the last of ours.
        let own = frames
            .iter()
            .rposition(|f| is_own(&f.name))
            .map_or(0, |i| i + 1);
        frames.drain(..own);
        frames.truncate(MAX_FRAMES);
        frames
    }
}

/// The frames at one return address (several when calls were inlined).
fn resolve_ip(ip: usize) -> Vec<Frame> {
    let mut frames = Vec::new();
    backtrace::resolve(ip as *mut std::ffi::c_void, |symbol| {
        let name = symbol
            .name()
            .map_or_else(|| format!("{ip:#x}"), |n| format!("{n:#}"));
        let filename = symbol
            .filename()
            .map_or_else(String::new, |p| p.display().to_string());
        frames.push(Frame {
            name,
            filename,
            line: symbol.lineno().unwrap_or(0),
        });
    });
    frames
}

/// Whether a frame is the capture machinery or the recording wrapper.
fn is_own(name: &str) -> bool {
    name.starts_with("backtrace::")
        || name.contains("dipu_allocator::history::traced::")
        || name.contains("dipu_allocator::history::stacks::")
        || name.contains("dipu_allocator::history::History::push")
        || name.contains("dipu_allocator::history::History::capture")
}
