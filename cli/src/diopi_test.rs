//! `dipu diopi-test`: the DIOPI conformance suite (`dipu-diopi-conformance`)
//! against a kernel library, printed as a table or as JSON.

use std::path::PathBuf;

use clap::Args;
use dipu_deviceapi::{Error, ErrorKind};
use dipu_diopi as diopi;
use dipu_diopi_conformance::{self as conformance, Selection};

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
    let selection = match &args.filter {
        Some(f) => Selection::matching(f)?,
        None => Selection::all(),
    };
    if let Some(path) = &args.dump_cases {
        std::fs::write(path, conformance::cases_json(&selection)).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("--dump-cases {}: {e}", path.display()),
            )
        })?;
    }
    let lib = match &args.library {
        Some(p) => diopi::open(p)?,
        None => diopi::open_default()?,
    };
    let report = conformance::run(&lib, &selection)?;
    if args.json {
        crate::outln!("{}", report.json());
    } else {
        crate::outln!("{}", report.table());
        crate::outln!("{}", report.summary());
    }
    if report.success() {
        Ok(())
    } else {
        Err(Failure::ChecksFailed)
    }
}
