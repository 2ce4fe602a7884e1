//! One recorded event and its arguments.

use crate::Track;

/// What part of the runtime an event comes from (Chrome's `cat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// A call into the vendor, as the host saw it.
    Vendor,
    /// Work a vendor call queued, as the device ran it.
    Device,
    /// The caching allocator.
    Allocator,
    /// Stream and event operations (and their flow arrows).
    Stream,
    /// Collectives.
    Comm,
    /// Host callbacks run by a stream.
    Callback,
}

impl Category {
    /// The name written to the trace.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Vendor => "vendor",
            Category::Device => "device",
            Category::Allocator => "allocator",
            Category::Stream => "stream",
            Category::Comm => "comm",
            Category::Callback => "callback",
        }
    }
}

/// The shape of an event (Chrome's `ph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A slice lasting `dur_ns` (`X`).
    Complete {
        /// Duration in nanoseconds.
        dur_ns: u64,
    },
    /// A point in time (`i`).
    Instant,
    /// The start of flow arrow `id` (`s`), bound to the slice around it.
    FlowStart(u64),
    /// The end of flow arrow `id` (`f`), bound to the slice around it.
    FlowEnd(u64),
}

/// One argument's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// An unsigned number.
    U64(u64),
    /// A signed number.
    I64(i64),
    /// An address or handle, written in hex.
    Hex(u64),
    /// A fixed string.
    Str(&'static str),
}

/// Most arguments an event carries.
const MAX_ARGS: usize = 4;

/// An event's arguments: up to four named values, kept inline so that
/// recording allocates nothing. Further ones are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Args {
    items: [(&'static str, Arg); MAX_ARGS],
    len: u8,
}

impl Default for Args {
    fn default() -> Self {
        Args::new()
    }
}

impl Args {
    /// No arguments.
    #[inline]
    pub const fn new() -> Args {
        Args {
            items: [("", Arg::U64(0)); MAX_ARGS],
            len: 0,
        }
    }

    /// Adds `key: value`.
    #[inline]
    pub fn with(mut self, key: &'static str, value: Arg) -> Args {
        if (self.len as usize) < MAX_ARGS {
            self.items[self.len as usize] = (key, value);
            self.len += 1;
        }
        self
    }

    /// Adds `key: value`, in place of the last argument when all four
    /// are taken (for what matters more than any other, an error).
    #[inline]
    pub fn with_priority(mut self, key: &'static str, value: Arg) -> Args {
        if (self.len as usize) == MAX_ARGS {
            self.len -= 1;
        }
        self.with(key, value)
    }

    /// Adds an unsigned number.
    #[inline]
    pub fn u64(self, key: &'static str, value: u64) -> Args {
        self.with(key, Arg::U64(value))
    }

    /// Adds a signed number.
    #[inline]
    pub fn i64(self, key: &'static str, value: i64) -> Args {
        self.with(key, Arg::I64(value))
    }

    /// Adds an address or handle (written in hex).
    #[inline]
    pub fn hex(self, key: &'static str, value: u64) -> Args {
        self.with(key, Arg::Hex(value))
    }

    /// Adds a fixed string.
    #[inline]
    pub fn str(self, key: &'static str, value: &'static str) -> Args {
        self.with(key, Arg::Str(value))
    }

    /// The arguments in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Arg)> + '_ {
        self.items[..self.len as usize].iter().copied()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<Arg> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// What happened (`malloc`, `allocate`, `all_reduce`...).
    pub name: &'static str,
    /// Which part of the runtime.
    pub cat: Category,
    /// Slice, instant or flow end.
    pub phase: Phase,
    /// Where it is drawn.
    pub track: Track,
    /// When it started, in [`crate::now_ns`]'s clock.
    pub ts_ns: u64,
    /// Its arguments.
    pub args: Args,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_keep_order_and_ignore_extra() {
        let a = Args::new()
            .u64("a", 1)
            .i64("b", -2)
            .hex("c", 0x10)
            .str("d", "x")
            .u64("e", 5);
        let keys: Vec<_> = a.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", "c", "d"]);
        assert_eq!(a.get("b"), Some(Arg::I64(-2)));
        assert_eq!(a.get("e"), None);
        let a = a.with_priority("error", Arg::Str("out of memory"));
        assert_eq!(a.get("error"), Some(Arg::Str("out of memory")));
        assert_eq!(a.get("d"), None);
        assert_eq!(a.iter().count(), 4);
    }
}
