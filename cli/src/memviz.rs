//! `dipu memviz`: a memory snapshot (a pickle from
//! `dipu_memory_dump_snapshot`, `DIPU_MEM_HISTORY` or PyTorch's
//! `torch.cuda.memory._dump_snapshot`), or a `dipu replay` run recorded on
//! the host vendor, turned into a self-contained HTML page and the pickle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use dipu_allocator::history::{History, MemorySnapshot};
use dipu_allocator::replay::replay;
use dipu_allocator::{new_device_allocator_in, Algorithm, AllocatorConfig, SegmentMap};
use dipu_deviceapi::{Error, Result};

use crate::Failure;

/// The arguments of `dipu memviz`.
#[derive(Debug, Args)]
pub(crate) struct MemvizArgs {
    /// A snapshot pickle to draw.
    #[arg(
        value_name = "SNAPSHOT",
        required_unless_present = "replay",
        conflicts_with = "replay"
    )]
    snapshot: Option<PathBuf>,
    /// Instead of a snapshot: replay this allocation trace (`dipu replay`'s
    /// format) on the host vendor with the history on, and draw that.
    #[arg(long, value_name = "TRACE")]
    replay: Option<PathBuf>,
    /// The algorithm for `--replay`; default: $DIPU_DEVICE_MEMCACHING_ALGORITHM, else BF.
    #[arg(long, value_name = "TORCH|BF|BS|RAW", requires = "replay")]
    algo: Option<String>,
    /// Record a short stack with each event of `--replay`.
    #[arg(long, requires = "replay")]
    stacks: bool,
    /// The HTML page to write.
    #[arg(short, long, value_name = "HTML", default_value = "memory.html")]
    output: PathBuf,
    /// Also write the snapshot as a pickle for `torch.cuda._memory_viz`.
    #[arg(long, value_name = "PICKLE")]
    pickle: Option<PathBuf>,
}

/// Reads or records the snapshot and writes the page (and the pickle).
pub(crate) fn run(args: &MemvizArgs) -> Result<(), Failure> {
    let (snapshot, title) = match (&args.snapshot, &args.replay) {
        (Some(path), _) => (read_snapshot(path)?, path.display().to_string()),
        (None, Some(trace)) => {
            let algorithm = match &args.algo {
                Some(name) => name.parse::<Algorithm>().map_err(|e| e.context("--algo"))?,
                None => Algorithm::from_env()?,
            };
            let snap = record_replay(trace, algorithm, args.stacks)?;
            (snap, format!("{} ({algorithm})", trace.display()))
        }
        (None, None) => {
            return Err(Error::invalid_argument("give a SNAPSHOT or --replay TRACE").into())
        }
    };
    let page = crate::memviz_page::render(&snapshot, &title);
    write(&args.output, page.as_bytes())?;
    crate::outln!(
        "{}: {} segments, {} events",
        args.output.display(),
        snapshot.segments.len(),
        snapshot.events()
    );
    if let Some(path) = &args.pickle {
        write(path, &snapshot.to_pickle()?)?;
        crate::outln!(
            "{}: the snapshot for torch.cuda._memory_viz",
            path.display()
        );
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes)
        .map_err(|e| Error::invalid_argument(format!("cannot write {}: {e}", path.display())))
}

fn read_snapshot(path: &Path) -> Result<MemorySnapshot> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid_argument(format!("cannot read {}: {e}", path.display())))?;
    MemorySnapshot::from_pickle(&bytes).map_err(|e| e.context(path.display()))
}

/// Replays `trace` through a recorded allocator on device 0 of the host
/// vendor; the snapshot is taken after the last event, before the replay
/// frees what is still live.
pub(crate) fn record_replay(
    trace: &Path,
    algorithm: Algorithm,
    stacks: bool,
) -> Result<MemorySnapshot> {
    let trace = crate::replay::read_trace(trace)?;
    let ctx = crate::vendor::host_context()?;
    let segments = Arc::new(SegmentMap::new());
    let inner = new_device_allocator_in(
        ctx,
        0,
        algorithm,
        &AllocatorConfig::default(),
        Arc::clone(&segments),
    )?;
    let history = History::new();
    let alloc = history.wrap(0, inner, segments);
    // Every event, and room for the segments' own.
    history.record(2 * trace.events.len() + 4096, stacks);
    let stream = ctx.stream_from_pool(0, false)?;
    let mut seen = 0;
    let mut snapshot = None;
    replay(&trace, alloc.as_ref(), &[stream], |a| {
        seen += 1;
        if seen == trace.events.len() {
            snapshot = Some(history.snapshot([a]));
        }
        Ok(())
    })?;
    snapshot.ok_or_else(|| Error::invalid_argument("the trace has no events"))
}
