//! `dipu memviz` end to end: its pickle read by PyTorch's own
//! `torch.cuda._memory_viz` (from `.venv-torch`, or `DIPU_TORCH_PYTHON`),
//! and its page loaded in headless Chromium (Debian's `chromium`,
//! installed by scripts/setup.sh): not blank, the expected number of
//! segments, and 100 000 events drawn within the issue's bound.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../allocator/traces/resnet18.trace"
);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `dipu` with none of the allocator variables inherited.
fn dipu(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_LOG",
        "DIPU_DEVICE_MEMCACHING_ALGORITHM",
        "DIPU_ALLOC_CONF",
        "DIPU_TORCH_ALLOCATOR_CONF",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("run dipu")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `dipu memviz` with `args` and returns the segment count it printed.
fn memviz(args: &[&str]) -> usize {
    let mut all = vec!["memviz"];
    all.extend_from_slice(args);
    let out = dipu(&all);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().next().expect("a summary line");
    let n = line
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok());
    n.unwrap_or_else(|| panic!("no segment count in {line:?}"))
}

fn python() -> PathBuf {
    let python = std::env::var_os("DIPU_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv-torch/bin/python"));
    assert!(
        python.exists(),
        "{} does not exist: these tests need PyTorch's memory viewer. Run scripts/torch-env.sh, \
         or set DIPU_TORCH_PYTHON to a Python that has torch.",
        python.display()
    );
    python
}

/// Headless Chromium on `page` with `args` (a fresh profile each time).
fn chromium(dir: &Path, page: &Path, args: &[&str]) -> Output {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium is missing: scripts/setup.sh installs Debian's chromium");
    assert!(out.status.success(), "chromium: {}", text(&out));
    out
}

/// The text of the element with `id` in a dumped DOM, and its
/// `data-segments` when it has one.
fn element(dom: &str, id: &str) -> (String, Option<usize>) {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let tag_end = at + dom[at..].find('>').unwrap();
    let attrs = &dom[at..tag_end];
    let segments = attrs.find("data-segments=\"").map(|i| {
        let rest = &attrs[i + 15..];
        rest[..rest.find('"').unwrap()].parse().unwrap()
    });
    let body = &dom[tag_end + 1..];
    (body[..body.find("</").unwrap()].to_owned(), segments)
}

