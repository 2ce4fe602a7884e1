//! The HTML page of `dipu memviz`: one file with the snapshot as JSON and
//! the script that draws it (`memviz.html`), nothing loaded from elsewhere.

use std::collections::HashMap;
use std::fmt::Write;

use dipu_allocator::history::{Action, Frame, MemorySnapshot};
use dipu_allocator::BlockState;

const TEMPLATE: &str = include_str!("memviz.html");

/// The page for `snapshot`, titled `title`.
pub(crate) fn render(snapshot: &MemorySnapshot, title: &str) -> String {
    let data = to_json(snapshot, title);
    TEMPLATE
        .replace("__TITLE__", &html_escape(title))
        .replace("__DATA__", &data)
}

/// Numbered action codes the script knows (see `memviz.html`).
fn action_code(a: Action) -> u8 {
    match a {
        Action::Alloc => 0,
        Action::FreeRequested => 1,
        Action::FreeCompleted => 2,
        Action::SegmentAlloc => 3,
        Action::SegmentFree => 4,
        Action::Oom => 5,
    }
}

fn state_code(s: BlockState) -> u8 {
    match s {
        BlockState::Allocated => 0,
        BlockState::Free => 1,
        BlockState::Pending => 2,
    }
}

/// Stacks as one text each, numbered once.
#[derive(Default)]
struct Stacks {
    index: HashMap<String, usize>,
    texts: Vec<String>,
}

impl Stacks {
    /// The stack's number, or -1 for none. Files are shown without the
    /// build machine's directories (`memviz_paths`).
    fn id(&mut self, frames: &[Frame]) -> i64 {
        if frames.is_empty() {
            return -1;
        }
        let mut text = String::new();
        for f in frames {
            if f.filename.is_empty() {
                let _ = writeln!(text, "{}", f.name);
            } else {
                let file = crate::memviz_paths::short_path(&f.filename);
                let _ = writeln!(text, "{} ({file}:{})", f.name, f.line);
            }
        }
        let next = self.texts.len();
        let id = *self.index.entry(text.clone()).or_insert(next);
        if id == next {
            self.texts.push(text);
        }
        id as i64
    }
}

/// The snapshot as the JSON the script reads, safe inside a `<script>`.
fn to_json(snapshot: &MemorySnapshot, title: &str) -> String {
    let mut stacks = Stacks::default();
    let mut out = String::with_capacity(64 + 48 * snapshot.events());
    let _ = write!(out, "{{\"title\":{},\"segments\":[", json_str(title));
    for (i, s) in snapshot.segments.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "[{},{},{},{},{},[",
            s.device,
            s.address,
            s.total_size,
            s.stream,
            json_str(&s.pool)
        );
        for (j, b) in s.blocks.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "[{},{},{},{},{}]",
                b.address,
                b.size,
                b.requested_size,
                state_code(b.state),
                stacks.id(&b.frames)
            );
        }
        out.push_str("]]");
    }
    out.push_str("],\"traces\":[");
    for (d, events) in snapshot.device_traces.iter().enumerate() {
        if d > 0 {
            out.push(',');
        }
        out.push('[');
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "[{},{},{},{},{}]",
                action_code(e.action),
                e.addr,
                e.size,
                e.stream,
                stacks.id(&e.frames)
            );
        }
        out.push(']');
    }
    out.push_str("],\"stacks\":[");
    for (i, t) in stacks.texts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_str(t));
    }
    out.push_str("]}");
    out
}

/// A JSON string; `<`, `>` and `&` escaped so that it cannot end the script.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '<' | '>' | '&' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_cannot_close_the_script() {
        assert_eq!(
            json_str("a\"</script>\n"),
            "\"a\\\"\\u003c/script\\u003e\\n\""
        );
        let page = render(&MemorySnapshot::default(), "<b>");
        assert!(page.contains("&lt;b&gt;"));
        assert!(!page.contains("<b>"));
        assert!(!page.contains("__DATA__"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing from the network"
        );
    }

    #[test]
    fn stacks_show_paths_relative_to_the_workspace() {
        use dipu_allocator::history::{Block, Segment};
        let ws = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let frame = |name: &str, filename: String, line| Frame {
            name: name.into(),
            filename,
            line,
        };
        let frames = vec![
            frame(
                "dipu_allocator::replay::replay",
                format!("{ws}/allocator/src/replay.rs"),
                134,
            ),
            frame(
                "backtrace::trace",
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/backtrace-0.3.74/src/lib.rs"
                    .into(),
                7,
            ),
            frame("train", "/home/u/train.py".into(), 3),
        ];
        let mut snapshot = MemorySnapshot::default();
        snapshot.segments.push(Segment {
            device: 0,
            address: 4096,
            total_size: 512,
            stream: 0,
            pool: "large".into(),
            blocks: vec![Block {
                address: 4096,
                size: 512,
                requested_size: 512,
                state: BlockState::Allocated,
                frames: frames.into(),
            }],
        });
        let page = render(&snapshot, "t");
        assert!(page.contains("dipu_allocator::replay::replay (allocator/src/replay.rs:134)"));
        assert!(page.contains("backtrace::trace (backtrace-0.3.74/src/lib.rs:7)"));
        assert!(
            page.contains("train (/home/u/train.py:3)"),
            "other paths unchanged"
        );
        assert!(!page.contains(&format!("{ws}/")), "no workspace path left");
        assert!(!page.contains(".cargo/registry"));
    }
}
