//! `Report`: the leaks grouped by backtrace, and the violations seen.

use std::fmt::{self, Write as _};
use std::path::Path;
use std::thread::ThreadId;
use std::time::Duration;

use crate::state::Trace;
use crate::Location;

/// Frames of these crates are left out of reports, so the caller's come first.
const SKIPPED: &[&str] = &[
    "dipu_memcheck::",
    "dipu_runtime::",
    "dipu_ffi::",
    "backtrace::",
    "std::",
    "core::",
    "alloc::",
    "__rust",
];

/// One resolved frame of a backtrace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function (demangled, without the hash).
    pub function: String,
    /// The source file, when debug information has it: relative to the
    /// process's working directory when it lies under it, else as the
    /// debug information names it.
    pub file: Option<String>,
    /// The line in `file`.
    pub line: Option<u32>,
}

/// One live block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The address.
    pub ptr: usize,
    /// The bytes requested.
    pub size: usize,
    /// Device or pinned host.
    pub location: Location,
    /// The stream it was allocated on (device memory).
    pub stream: Option<String>,
    /// The allocation's sequence number.
    pub seq: u64,
    /// How long it has been live.
    pub age: Duration,
    /// The allocating thread (name and id).
    pub thread: String,
}

/// The leaks with one backtrace (or, without backtraces, one location).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakGroup {
    /// Blocks in the group.
    pub count: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The allocation's backtrace, without dipu's and the Rust runtime's
    /// frames (empty without backtraces).
    pub frames: Vec<Frame>,
    /// The blocks, largest first.
    pub blocks: Vec<Block>,
}

/// An invalid free or access the checker caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// `double free`, `free of an interior pointer`, `free of an unknown
    /// pointer` or `invalid access`.
    pub kind: String,
    /// The full message, with backtraces.
    pub message: String,
}

/// What the checker found: the live blocks grouped by backtrace (largest
/// group first) and the violations seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Leak groups, largest total first.
    pub groups: Vec<LeakGroup>,
    /// Live blocks in all.
    pub blocks: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Invalid frees and accesses seen (the first 256).
    pub violations: Vec<Violation>,
}

pub(crate) fn thread_name(id: ThreadId) -> String {
    let name = crate::state::thread_name_of(id);
    format!("{} ({id:?})", name.as_deref().unwrap_or("<unnamed>"))
}

pub(crate) fn stream_name(s: Option<crate::StreamId>) -> String {
    s.map_or_else(|| "-".to_owned(), |s| format!("{s:?}"))
}

/// `trace` resolved to frames, without dipu's and the Rust runtime's.
pub(crate) fn resolve(trace: &Trace) -> Vec<Frame> {
    let mut frames = Vec::new();
    let cwd = std::env::current_dir().ok();
    for &ip in trace.addresses() {
        // `resolve` looks up the call instruction (ip - 1) of a return address.
        backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
            let Some(name) = sym.name() else { return };
            let function = format!("{name:#}");
            let bare = function.trim_start_matches('<');
            let file = sym.filename();
            let dipu_export = function.starts_with("dipu_")
                && file.is_some_and(|f| f.extension().is_some_and(|e| e == "rs"));
            if dipu_export || SKIPPED.iter().any(|p| bare.starts_with(p)) {
                return;
            }
            frames.push(Frame {
                function,
                file: file.map(|f| shown_path(f, cwd.as_deref())),
                line: sym.lineno(),
            });
        });
    }
    frames
}

/// `file` relative to `cwd` when it lies under it (a report then names no
/// directory of the machine), else unchanged.
fn shown_path(file: &Path, cwd: Option<&Path>) -> String {
    cwd.and_then(|cwd| file.strip_prefix(cwd).ok())
        .filter(|rest| !rest.as_os_str().is_empty())
        .unwrap_or(file)
        .display()
        .to_string()
}

