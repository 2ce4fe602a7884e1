//! `dipu replay`: an allocation trace through a device allocator on the
//! built-in host vendor (or, with `--vendor`, another one).

use std::path::PathBuf;

use clap::Args;
use dipu_allocator::reference::{self, ModelReport};
use dipu_allocator::replay::{replay, ReplayReport, Trace};
use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig, ENV_CONF, ENV_CONF_ALIAS};
use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_stream::{DeviceContext, Stream};

use crate::Failure;

/// The most streams `--streams` takes: the size of a device's stream pool,
/// beyond which pooled streams repeat.
const MAX_STREAMS: u32 = 32;

const MIB: f64 = (1u64 << 20) as f64;

/// The arguments of `dipu replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The trace: `a <id> <bytes>` and `f <id>` lines, `#` comments
    /// (see allocator/traces).
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// The algorithm; default: $DIPU_DEVICE_MEMCACHING_ALGORITHM, else BF.
    #[arg(long, value_name = "TORCH|BF|BS|RAW")]
    algo: Option<String>,
    /// Allocator options in DIPU_ALLOC_CONF form
    /// (`expandable_segments:True,max_split_size_mb:64`); default:
    /// $DIPU_ALLOC_CONF, else $DIPU_TORCH_ALLOCATOR_CONF, else none.
    #[arg(long, value_name = "DIPU_ALLOC_CONF")]
    conf: Option<String>,
    /// Spread the blocks round-robin over this many pooled streams (with
    /// more than one, every third block is also used on the next stream).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_STREAMS)))]
    streams: u32,
    /// One row per algorithm (TORCH, BF, BS, RAW, and BF with
    /// expandable_segments:True) instead of one algorithm.
    #[arg(long, conflicts_with = "algo")]
    all: bool,
    /// Replay on this vendor (name or plugin path) instead of the built-in
    /// host vendor, on its device 0.
    #[arg(long, value_name = "NAME|PATH")]
    vendor: Option<String>,
}

/// Replays the trace and prints the figures (one algorithm, or a table with
/// `--all`); bad arguments, an unreadable trace or a failing replay are
/// errors (exit 2).
pub(crate) fn run(args: &ReplayArgs) -> Result<(), Failure> {
    let algorithm = match &args.algo {
        Some(name) => name.parse::<Algorithm>().map_err(|e| e.context("--algo"))?,
        None => Algorithm::from_env()?,
    };
    let (config, config_text) = match &args.conf {
        Some(text) => (
            AllocatorConfig::parse(text).map_err(|e| e.context("--conf"))?,
            format!("{text:?} (--conf)"),
        ),
        None => (AllocatorConfig::from_env()?, conf_from_env_text()),
    };
    let trace = read_trace(&args.trace)?;
    let ctx = match &args.vendor {
        Some(spec) => crate::vendor::context_for(spec)?,
        None => crate::vendor::host_context()?,
    };
    let streams: Vec<Stream> = (0..args.streams)
        .map(|_| ctx.stream_from_pool(0, false))
        .collect::<Result<_>>()?;

    crate::outln!("trace:           {}", args.trace.display());
    crate::outln!("config:          {config_text}");
    crate::outln!(
        "streams:         {} pooled{}",
        args.streams,
        if args.streams > 1 {
            " (every third block also used on the next stream)"
        } else {
            ""
        }
    );
    if args.all {
        run_all(ctx, &trace, &config, &streams)
    } else {
        let report = replay_one(ctx, &trace, algorithm, &config, &streams)?;
        crate::outln!("algorithm:       {algorithm}");
        crate::outln!("events:          {}", report.events);
        crate::outln!(
            "peak requested:  {} bytes ({:.2} MiB)",
            report.peak_requested,
            report.peak_requested as f64 / MIB
        );
        crate::outln!(
            "peak reserved:   {} bytes ({:.2} MiB)",
            report.peak_reserved,
            report.peak_reserved as f64 / MIB
        );
        crate::outln!("ratio:           {:.3}", report.ratio());
        crate::outln!("segments:        {}", report.segments);
        crate::outln!("vendor mallocs:  {}", report.vendor_mallocs);
        crate::outln!("allocate:        {} ns", report.allocate_time.as_nanos());
        crate::outln!("free:            {} ns", report.free_time.as_nanos());
        Ok(())
    }
}

