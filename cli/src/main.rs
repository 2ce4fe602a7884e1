//! `dipu`: inspect a device vendor, run the conformance suite against it,
//! replay allocation traces and benchmark the device allocators and the
//! collectives.
//!
//! ```text
//! dipu info     [--vendor NAME|PATH]
//! dipu selftest [--vendor NAME|PATH] [--filter SUBSTR]
//! dipu replay   TRACE [--algo TORCH|BF|BS|RAW] [--conf DIPU_ALLOC_CONF] [--streams N] [--all]
//! dipu bench alloc [--iterations N]
//! dipu bench comm  [--ranks N] [--sizes MIB,...] [--iterations N]
//! dipu bench store [--clients N] [--cycles N] [--server HOST:PORT]
//! dipu diopi-test [--library PATH] [--filter REGEX] [--json]
//! ```
//!
//! `info` and `selftest` use the vendor `--vendor`, else `DIPU_VENDOR`,
//! else the built-in `host` vendor; `replay` and `bench` always use the
//! built-in host vendor. Logging goes to stderr, filtered by `DIPU_LOG`
//! (default `warn`; `DIPU_LOG=dipu::vendor_call=trace` logs every vendor
//! call).
//!
//! Exit codes: 0 success, 1 a conformance check failed, 2 an error (bad
//! configuration, a vendor that cannot be loaded, no device).

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// `println!` that ignores write errors: when stdout is a closed pipe
/// (`dipu selftest | head`), the command still runs to the end and its exit
/// code still tells the result.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use outln;

mod bench;
mod diopi_test;
mod info;
mod logging;
mod memviz;
mod memviz_page;
mod memviz_paths;
mod replay;
mod selftest;
mod vendor;

/// Inspect a dipu-rs device vendor, run the conformance suite against it,
/// replay allocation traces and benchmark the device allocators.
#[derive(Debug, Parser)]
#[command(name = "dipu", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the vendor (name, version, origin, capabilities) and its devices.
    Info(VendorArg),
    /// Run the conformance suite against the vendor.
    Selftest {
        #[command(flatten)]
        vendor: VendorArg,
        /// Run only the checks whose name contains this text.
        #[arg(long, value_name = "SUBSTR")]
        filter: Option<String>,
    },
    /// Replay an allocation trace through a device allocator on the host
    /// vendor and print peak memory, fragmentation and timings.
    Replay(replay::ReplayArgs),
    /// Draw a memory snapshot, or a recorded replay, as a self-contained
    /// HTML page (timeline, segment map, largest allocations) and a pickle
    /// for torch.cuda._memory_viz.
    Memviz(memviz::MemvizArgs),
    /// Micro-benchmarks on the host vendor.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Check a DIOPI kernel library op by op against CPU references
    /// (strided, aliased and non-default-stream runs included).
    DiopiTest(diopi_test::DiopiTestArgs),
}

/// Which vendor to use.
#[derive(Debug, Args)]
struct VendorArg {
    /// Vendor name (`host`, `cuda`, ...) or path to a vendor plugin (.so);
    /// default: $DIPU_VENDOR, else `host`.
    #[arg(long, value_name = "NAME|PATH")]
    vendor: Option<String>,
}

/// How a command failed.
#[derive(Debug)]
enum Failure {
    /// An error: bad configuration, a vendor that does not load, no device.
    Error(dipu_deviceapi::Error),
    /// The suite ran and some checks failed (already reported).
    ChecksFailed,
}

impl From<dipu_deviceapi::Error> for Failure {
    fn from(e: dipu_deviceapi::Error) -> Self {
        Failure::Error(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = logging::init()
        .map_err(Failure::from)
        .and_then(|()| match cli.command {
            Command::Info(v) => info::run(v.vendor.as_deref()),
            Command::Selftest { vendor, filter } => {
                selftest::run(vendor.vendor.as_deref(), filter.as_deref())
            }
            Command::Replay(args) => replay::run(&args),
            Command::Memviz(args) => memviz::run(&args),
            Command::Bench(what) => bench::run(&what),
            Command::DiopiTest(args) => diopi_test::run(&args),
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::ChecksFailed) => ExitCode::from(1),
        Err(Failure::Error(e)) => {
            eprintln!("dipu: error: {e}");
            ExitCode::from(2)
        }
    }
}
