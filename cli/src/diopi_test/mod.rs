//! `dipu diopi-test`: a DIOPI conformance runner of our own, as
//! diopi_test checks a kernel library without any framework.
//!
//! For every op of include/diopi/functions.h (`ops`: the contract's list
//! first, then the others), seeded inputs are built and a naive CPU
//! reference in `f64` (`refs`) gives the expected outputs. The library's
//! function is called through dipu-diopi on device memory of the runtime
//! (`exec`); the result is compared with diopi_test's rule (`compare`):
//! `|dev-ref| <= atol + rtol*|ref|`, NaN equal to NaN, at most `1e-3*numel`
//! mismatches, atol = rtol = 1e-5 for float32 and 1e-2 / 5e-2 for
//! float16/bfloat16. Inputs must come back unchanged and storage outside a
//! strided output untouched. Each case also runs with strided inputs,
//! strided outputs, `out` aliasing an operand (where the op allows it) and
//! on a non-default stream (`runner`); random ops are checked
//! statistically and for reproducibility from a seed and offset. Ops the
//! library lacks are listed as "not in library". Library-level checks come
//! first (`utest`): vendor name and version, the last-error message after
//! failing calls, two contexts on two streams at once.
//!
//! Adding an op: one entry in the op table (`ops::op(name, sig!(..),
//! cases)`), its C signature from functions.h and a case builder that
//! computes the expected values with a reference.

mod case;
mod compare;
mod dtype;
mod dump;
mod exec;
pub(crate) mod ffi_call;
mod ops;
mod refs;
mod report;
mod rng;
mod runner;
mod tensor;
mod utest;

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use dipu_deviceapi::{Error, ErrorKind};
use dipu_diopi as diopi;

use crate::Failure;

/// `dipu diopi-test` options.
#[derive(Debug, Args)]
pub(crate) struct DiopiTestArgs {
    /// The kernel library to test; default: $DIPU_DIOPI_LIBRARY, else the
    /// one the current vendor ships (the host vendor's
    /// libdiopi_impl_host.so beside the executable).
    #[arg(long, value_name = "PATH")]
    library: Option<PathBuf>,
    /// Test only the ops whose name (`diopiAdd` or `Add`) matches this
    /// regular expression (unanchored: `^Add$` for one op).
    #[arg(long, value_name = "REGEX")]
    filter: Option<String>,
    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write every selected case (arguments, inputs, expected
    /// outputs) to this file as JSON.
    #[arg(long, value_name = "PATH")]
    dump_cases: Option<PathBuf>,
}

/// Runs the ops the filter selects and prints the report; fails with
/// [`Failure::ChecksFailed`] when any op failed.
pub(crate) fn run(args: &DiopiTestArgs) -> Result<(), Failure> {
    let filter =
        match &args.filter {
            Some(f) => Some(regex_automata::meta::Regex::new(f).map_err(|e| {
                Error::new(ErrorKind::InvalidArgument, format!("--filter {f:?}: {e}"))
            })?),
            None => None,
        };
    let selected = |name: &str| {
        filter
            .as_ref()
            .is_none_or(|re| re.is_match(name) || re.is_match(name.trim_start_matches("diopi")))
    };
    let ops: Vec<ops::Op> = ops::all()
        .into_iter()
        .filter(|op| selected(op.name))
        .collect();
    if ops.is_empty() && !utest::NAMES.iter().any(|n| selected(n)) {
        return Err(Failure::Error(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "--filter {:?} selects no op; names look like diopiAdd",
                args.filter.as_deref().unwrap_or("")
            ),
        )));
    }
    if let Some(path) = &args.dump_cases {
        std::fs::write(path, dump::cases_json(&ops)).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("--dump-cases {}: {e}", path.display()),
            )
        })?;
    }
    let rt = dipu_runtime::get()?;
    let lib = match &args.library {
        Some(p) => diopi::open(p)?,
        None => diopi::open_default()?,
    };
    let env = exec::Env {
        default_stream: rt.context().default_stream(0)?,
        side_stream: rt.context().stream_from_pool(0, false)?,
        generator: diopi::generator(0)?,
        lib,
        rt,
    };
    let start = Instant::now();
    let mut report = report::Report {
        library: env.lib.path().display().to_string(),
        ..report::Report::default()
    };
    report.ops.extend(utest::run(&env, selected));
    for op in &ops {
        report.ops.push(runner::run_op(&env, op));
    }
    report.seconds = start.elapsed().as_secs_f64();
    if args.json {
        crate::outln!("{}", report.json());
    } else {
        crate::outln!("{}", report.table());
        crate::outln!("{}", report.summary());
    }
    if report.counts().1 == 0 {
        Ok(())
    } else {
        Err(Failure::ChecksFailed)
    }
}