/// The page's own render time in ms, and its segment count, after loading it.
fn load(dir: &Path, page: &Path) -> (f64, usize) {
    let out = chromium(dir, page, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    let (status, _) = element(&dom, "status");
    assert!(!status.contains("error"), "the page failed: {status}");
    let (ms, _) = element(&dom, "render-ms");
    let (_, segments) = element(&dom, "segment-count");
    (
        ms.parse().expect("render-ms"),
        segments.expect("data-segments"),
    )
}

#[test]
fn torch_memory_viz_reads_our_pickle() {
    let dir = tempfile::tempdir().unwrap();
    let pickle = dir.path().join("resnet18.pickle");
    let html = dir.path().join("resnet18.html");
    let segments = memviz(&[
        "--replay",
        TRACE,
        "-o",
        html.to_str().unwrap(),
        "--pickle",
        pickle.to_str().unwrap(),
    ]);
    assert!(segments > 1, "{segments}");
    // One interpreter (importing torch is most of its time) draws both
    // plots, as `python -m torch.cuda._memory_viz trace_plot|segment_plot`
    // does, and then reads every field in its text views: segment sizes
    // must add up (it checks), and every event must be one it knows.
    let script = r#"
import pickle, sys
from torch.cuda import _memory_viz as v
d = pickle.load(open(sys.argv[1], "rb"))
for plot, out in ((v.trace_plot, sys.argv[2]), (v.segment_plot, sys.argv[3])):
    with open(out, "w") as f:
        f.write(plot(d))
print(v.segsum(d))
t = v.trace(d)
print("TRACE_LINES", len(t.splitlines()))
from collections import Counter
c = Counter(e["action"] for e in d["device_traces"][0])
print("EVENTS", c["alloc"], c["free_requested"], c["free_completed"], c["segment_alloc"] - c["segment_free"])
"#;
    let plots = ["trace_plot", "segment_plot"].map(|p| dir.path().join(format!("{p}.html")));
    let out = Command::new(python())
        .args(["-c", script])
        .arg(&pickle)
        .args(&plots)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    for (plot, path) in ["trace_plot", "segment_plot"].iter().zip(&plots) {
        let page = std::fs::read_to_string(path).unwrap();
        assert!(
            page.contains("snapshot.pickle") && page.len() > 10_000,
            "{plot}: {page:.300}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("segments: {segments}\n")),
        "{stdout:.2000}"
    );
    assert!(!stdout.contains("mismatch"), "{stdout:.2000}");
    // resnet18.trace: 4029 allocations and 3780 frees; the segments made
    // less those given back are the snapshot's.
    let events = stdout
        .lines()
        .find_map(|l| l.strip_prefix("EVENTS "))
        .expect("EVENTS");
    assert_eq!(
        events,
        format!("4029 3780 3780 {segments}"),
        "{stdout:.500}"
    );
}

#[test]
fn page_in_chromium_is_drawn_with_every_segment() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("resnet18.html");
    let pickle = dir.path().join("resnet18.pickle");
    let segments = memviz(&[
        "--replay",
        TRACE,
        "--algo",
        "TORCH",
        "-o",
        html.to_str().unwrap(),
        "--pickle",
        pickle.to_str().unwrap(),
    ]);
    let (_, shown) = load(dir.path(), &html);
    assert_eq!(shown, segments, "the page shows the snapshot's segments");

    // The page of the pickle read back is the same picture.
    let again = dir.path().join("again.html");
    let read = memviz(&[pickle.to_str().unwrap(), "-o", again.to_str().unwrap()]);
    assert_eq!(read, segments);
    assert_eq!(load(dir.path(), &again).1, segments);

    let png = dir.path().join("shot.png");
    chromium(
        dir.path(),
        &html,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1260,1000",
        ],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bytes = &buf[..info.buffer_size()];
    let channels = info.color_type.samples();
    let pixels = bytes.len() / channels;
    let mut colours = std::collections::HashSet::new();
    let mut inked = 0usize;
    for px in bytes.chunks(channels) {
        let rgb = (px[0], px[1], px[2]);
        if rgb != (255, 255, 255) {
            inked += 1;
        }
        colours.insert(rgb);
    }
    assert!(
        inked * 10 > pixels,
        "the screenshot is nearly blank: {inked} of {pixels} pixels drawn"
    );
    assert!(colours.len() > 30, "only {} colours", colours.len());
}

#[test]
fn a_page_of_a_hundred_thousand_events_is_drawn() {
    let dir = tempfile::tempdir().unwrap();
    // 50 000 allocations of 1 KiB to 4 MiB and their frees, at most 64 live.
    let mut trace = String::new();
    let mut state = 12345u64;
    for id in 0..50_000u64 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let bytes = 1024 + (state >> 33) % (4 << 20);
        trace.push_str(&format!("a {id} {bytes}\n"));
        if id >= 64 {
            trace.push_str(&format!("f {}\n", id - 64));
        }
    }
    for id in 50_000 - 64..50_000 {
        trace.push_str(&format!("f {id}\n"));
    }
    let path = dir.path().join("big.trace");
    std::fs::write(&path, trace).unwrap();
    let html = dir.path().join("big.html");
    let segments = memviz(&[
        "--replay",
        path.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    let (ms, shown) = load(dir.path(), &html);
    assert_eq!(shown, segments);
    // The time is a benchmark figure (docs/benchmarks.md, measured with
    // `--nocapture`), not asserted: it depends on the machine.
    eprintln!("memviz: 100 000 events drawn in {ms} ms");
}

#[test]
fn stacks_on_the_page_name_no_directory_of_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("small.trace");
    std::fs::write(&trace, "a 0 4096\na 1 3000000\nf 0\n").unwrap();
    let html = dir.path().join("small.html");
    memviz(&[
        "--replay",
        trace.to_str().unwrap(),
        "--stacks",
        "-o",
        html.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    assert!(
        page.contains("(allocator/src/replay.rs:"),
        "the replay's frame, relative to the repository"
    );
    assert!(
        !page.contains(&format!("{}/", workspace.display())),
        "the page names the workspace directory {}",
        workspace.display()
    );
    assert!(!page.contains("/.cargo/registry/src/"));
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pickle");
    std::fs::write(&junk, b"not a pickle at all").unwrap();
    let out_html = dir.path().join("x.html");
    let out = dipu(&[
        "memviz",
        junk.to_str().unwrap(),
        "-o",
        out_html.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not a pickle"), "{}", text(&out));
    assert!(!out_html.exists());
    let out = dipu(&["memviz", "/nonexistent.pickle"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("cannot read /nonexistent.pickle"),
        "{}",
        text(&out)
    );
    let out = dipu(&["memviz"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