/// The table of `--all`.
fn run_all(
    ctx: &'static DeviceContext,
    trace: &Trace,
    config: &AllocatorConfig,
    streams: &[Stream],
) -> Result<(), Failure> {
    crate::outln!("events:          {}", trace.events.len());
    crate::outln!(
        "peak requested:  {} bytes ({:.2} MiB)",
        trace.peak_requested(),
        trace.peak_requested() as f64 / MIB
    );
    crate::outln!();
    crate::outln!(
        "{:<16} {:>16} {:>16} {:>7} {:>9} {:>15} {:>9} {:>8}",
        "algorithm",
        "peak requested",
        "peak reserved",
        "ratio",
        "segments",
        "vendor mallocs",
        "alloc ns",
        "free ns"
    );
    let mut bf = None;
    for algorithm in Algorithm::ALL {
        let report =
            replay_one(ctx, trace, algorithm, config, streams).map_err(|e| e.context(algorithm))?;
        crate::outln!("{}", row(algorithm.name(), &report));
        if algorithm == Algorithm::BestFit {
            bf = Some(report);
        }
    }
    let expandable = AllocatorConfig {
        expandable_segments: true,
        ..config.clone()
    };
    let label = "BF+expandable";
    match replay_one(ctx, trace, Algorithm::BestFit, &expandable, streams) {
        Ok(report) => {
            crate::outln!("{}", row(label, &report));
            if bf.is_some_and(|bf| same_memory(&bf, &report)) {
                crate::outln!();
                crate::outln!(
                    "note: {label} reserved exactly what BF did (same peak, segments and vendor \
                     mallocs): the allocator accepted expandable_segments:True but it seems to \
                     have had no effect"
                );
            }
        }
        Err(e) => crate::outln!("{label:<16} n/a: {e}"),
    }
    crate::outln!();
    crate::outln!("models of DIPU's own allocators (one stream, memory only):");
    let peak_requested = trace.peak_requested();
    for (label, report) in [
        ("DIPU BF model", reference::dipu_bf(trace)),
        ("DIPU BS model", reference::dipu_bs(trace)),
    ] {
        crate::outln!("{}", model_row(label, peak_requested, &report));
    }
    Ok(())
}

/// One row of the `--all` table for a model of another allocator (no times).
fn model_row(label: &str, peak_requested: usize, r: &ModelReport) -> String {
    table_row(
        label,
        peak_requested,
        r.peak_reserved,
        r.segments,
        r.vendor_mallocs,
        &"-",
        &"-",
    )
}

/// One row of the `--all` table.
fn row(label: &str, r: &ReplayReport) -> String {
    table_row(
        label,
        r.peak_requested,
        r.peak_reserved,
        r.segments,
        r.vendor_mallocs,
        &r.allocate_time.as_nanos(),
        &r.free_time.as_nanos(),
    )
}

/// The columns of the `--all` table.
fn table_row(
    label: &str,
    peak_requested: usize,
    peak_reserved: u64,
    segments: u64,
    vendor_mallocs: u64,
    alloc_ns: &dyn std::fmt::Display,
    free_ns: &dyn std::fmt::Display,
) -> String {
    format!(
        "{:<16} {:>12.2} MiB {:>12.2} MiB {:>7.3} {:>9} {:>15} {:>9} {:>8}",
        label,
        peak_requested as f64 / MIB,
        peak_reserved as f64 / MIB,
        peak_reserved as f64 / peak_requested.max(1) as f64,
        segments,
        vendor_mallocs,
        alloc_ns.to_string(),
        free_ns.to_string()
    )
}

/// Whether two replays reserved memory identically.
fn same_memory(a: &ReplayReport, b: &ReplayReport) -> bool {
    (a.peak_reserved, a.segments, a.vendor_mallocs)
        == (b.peak_reserved, b.segments, b.vendor_mallocs)
}

/// Replays `trace` through a fresh allocator, then waits for the streams
/// and gives every segment back, so the next replay starts from nothing.
fn replay_one(
    ctx: &'static DeviceContext,
    trace: &Trace,
    algorithm: Algorithm,
    config: &AllocatorConfig,
    streams: &[Stream],
) -> Result<ReplayReport> {
    let alloc = new_device_allocator(ctx, 0, algorithm, config)?;
    let result = replay(trace, alloc.as_ref(), streams, |_| Ok(()));
    for s in streams {
        s.synchronize()?;
    }
    alloc.empty_cache()?;
    result
}

/// Reads and parses the trace at `path`.
pub(crate) fn read_trace(path: &std::path::Path) -> Result<Trace> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("cannot read the trace {}: {e}", path.display()),
        )
    })?;
    let trace = Trace::parse(&text).map_err(|e| e.context(path.display()))?;
    if trace.events.is_empty() {
        return Err(Error::invalid_argument(format!(
            "the trace {} has no events",
            path.display()
        )));
    }
    Ok(trace)
}

/// Where the options came from when `--conf` is absent, for the header.
fn conf_from_env_text() -> String {
    for name in [ENV_CONF, ENV_CONF_ALIAS] {
        if let Ok(value) = std::env::var(name) {
            return format!("{value:?} (${name})");
        }
    }
    "defaults".to_owned()
}