pub(crate) fn format_frames(frames: &[Frame], indent: &str) -> String {
    let mut s = String::new();
    if frames.is_empty() {
        let _ = writeln!(s, "{indent}(no frames outside dipu)");
    }
    for (i, f) in frames.iter().enumerate() {
        let _ = write!(s, "{indent}#{i} {}", f.function);
        if let Some(file) = &f.file {
            let _ = write!(s, " at {file}:{}", f.line.unwrap_or(0));
        }
        s.push('\n');
    }
    s
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl Report {
    pub(crate) fn build(blocks: Vec<(Block, Option<Trace>)>, violations: Vec<Violation>) -> Self {
        use std::collections::HashMap;
        let mut groups: HashMap<(Vec<Frame>, Option<Location>), LeakGroup> = HashMap::new();
        let mut report = Report {
            violations,
            ..Report::default()
        };
        for (block, bt) in blocks {
            report.blocks += 1;
            report.bytes += block.size as u64;
            let key = match &bt {
                Some(bt) => (resolve(bt), None),
                None => (Vec::new(), Some(block.location)),
            };
            let g = groups.entry(key.clone()).or_insert_with(|| LeakGroup {
                count: 0,
                bytes: 0,
                frames: key.0,
                blocks: Vec::new(),
            });
            g.count += 1;
            g.bytes += block.size as u64;
            g.blocks.push(block);
        }
        report.groups = groups.into_values().collect();
        for g in &mut report.groups {
            g.blocks
                .sort_by(|a, b| b.size.cmp(&a.size).then(a.seq.cmp(&b.seq)));
        }
        report.groups.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.blocks[0].seq.cmp(&b.blocks[0].seq))
        });
        report
    }

    /// Whether nothing is live and nothing was caught.
    pub fn is_clean(&self) -> bool {
        self.blocks == 0 && self.violations.is_empty()
    }

    /// Writes the report to `DIPU_MEM_CHECK_LOG_FILE` (appending), or to
    /// stderr.
    pub fn write(&self) {
        crate::state::write_log(&self.to_string());
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        let mut s = format!(
            "{{\"blocks\":{},\"bytes\":{},\"groups\":[",
            self.blocks, self.bytes
        );
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"count\":{},\"bytes\":{},\"frames\":[",
                g.count, g.bytes
            );
            for (j, f) in g.frames.iter().enumerate() {
                if j > 0 {
                    s.push(',');
                }
                let _ = write!(
                    s,
                    "{{\"function\":{},\"file\":{},\"line\":{}}}",
                    json_str(&f.function),
                    f.file.as_deref().map_or("null".to_owned(), json_str),
                    f.line.map_or("null".to_owned(), |l| l.to_string())
                );
            }
            s.push_str("],\"blocks\":[");
            for (j, b) in g.blocks.iter().enumerate() {
                if j > 0 {
                    s.push(',');
                }
                let device = match b.location {
                    Location::Device(d) => d.to_string(),
                    Location::Host => "null".to_owned(),
                };
                let _ = write!(
                    s,
                    "{{\"ptr\":\"{:#x}\",\"size\":{},\"device\":{device},\"host\":{},\"stream\":{},\"seq\":{},\"age_ms\":{},\"thread\":{}}}",
                    b.ptr,
                    b.size,
                    b.location == Location::Host,
                    b.stream.as_deref().map_or("null".to_owned(), json_str),
                    b.seq,
                    b.age.as_millis(),
                    json_str(&b.thread)
                );
            }
            s.push_str("]}");
        }
        s.push_str("],\"violations\":[");
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"kind\":{},\"message\":{}}}",
                json_str(&v.kind),
                json_str(&v.message)
            );
        }
        s.push_str("]}");
        s
    }
}

fn json_str(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Blocks listed per group; the rest are counted.
const LISTED: usize = 8;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "==== dipu memcheck report ====")?;
        for (i, g) in self.groups.iter().enumerate() {
            writeln!(f, "leak {}: {} block(s), {} bytes", i + 1, g.count, g.bytes)?;
            for b in g.blocks.iter().take(LISTED) {
                writeln!(
                    f,
                    "  {:#x}: {} bytes on {}, stream {}, age {:.3} s, thread {}",
                    b.ptr,
                    b.size,
                    b.location,
                    b.stream.as_deref().unwrap_or("-"),
                    b.age.as_secs_f64(),
                    b.thread
                )?;
            }
            if g.blocks.len() > LISTED {
                writeln!(f, "  ... and {} more", g.blocks.len() - LISTED)?;
            }
            if g.frames.is_empty() {
                writeln!(
                    f,
                    "  allocated at: (no backtrace: set DIPU_MEM_CHECK_ENABLE_BACKTRACE=1)"
                )?;
            } else {
                writeln!(f, "  allocated at:")?;
                f.write_str(&format_frames(&g.frames, "    "))?;
            }
        }
        for v in &self.violations {
            writeln!(f, "{}: {}", v.kind, v.message)?;
        }
        writeln!(
            f,
            "{} blocks, {:.3} MiB leaked ({} bytes); {} invalid frees/accesses",
            self.blocks,
            mib(self.bytes),
            self.bytes,
            self.violations.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_working_directory_are_shown_relative_to_it() {
        let cwd = Path::new("/build/app");
        let shown = |f: &str| shown_path(Path::new(f), Some(cwd));
        assert_eq!(shown("/build/app/src/main.c"), "src/main.c");
        // A sibling directory that merely starts with the same name is not it.
        assert_eq!(shown("/build/app2/main.c"), "/build/app2/main.c");
        assert_eq!(shown("/usr/include/stdio.h"), "/usr/include/stdio.h");
        assert_eq!(
            shown("./csu/../csu/libc-start.c"),
            "./csu/../csu/libc-start.c"
        );
        // The directory itself, or no known directory: unchanged.
        assert_eq!(shown("/build/app"), "/build/app");
        assert_eq!(shown_path(Path::new("/a/b.c"), None), "/a/b.c");
    }
}
